"""The metrics-row schema: what one line of ``metrics.jsonl`` holds, and the one way to read it back.

Every evaluator returns rows (:class:`Row`); the run decorates them with the run's metadata and the disk
logger appends them to ``<run_dir>/metrics.jsonl``, one JSON object per line, keys in the order written.
A row always has ``group`` (the evaluator's metric group: ``splits``, ``paired``, ``matrix``, ``timing``...)
and ``checkpoint`` (the time step whose checkpoint was evaluated; -1 = the model before training). Split
rows (group ``splits``) name their eval set by ``set`` (the kind: ``unchanged``, ``new``, ``updated``,
``outdated`` or a loader's own kind), ``set_step`` (the step that introduced it, null for Unchanged) and
``set_name``, and hold ``n``, ``em`` and ``f1`` (null when ``n`` is 0). Other keys are the group's metrics.

Shared here: the constants (:data:`ROW_META`, :data:`POOLED_KINDS`, :data:`SPLIT_ORDER`, :data:`ALL`), the
column name and sort key of an eval set (:func:`column_name`, :func:`column_key`), the reader
(:func:`read_metrics`) and a finished run's results as loaded for comparisons (:class:`Run`,
:func:`load_run`), used by the loggers, the gate, the report and the evaluators that read earlier rows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, TypedDict

from evolve_train.data.timeline import SET_KINDS
from evolve_train.config_renames import EVALUATORS
from evolve_train.errors import EvolveTrainError
from evolve_train.evaluation.metrics.directions import RENAMED
from evolve_train.utils.io import JsonlError, iter_jsonl

METRICS_FILE = "metrics.jsonl"
SPLITS = "splits"
"""The group of the per-set EM / F1 rows."""
ALL = "all"
"""``set_name`` of a row over all of its group's sets; in comparisons, Unchanged + New + Updated pooled."""
SPLIT_ORDER = SET_KINDS
"""Split kinds in report order: ``unchanged``, ``new``, ``updated``, ``outdated``."""
POOLED_KINDS = ("unchanged", "new", "updated")
"""Split kinds pooled into ``all`` (Outdated, where lower is better, is reported on its own)."""
WITHIN_STEP = "within_step"
"""``train_log.jsonl`` rows of the within-step probe (``evaluation/within_step.py``)."""
TIMING = "timing"
"""The group of each checkpoint's row of seconds per evaluator (not an evaluation row)."""


def checkpoint_label(checkpoint: int) -> str:
    """``initial`` for the model before any training (checkpoint -1, ``eval.eval_initial``), else the number."""
    return "initial" if checkpoint < 0 else str(checkpoint)


ROW_META = frozenset(
    {
        "group",
        "checkpoint",
        "set",
        "set_name",
        "set_step",
        "store",
        "method",
        "seed",
        "train_seconds",
        "train_tokens",
        "train_tokens_per_s",
        "num_processes",
        "train_optimizer_steps",
        "optimizer_steps",
        "loss_tokens",
        "train_flops",
        "eval_tokens",
        "eval_flops",
        "from_eval_cache",
    }
)
"""Keys that identify a row or describe its run, not a metric of its group."""


class Row(TypedDict, total=False):
    """One line of ``metrics.jsonl`` (a plain dict on disk; the group's metrics are further keys)."""

    group: str
    checkpoint: int
    set: Optional[str]
    set_name: str
    set_step: Optional[int]
    n: int
    em: Optional[float]
    f1: Optional[float]
    method: str
    seed: int
    train_seconds: float
    eval_seconds: float
    train_tokens: int
    train_optimizer_steps: int
    """Optimizer steps that trained the checkpoint (compute, docs/metrics.md#11-compute; the oracle's are step 0's epochs
    over a growing union)."""
    train_tokens_per_s: float
    num_processes: int
    skipped_batches: int


REQUIRED = {"group": (str, "a string"), "checkpoint": (int, "an integer")}
REQUIRED_SPLIT = ("set", "set_step")


class ReportError(EvolveTrainError):
    """A run dir cannot be reported (incomplete, unreadable) or runs cannot be compared."""


def column_name(row: Row) -> str:
    """The eval-set column of a split row: ``unchanged``, ``new_2``..."""
    return row["set"] if row["set_step"] is None else f"{row['set']}_{row['set_step']}"


def column_key(name: str) -> tuple:
    """Report order of eval-set columns: by step (Unchanged first), then split kind, then name. Names that are
    not ``<kind>`` or ``<kind>_<step>`` sort last; the empty name first."""
    if not name:
        return (-2, -1, "")
    kind, _, step = name.partition("_")
    if step and not step.isdigit():
        return (99, 99, name)
    return (int(step) if step else -1, SPLIT_ORDER.index(kind) if kind in SPLIT_ORDER else 99, name)


FORMER_GROUPS = EVALUATORS
"""Former group name -> current one (an evaluator's former name is that of the group of its rows): rows written
under the former name are read under the current one."""


def _current_names(row: dict) -> dict:
    """``row`` with a former group name and former metric keys (also in ``by_kind``) spelled as they are now."""
    if row.get("group") not in FORMER_GROUPS and not RENAMED.keys() & row.keys():
        return row
    row = {RENAMED.get(key, key): value for key, value in row.items()}
    row["group"] = FORMER_GROUPS.get(row["group"], row["group"])
    if isinstance(row.get("by_kind"), dict):
        row["by_kind"] = {
            kind: {RENAMED.get(k, k): v for k, v in stats.items()} if isinstance(stats, dict) else stats
            for kind, stats in row["by_kind"].items()
        }
    return row


