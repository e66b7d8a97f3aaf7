"""The report's header: when and by which code it was made, where each run came from (and, for a LoRA run, what
trained at step 0) and how the runs' configs differ.

Each run's provenance is its ``summary.json`` ``provenance`` (``utils/provenance.py``; runs from before it was
recorded show ``-``); its configuration is the saved Hydra config (``.hydra/config.yaml``) or, for a run started
from Python, the result-affecting config in ``state.json`` ``identity``. Run dirs are shown relative to the
report's folder, so a report moved with its runs keeps pointing at them.
"""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path
from typing import Any, Optional

from evolve_train.evaluation.rows import Run
from evolve_train.methods.lora import step0_policy
from evolve_train.reporting.seeds import _differing, saved_config, saved_overrides
from evolve_train.utils.provenance import describe, provenance

MAX_VALUE = 60


def relative(path: Path, out_dir: Path) -> str:
    """``path`` relative to ``out_dir`` (absolute when they share no root, e.g. another drive)."""
    try:
        return os.path.relpath(Path(path).resolve(), Path(out_dir).resolve())
    except ValueError:
        return str(path)


def run_config(run: Run) -> Optional[dict[str, Any]]:
    """The run's flattened config: the saved Hydra config, else ``state.json``'s identity config."""
    config = saved_config(run.path)
    if config is not None:
        return config
    try:
        state = json.loads((run.path / "state.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return ((state or {}).get("identity") or {}).get("config")


def generated_line(when: Optional[datetime.datetime] = None) -> str:
    """``Generated <UTC time> by <commit, versions, machine>``."""
    when = when or datetime.datetime.now(datetime.timezone.utc)
    return f"Generated {when.strftime('%Y-%m-%d %H:%M UTC')} with {describe(provenance())}."


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= MAX_VALUE else text[: MAX_VALUE - 1] + "…"


def provenance_section(runs: list[Run], out_dir: Path):
    """(title, intro, table): each run's dir (relative to the report), creation time, code and machine, command."""
    rows = []
    for run in runs:
        record = run.summary.get("provenance") or {}
        overrides = saved_overrides(run.path)
        rows.append(
            [
                run.label,
                relative(run.path, out_dir),
                str(record.get("created") or "-"),
                describe(record) if record else "-",
                str(record.get("command") or "-"),
                " ".join(f"{k}={v}" for k, v in overrides.items()) if overrides else "-",
            ]
        )
    intro = (
        "Where each run came from (summary.json `provenance`): its dir relative to this report, when it finished, "
        "the commit (dirty: uncommitted changes), library versions, hardware and processes, and its command line."
    )
    policies = step0_policies(runs)
    if policies:
        intro += " Step 0 of the LoRA runs: " + "; ".join(policies) + "."
    header = ["run", "dir", "finished", "code and machine", "command", "overrides"]
    return "Runs and provenance", intro, (header, rows)


def step0_policies(runs: list[Run]) -> list[str]:
    """``<run>: <what trains at step 0>`` for each LoRA run (``methods/lora.py: step0_policy``, the line the run
    printed first), from its saved config."""
    lines = []
    for run in runs:
        config = run_config(run) or {}
        strategies = config.get("method.strategies") or []
        policy = step0_policy(str(config.get("method.name")), strategies, bool(config.get("method.at_step0")))
        if policy is not None:
            lines.append(f"{run.label}: {policy}")
    return lines


def config_section(runs: list[Run]):
    """(title, intro, table) of the config keys whose values differ between the runs (seeds aside); None with
    a single run or no saved configs."""
    configs = [run_config(run) for run in runs]
    known = [(run, c) for run, c in zip(runs, configs) if c is not None]
    if len(known) < 2:
        return None
    keys = [k for k in _differing([c for _, c in known]) if k != "seed"]
    if not keys:
        return None
    header = ["key"] + [run.label for run, _ in known]
    rows = [[key] + [_short(c.get(key, "<absent>")) for _, c in known] for key in keys]
    return "Configuration differences", "The config keys whose values differ between the runs.", (header, rows)


__all__ = ["config_section", "generated_line", "provenance_section", "relative", "run_config", "step0_policies"]
