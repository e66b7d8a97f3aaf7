"""docs/your_data.md runs as written: its ``bash`` blocks, in order, as one script, on the corpus its own command
writes (``tests/helpers/your_data.py``), with a tiny Llama standing in for SmolLM2. Only what the page's last
section says is substituted: ``DATA``/``RUNS`` (temporary directories; the page's two ``export`` lines are left
out) and the model (``evolve-data fetch-model`` left out; ``EVOLVE_TRAIN_CACHE`` holds the tiny Llama as
``models/smollm2-135m``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from evolve_train.run import train
from helpers.llama import save_tiny_llama
from helpers import deadline
from helpers.your_data import write_your_data
from helpers.processes import ROOT

DOC = ROOT / "docs" / "your_data.md"
BLOCK = re.compile(r"^```bash\n(.*?)^```", re.M | re.S)
LEFT_OUT = (re.compile(r"^export (DATA|RUNS)="), re.compile(r"^evolve-data fetch-model\b"))


def doc_commands() -> list[str]:
    """The command lines of the page's ``bash`` blocks (continuations joined), in order."""
    commands = []
    for block in BLOCK.findall(DOC.read_text(encoding="utf-8")):
        for command in block.replace("\\\n", " ").splitlines():
            command = command.strip()
            if command and not command.startswith("#"):
                commands.append(command)
    return commands


def test_the_page_has_the_recipe_and_the_substitutions_it_promises():
    commands = doc_commands()
    left_out = [c for c in commands if any(p.search(c) for p in LEFT_OUT)]
    assert [c.split("=")[0] for c in left_out] == ["export DATA", "export RUNS", "evolve-data fetch-model smollm2-135m"]
    kept = [c.split()[0:2] for c in commands if c not in left_out]
    assert kept == [
        ["python", "tests/helpers/your_data.py"],
        ["evolve-data", "validate"],
        ["python", "train.py"],
        ["evolve-report", "$RUNS"],
    ]
    train = next(c for c in commands if "train.py" in c)
    assert "model=smollm2_135m" in train and "method=full,lora" in train  # the real model, both arms


def slice_nll(run_dir: Path) -> dict[int, dict[int, float]]:
    """P[checkpoint][slice] of the run's ``slices`` rows."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    table: dict[int, dict[int, float]] = {}
    for row in rows:
        if row.get("group") == "slices" and isinstance(row.get("checkpoint"), int):
            table.setdefault(row["checkpoint"], {})[row["set_step"]] = row["nll"]
    return table


@pytest.mark.slow
def test_the_page_runs_as_written(tmp_path):
    cache = tmp_path / "cache"
    save_tiny_llama(cache / "models" / "smollm2-135m")
    env = {
        **os.environ,
        "DATA": str(tmp_path / "mydata"),
        "RUNS": str(tmp_path / "runs"),
        "EVOLVE_TRAIN_CACHE": str(cache),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "WANDB_MODE": "disabled",
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    kept = [c for c in doc_commands() if not any(p.search(c) for p in LEFT_OUT)]
    script = "set -euo pipefail\n" + "\n".join(kept) + "\n"
    result = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    assert "ok: the data is ready to train" in result.stdout
    assert "time steps" in result.stdout and "clm" in result.stdout  # validate: documents -> clm
    runs = sorted(path.parent for path in (tmp_path / "runs").rglob("summary.json"))
    assert {run.relative_to(tmp_path / "runs").parts[0] for run in runs} == {"full", "lora"}
    for run in runs:
        assert (run / "steps" / "2").is_dir()
        table = slice_nll(run)
        assert set(table) >= {0, 1, 2} and all(set(row) == {0, 1, 2} for row in table.values())
    report = tmp_path / "runs" / "report"
    assert (report / "report.md").is_file() and (report / "report.html").is_file()


def test_each_years_slice_is_learned_before_the_next_year(tmp_path):
    """The page's layout (``.txt`` folders, ``data.objective=auto``: every step ``clm``) on the default model and
    trainer (the tiny GPT-2 built from config, ``trainer=cpu_demo``): after training on year k, year k's held-out
    documents (never trained on) have a lower loss than year k+1's, which training on year k+1 then lowers."""
    write_your_data(tmp_path / "mydata")
    overrides = [
        "data=temporal_qa",
        f"data.root={tmp_path / 'mydata'}",
        "+data.train_files.2018=[2018]",
        "+data.train_files.2019=[2019]",
        "+data.train_files.2020=[2020]",
        "data.eval_files=[qa.jsonl]",
        "eval.evaluators=[splits,slices]",
        "logger.backends=[disk]",
        f"run_dir={tmp_path / 'run'}",
    ]
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    assert cfg.data.objective == "auto"
    with deadline(240):
        train(cfg)
    P = slice_nll(tmp_path / "run")
    for k in (0, 1):
        assert P[k][k] < P[k][k + 1], P  # year k learned, year k+1 not yet
        assert P[k + 1][k + 1] < P[k][k + 1], P  # training on year k+1 lowers its slice