def _check_row(row, path: Path, number: int) -> Row:
    if not isinstance(row, dict):
        raise ReportError(f"{path}, line {number}: expected a JSON object, got {type(row).__name__}")
    for key, (kind, described) in REQUIRED.items():
        if not isinstance(row.get(key), kind) or isinstance(row.get(key), bool):
            raise ReportError(f"{path}, line {number}: field '{key}' must be {described}, got {row.get(key)!r}")
    row = _current_names(row)
    if row["group"] == SPLITS:
        for key in REQUIRED_SPLIT:
            if key not in row:
                raise ReportError(f"{path}, line {number}: field '{key}' missing from a '{SPLITS}' row")
    return row


def read_metrics(path: Path | str) -> list[Row]:
    """The rows of ``metrics.jsonl`` (``path``: the file or its run dir); ``[]`` when there is none yet. Rows
    written under a former group or metric name are read under the current one (:data:`FORMER_GROUPS`).

    ReportError names the file, the line and the field of a malformed row.
    """
    path = Path(path)
    if path.is_dir():
        path = path / METRICS_FILE
    if not path.exists():
        return []
    try:
        return [_check_row(row, path, number) for number, row in iter_jsonl(path)]
    except JsonlError as err:
        raise ReportError(str(err)) from None


def _read_plain(path: Path) -> list[dict]:
    try:
        return [row for _, row in iter_jsonl(path)]
    except JsonlError as err:
        raise ReportError(str(err)) from None


@dataclass
class Run:
    """One finished run: its dir, evaluation rows (all groups), summary and training-log rows."""

    path: Path
    rows: list[Row]
    summary: dict
    train_rows: list[dict] = field(default_factory=list)
    label: str = ""
    within_step: list[dict] = field(default_factory=list)
    """The within-step probe's rows of ``train_log.jsonl`` (``group=within_step``; not in ``train_rows``)."""

    @property
    def method(self) -> str:
        return str(self.summary.get("method", "?"))

    @property
    def seed(self):
        return self.summary.get("seed")

    @property
    def experiment(self) -> str:
        return str(self.summary.get("experiment", "?"))

    def group_rows(self, group: str) -> list[Row]:
        return [r for r in self.rows if r.get("group") == group]

    @property
    def split_rows(self) -> list[Row]:
        return self.group_rows(SPLITS)

    @property
    def has_qa(self) -> bool:
        """Whether the run was evaluated on QA items (``splits`` rows); a run of corpora only has other rows."""
        return bool(self.split_rows)

    @property
    def checkpoints(self) -> list[int]:
        """The checkpoints evaluated on QA items; without them (a run of corpora only), every evaluated one."""
        rows = self.split_rows or [r for r in self.rows if r.get("group") != TIMING]
        return sorted({int(r["checkpoint"]) for r in rows})

    @property
    def final_checkpoint(self) -> int:
        return self.checkpoints[-1]

    @property
    def columns(self) -> list[str]:
        """Eval-set names (``unchanged``, ``new_1``...) in report order."""
        return sorted({column_name(r) for r in self.split_rows}, key=column_key)

    def cell(self, checkpoint: int, column: str, metric: str = "em") -> Optional[float]:
        for row in self.split_rows:
            if int(row["checkpoint"]) == checkpoint and column_name(row) == column:
                return row.get(metric)
        return None

    def kind(self, column: str) -> str:
        """The split kind (``set``) of a column's rows."""
        return next((str(r["set"]) for r in self.split_rows if column_name(r) == column), column)

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
        return {str(r["id"]): int(r["correct"]) for r in _read_plain(path)}


def load_run(path: Path | str) -> Run:
    """Read one finished run dir; ReportError names the dir and the missing or malformed file."""
    path = Path(path)
    if not path.is_dir():
        raise ReportError(f"{path}: not a directory")
    metrics, summary_path = path / METRICS_FILE, path / "summary.json"
    if not metrics.exists():
        raise ReportError(f"{path}: incomplete run dir: no {METRICS_FILE}")
    if not summary_path.exists():
        raise ReportError(f"{path}: incomplete run dir: no summary.json (the run has not finished)")
    try:
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ReportError(f"{summary_path}: malformed JSON ({err.msg})") from None
    rows = read_metrics(metrics)
    if not any(r.get("group") not in (None, TIMING) for r in rows):
        raise ReportError(f"{metrics}: no evaluation rows")
    train_log = path / "train_log.jsonl"
    train_rows = _read_plain(train_log) if train_log.exists() else []
    within = [r for r in train_rows if r.get("group") == WITHIN_STEP]
    return Run(
        path=path,
        rows=rows,
        summary=summary,
        train_rows=[r for r in train_rows if r.get("group") != WITHIN_STEP],
        within_step=within,
    )


__all__ = [
    "ALL",
    "METRICS_FILE",
    "POOLED_KINDS",
    "ROW_META",
    "SPLITS",
    "SPLIT_ORDER",
    "ReportError",
    "Row",
    "Run",
    "column_key",
    "column_name",
    "load_run",
    "read_metrics",
]
