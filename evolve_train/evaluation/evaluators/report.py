"""The evaluators' part of ``summary.json`` and of the table printed at the end of a run."""

from __future__ import annotations

from typing import Any

from evolve_train.evaluation.evaluators.common import ALL
from evolve_train.evaluation.evaluators.matrix import format_matrix, matrix_summary
from evolve_train.evaluation.evaluators.retrieval import format_retrieval, retrieval_summary
from evolve_train.evaluation.rows import ROW_META

GROUPS = ("paired", "ablation", "dimensions", "calibration", "grad_norms", "paraphrase_gap", "flip_rate", "heldout")
PER_SET = {
    "grad_norms": "mean_grad_norm",
    "paraphrase_gap": "paraphrase_gap",
    "flip_rate": "flip_rate",
    "heldout": "perplexity",
}
"""Groups kept per set in ``summary.json`` (``{checkpoint: {set_name: row}}``), with the value printed per set."""
HEADLINE = {
    "paired": ("update_adoption", "confusion_index", "n_pairs"),
    "ablation": ("true", "shuffled", "none", "timestamp_reliance", "timestamp_invariance"),
    "calibration": ("acc", "acc_norm", "ece", "brier", "overconfident_error_rate", "position_consistency"),
    "dimensions": ("em",),
}


def _interval(ci) -> str:
    """`` [low, high]`` of a 95 % interval (``<metric>_ci``), or nothing."""
    return f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""


def groups_summary(rows: list[dict]) -> dict[str, Any]:
    """``{group: {checkpoint: row}}``: each group's row over all its sets (groups in ``PER_SET``:
    ``{set_name: row}`` per checkpoint, ``all`` included), metadata stripped; groups that did not run are absent."""
    out: dict[str, Any] = {}
    for r in rows:
        group = r.get("group")
        if group not in GROUPS:
            continue
        body = {k: v for k, v in r.items() if k not in ROW_META}
        per_checkpoint = out.setdefault(group, {})
        if group in PER_SET:
            per_checkpoint.setdefault(str(r["checkpoint"]), {})[r["set_name"]] = body
        elif r.get("set_name") == ALL:
            per_checkpoint[str(r["checkpoint"])] = body
    return out


def evaluation_summary(rows: list[dict]) -> dict[str, Any]:
    """The ``matrix`` and ``groups`` keys of ``summary.json``, and ``retrieval`` when the open-book evaluator ran."""
    retrieval = retrieval_summary(rows)
    summary = {"matrix": matrix_summary(rows), "groups": groups_summary(rows)}
    return {**summary, "retrieval": retrieval} if retrieval else summary


def _fmt(value) -> str:
    return "-" if value is None else (f"{value:.3f}" if isinstance(value, float) else str(value))


def format_evaluation(summary: dict[str, Any]) -> str:
    """The learned-knowledge matrix, then one line per group for the last checkpoint."""
    lines = []
    matrix = format_matrix(summary.get("matrix") or {})
    if matrix:
        lines.append(matrix)
    for group, per_checkpoint in (summary.get("groups") or {}).items():
        if not per_checkpoint:
            continue
        last = max(per_checkpoint, key=int)
        body = per_checkpoint[last]
        if group in PER_SET:
            key = PER_SET[group]
            cells = [f"{name}={_fmt(r.get(key))}" + _interval(r.get(f"{key}_ci")) for name, r in body.items()]
        elif group == "dimensions":
            cells = [f"{d}={_fmt(r.get('em'))}" for d, r in (body.get("dimensions") or {}).items()]
        else:
            cells = [
                f"{key}={_fmt(body.get(key))}" + _interval(body.get(f"{key}_ci")) for key in HEADLINE.get(group, ())
            ]
        lines.append(f"{group} @ checkpoint {last}: " + "  ".join(cells))
    lines += format_retrieval(summary.get("retrieval") or {})
    return "\n".join(lines)
