"""Console logger: a compact table of each checkpoint's split metrics."""

from __future__ import annotations

from tqdm.auto import tqdm

from evolve_train.evaluation.rows import checkpoint_label
from evolve_train.tracking.base import MetricLogger, register_logger


def format_checkpoint(checkpoint: int, rows: list[dict]) -> str:
    """One line of EM per eval set; the model before training (checkpoint -1) is ``[checkpoint initial]``."""
    cells = []
    for row in rows:
        if row.get("group") != "splits":
            continue
        label = row["set"] if row["set_step"] is None else f"{row['set']}_{row['set_step']}"
        value = "  n/a" if row["em"] is None else f"{row['em']:.3f}"
        cells.append(f"{label}={value}")
    return f"[checkpoint {checkpoint_label(checkpoint)}] EM  " + "  ".join(cells)


@register_logger("console")
class ConsoleLogger(MetricLogger):
    def __init__(self, **_):
        pass

    def log_eval(self, checkpoint, rows):
        tqdm.write(format_checkpoint(checkpoint, rows))
