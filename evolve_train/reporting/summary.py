"""The run summary: the step x set table of every split, read back from ``metrics.jsonl``."""

from __future__ import annotations

from pathlib import Path

from evolve_train.evaluation.evaluators.report import evaluation_summary, format_evaluation
from evolve_train.tracking.disk import read_jsonl

SPLIT_ORDER = ("unchanged", "new", "updated", "outdated")


def split_rows(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r.get("group") == "splits"]


def column_name(row: dict) -> str:
    return row["set"] if row["set_step"] is None else f"{row['set']}_{row['set_step']}"


def _metric_table(rows: list[dict], metric: str) -> dict[str, dict[str, float | None]]:
    """``{checkpoint: {column: value}}`` from split rows (checkpoint keys are strings, as in JSON)."""
    table: dict[str, dict[str, float | None]] = {}
    for row in split_rows(rows):
        table.setdefault(str(row["checkpoint"]), {})[column_name(row)] = row[metric]
    return table


def build_summary(run_dir: Path, timeline, cfg) -> dict:
    rows = read_jsonl(Path(run_dir) / "metrics.jsonl")
    return {
        "run_dir": str(run_dir),
        "experiment": cfg.experiment,
        "method": cfg.method.name,
        "seed": cfg.seed,
        "steps": [s.name for s in timeline.steps],
        "em": _metric_table(rows, "em"),
        "f1": _metric_table(rows, "f1"),
        "train_seconds": {str(r["checkpoint"]): r.get("train_seconds") for r in split_rows(rows)},
        **evaluation_summary(rows),  # "matrix" (METRICS.md §3) and "groups" (the other evaluators)
    }


def _column_key(name: str):
    kind, _, step = name.partition("_")
    return (int(step) if step else -1, SPLIT_ORDER.index(kind) if kind in SPLIT_ORDER else 99, name)


def format_summary_table(summary: dict) -> str:
    """Checkpoints as rows, sets as columns, EM in the cells."""
    table = summary["em"]
    columns = sorted({c for cells in table.values() for c in cells}, key=_column_key)
    width = max([10] + [len(c) + 1 for c in columns])
    lines = ["EM by checkpoint (rows) and eval set (columns)",
             "ckpt".ljust(6) + "".join(c.rjust(width) for c in columns)]
    for checkpoint in sorted(table, key=int):
        cells = table[checkpoint]
        lines.append(checkpoint.ljust(6) + "".join(
            ("-" if cells.get(c) is None else f"{cells[c]:.3f}").rjust(width) for c in columns))
    evaluation = format_evaluation(summary)
    return "\n".join(lines + ([evaluation] if evaluation else []))
