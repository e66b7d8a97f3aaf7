"""Disk logger: ``metrics.jsonl`` (evaluation rows), ``train_log.jsonl`` and ``summary.json``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from evolve_train.evaluation.rows import METRICS_FILE, read_metrics
from evolve_train.tracking.base import MetricLogger, register_logger
from evolve_train.utils.io import atomic_write_text, read_jsonl, write_jsonl


@register_logger("disk")
class DiskLogger(MetricLogger):
    """Each checkpoint's rows land in ``metrics.jsonl`` in one atomic replace: never half a checkpoint."""

    def __init__(self, run_dir: Path, **_):
        self.run_dir = Path(run_dir)
        self.metrics_path = self.run_dir / METRICS_FILE
        self.train_path = self.run_dir / "train_log.jsonl"

    def truncate_after(self, checkpoint: int, trained: Optional[int] = None) -> None:
        """Drop rows of checkpoints after ``checkpoint`` and training-log rows of steps after ``trained``
        (default ``checkpoint``; a step trained but not evaluated keeps its training log), left by an
        interrupted run."""
        trained = checkpoint if trained is None else trained
        for path, key, last in ((self.metrics_path, "checkpoint", checkpoint), (self.train_path, "time_step", trained)):
            rows = read_jsonl(path)
            kept = [r for r in rows if r.get(key, -1) <= last]
            if len(kept) != len(rows):
                write_jsonl(path, kept)

    def log_train(self, row):
        with self.train_path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(row) + "\n")

    def log_eval(self, checkpoint, rows):
        write_jsonl(self.metrics_path, read_metrics(self.metrics_path) + rows)

    def log_summary(self, summary):
        atomic_write_text(self.run_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
