"""Loading finished runs for reports: run-dir discovery, metrics rows, summaries and per-item outcomes.

A run dir is complete when it holds ``metrics.jsonl`` and ``summary.json`` (written after the last step).
A sweep dir (``runs/<experiment>/multirun``) expands to the run dirs below it that hold ``metrics.jsonl``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional

from evolve_train.errors import EvolveTrainError
from evolve_train.reporting.summary import _column_key, column_name

ROW_META = {"group", "checkpoint", "set", "set_name", "set_step", "method", "seed", "train_seconds",
            "train_tokens", "num_processes", "n"}
SKIP_DIRS = {"steps", "predictions", "wandb", ".step0_cache", ".hydra"}


class ReportError(EvolveTrainError):
    """A run dir cannot be reported (incomplete, unreadable) or runs cannot be compared."""


def _read_jsonl(path: Path) -> list[dict]:
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise ReportError(f"{path}, line {number}: malformed JSON ({err.msg})") from None
    return rows


@dataclass
class Run:
    """One finished run: its dir, evaluation rows (all groups), summary and training-log rows."""

    path: Path
    rows: list[dict]
    summary: dict
    train_rows: list[dict] = field(default_factory=list)
    label: str = ""

    @property
    def method(self) -> str:
        return str(self.summary.get("method", "?"))

    @property
    def seed(self):
        return self.summary.get("seed")

    @property
    def experiment(self) -> str:
        return str(self.summary.get("experiment", "?"))

    def group_rows(self, group: str) -> list[dict]:
        return [r for r in self.rows if r.get("group") == group]

    @property
    def split_rows(self) -> list[dict]:
        return self.group_rows("splits")

    @property
    def checkpoints(self) -> list[int]:
        return sorted({int(r["checkpoint"]) for r in self.split_rows})

    @property
    def final_checkpoint(self) -> int:
        return self.checkpoints[-1]

    @property
    def columns(self) -> list[str]:
        """Eval-set names (``unchanged``, ``new_1``...) in report order."""
        return sorted({column_name(r) for r in self.split_rows}, key=_column_key)

    def cell(self, checkpoint: int, column: str, metric: str = "em") -> Optional[float]:
        for row in self.split_rows:
            if int(row["checkpoint"]) == checkpoint and column_name(row) == column:
                return row.get(metric)
        return None

    def series(self, column: str, metric: str = "em") -> list[tuple[int, Optional[float]]]:
        """(checkpoint, value) for every checkpoint that evaluated ``column`` (value None when n = 0)."""
        return sorted((int(r["checkpoint"]), r.get(metric)) for r in self.split_rows if column_name(r) == column)

    def n(self, column: str) -> Optional[int]:
        return next((r.get("n") for r in self.split_rows if column_name(r) == column), None)

    def predictions_file(self, checkpoint: int, column: str) -> Path:
        return self.path / "predictions" / f"step_{checkpoint}" / f"{column}.jsonl"

    def outcomes(self, checkpoint: int, column: str) -> dict[str, int]:
        """id -> correct (0/1) from the per-item predictions file; ReportError names a missing file."""
        path = self.predictions_file(checkpoint, column)
        if not path.exists():
            raise ReportError(f"{path}: no per-item predictions (was eval.save_predictions=false?)")
        return {str(r["id"]): int(r["correct"]) for r in _read_jsonl(path)}


def load_run(path: Path | str) -> Run:
    """Read one run dir; ReportError names the dir and the missing/bad file."""
    path = Path(path)
    if not path.is_dir():
        raise ReportError(f"{path}: not a directory")
    metrics, summary_path = path / "metrics.jsonl", path / "summary.json"
    if not metrics.exists():
        raise ReportError(f"{path}: incomplete run dir: no metrics.jsonl")
    if not summary_path.exists():
        raise ReportError(f"{path}: incomplete run dir: no summary.json (the run has not finished)")
    try:
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ReportError(f"{summary_path}: malformed JSON ({err.msg})") from None
    rows = _read_jsonl(metrics)
    if not any(r.get("group") == "splits" for r in rows):
        raise ReportError(f"{metrics}: no evaluation rows (group 'splits')")
    train_log = path / "train_log.jsonl"
    train_rows = _read_jsonl(train_log) if train_log.exists() else []
    return Run(path=path, rows=rows, summary=summary, train_rows=train_rows)


def expand_run_dirs(paths: Iterable[Path | str]) -> list[Path]:
    """Run dirs as given; a dir without metrics.jsonl/summary.json expands to the run dirs below it."""
    found: list[Path] = []
    for path in map(Path, paths):
        if not path.exists():
            raise ReportError(f"{path}: no such directory")
        if (path / "metrics.jsonl").exists() or (path / "summary.json").exists() or not path.is_dir():
            found.append(path)
            continue
        below = sorted(p.parent for p in path.rglob("metrics.jsonl")
                       if not SKIP_DIRS & set(p.relative_to(path).parts[:-1]))
        if not below:
            raise ReportError(f"{path}: incomplete run dir: no metrics.jsonl (nor any run dir below it)")
        found.extend(below)
    unique = list(dict.fromkeys(p.resolve() for p in found))
    return [Path(p) for p in unique]


def label_runs(runs: list[Run]) -> None:
    """Short unique labels: method/seed, prefixed by the experiment when runs mix experiments."""
    experiments = {r.experiment for r in runs}
    for run in runs:
        base = f"{run.method}/seed{run.seed}"
        run.label = f"{run.experiment}/{base}" if len(experiments) > 1 else base
    counts: dict[str, int] = {}
    for run in runs:
        counts[run.label] = counts.get(run.label, 0) + 1
    for run in runs:
        if counts[run.label] > 1:
            run.label = f"{run.label} ({run.path.parent.name}/{run.path.name})"


def load_runs(paths: Iterable[Path | str]) -> list[Run]:
    """Expand, load and label runs; ReportError when none is given or one is incomplete."""
    runs = [load_run(p) for p in expand_run_dirs(paths)]
    if not runs:
        raise ReportError("no run dirs given")
    label_runs(runs)
    return runs
