"""The run summary: the step x set table of every split, read back from ``metrics.jsonl``."""

from __future__ import annotations

from pathlib import Path

from evolve_train.evaluation.evaluators.report import evaluation_summary, format_evaluation
from evolve_train.evaluation.evaluators.slices_summary import format_timesliced, timesliced_summary
from evolve_train.reporting.knowledge import resolved_entries
from evolve_train.evaluation.rows import METRICS_FILE, SPLITS, checkpoint_label, column_key, column_name, read_metrics
from evolve_train.training.plan import training_budget
from evolve_train.training.telemetry import compute_summary
from evolve_train.utils.provenance import provenance


def split_rows(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r.get("group") == SPLITS]


def _metric_table(rows: list[dict], metric: str) -> dict[str, dict[str, float | None]]:
    """``{checkpoint: {column: value}}`` from split rows (checkpoint keys are strings, as in JSON)."""
    table: dict[str, dict[str, float | None]] = {}
    for row in split_rows(rows):
        table.setdefault(str(row["checkpoint"]), {})[column_name(row)] = row[metric]
    return table


def build_summary(run_dir: Path, timeline, cfg) -> dict:
    rows = read_metrics(Path(run_dir) / METRICS_FILE)
    return {
        "run_dir": str(run_dir),
        "experiment": cfg.experiment,
        "method": cfg.method.name,
        "seed": cfg.seed,
        "steps": [s.name for s in timeline.steps],
        "em": _metric_table(rows, "em"),
        "f1": _metric_table(rows, "f1"),
        "train_seconds": {str(r["checkpoint"]): r.get("train_seconds") for r in split_rows(rows)},
        # "matrix" (docs/metrics.md#3-continual-learning-matrix) and "groups" (the other evaluators)
        **evaluation_summary(rows),
        # docs/metrics.md#9-time-sliced-perplexity
        "timesliced": timesliced_summary(rows, Path(run_dir), cfg.eval.oracle_run),
        "knowledge": resolved_entries(rows),  # docs/metrics.md#14-knowledge-cutoff (reporting/knowledge.py)
        "compute": compute_summary(rows),  # docs/metrics.md#11-compute
        **({"budget": budget} if (budget := training_budget(cfg.trainer)) else {}),
        "provenance": provenance(),  # commit, versions, hardware, processes, command (utils/provenance.py)
    }


def format_summary_table(summary: dict) -> str:
    """Checkpoints as rows, sets as columns, EM in the cells (no table without QA sets: a run of corpora only),
    then the other evaluators' lines."""
    table = summary["em"]
    lines = format_em_table(table) if table else []
    extra = [text for text in (format_evaluation(summary), format_timesliced(summary), format_compute(summary)) if text]
    return "\n".join(lines + extra)


def format_em_table(table: dict[str, dict[str, float | None]]) -> list[str]:
    """The lines of the EM table: checkpoints as rows, sets as columns."""
    columns = sorted({c for cells in table.values() for c in cells}, key=column_key)
    width = max([10] + [len(c) + 1 for c in columns])
    lines = [
        "EM by checkpoint (rows) and eval set (columns)",
        "ckpt".ljust(8) + "".join(c.rjust(width) for c in columns),
    ]
    for checkpoint in sorted(table, key=int):
        cells = table[checkpoint]
        lines.append(
            checkpoint_label(int(checkpoint)).ljust(8)
            + "".join(("-" if cells.get(c) is None else f"{cells[c]:.3f}").rjust(width) for c in columns)
        )
    return lines


def format_compute(summary: dict) -> str:
    """One line of training and evaluation compute totals (docs/metrics.md#11-compute)."""
    totals = (summary.get("compute") or {}).get("totals") or {}
    if totals.get("train_flops") is None:
        return ""
    return (
        f"compute: training {totals['train_flops']:.3g} FLOPs, {int(totals['train_tokens'] or 0)} tokens "
        f"({int(totals['loss_tokens'] or 0)} loss tokens), {int(totals['optimizer_steps'] or 0)} optimizer steps, "
        f"{totals['train_seconds'] or 0:.1f} s; evaluation {totals.get('eval_tokens') or 0} tokens, "
        f"{totals.get('eval_seconds') or 0:.1f} s"
    )
