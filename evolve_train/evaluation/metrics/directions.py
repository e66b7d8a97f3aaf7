"""Which way is better for each metric, which keys of a row are metrics, and the names metrics are shown under.

One table, read by the report (the ↑/↓ marks and the every-metric tables), the plots (what is drawn, which axis
is logarithmic) and the release gate (the direction of each check). Definitions: docs/metrics.md.

A metric is looked up by its last name part (``by_kind/case/flip_rate`` is a ``flip_rate``). EM and F1 on an
Outdated set are the exception: an Outdated set's gold is the stale answer, so there lower is better.
"""

from __future__ import annotations

from typing import Optional

HIGHER_IS_BETTER: dict[str, Optional[bool]] = {
    # answers (docs/metrics.md: exact match, token F1, accuracy)
    "em": True,
    "f1": True,
    "acc": True,
    "acc_norm": True,
    "mc_acc": True,
    "acc_original": True,
    "acc_perturbed": True,
    "recall_at_k": True,
    # continual-learning matrix
    "avg_acc": True,
    "bwt": True,
    "fwt": True,
    "fuar": False,  # forgotten per gained (CKL): lower is better
    "forgetting": False,
    "forgetting_max": False,
    "learned": True,  # the learned-knowledge matrix (evaluators/matrix.py): EM of what each step taught
    # temporal
    "update_adoption": True,
    "old_knowledge_retention": True,
    "confusion_index": False,
    "pair_asymmetry": None,
    "true": True,
    "shuffled": None,
    "none": None,
    "timestamp_reliance": None,
    "timestamp_invariance": None,
    "error_share": None,
    # calibration
    "ece": False,
    "brier": False,
    "overconfident_error_rate": False,
    "position_consistency": True,
    # hygiene
    "paraphrase_gap": False,
    "flip_rate": False,
    # language modelling
    "perplexity": False,
    "loss": False,
    "nll": False,
    "mean_loss": False,
    # diagnostics without a better side
    "mean_grad_norm": None,
    "median_grad_norm": None,
}
"""``True``: higher is better; ``False``: lower is better; ``None``: a diagnostic without a better side.
A metric missing here is shown without a mark."""

RENAMED = {"contamination_gap": "paraphrase_gap"}
"""Former key -> current name: rows written under the former key are read under the current name."""

LOG_SCALE = frozenset({"perplexity"})
"""Metrics spanning orders of magnitude: plotted on a logarithmic axis."""

NOT_METRICS = frozenset(
    {"k", "samples", "threshold", "flagged", "mixed_precision", "eval_precision", "tokens", "bootstrap"}
)
"""Keys of a row that are settings or descriptions of the evaluation, not measurements."""


def canonical(name: str) -> str:
    """The current name of a metric key (each ``/``-separated part renamed on its own)."""
    return "/".join(RENAMED.get(part, part) for part in name.split("/"))


def leaf(name: str) -> str:
    return canonical(name).rpartition("/")[2]


def higher_is_better(name: str, set_kind: Optional[str] = None) -> Optional[bool]:
    """The direction of metric ``name`` (a key or ``a/b`` path) on a set of kind ``set_kind``; None: unknown or
    a diagnostic."""
    base = leaf(name)
    if set_kind == "outdated" and base in ("em", "f1"):
        return False
    return HIGHER_IS_BETTER.get(base)


def mark(name: str, set_kind: Optional[str] = None) -> str:
    """``" ↑"`` (higher is better), ``" ↓"`` (lower is better) or ``""``."""
    direction = higher_is_better(name, set_kind)
    return "" if direction is None else (" ↑" if direction else " ↓")


def is_count(name: str) -> bool:
    """Item counts: ``n``, ``n_pairs``, ``mc_n``, ``n_skipped``..."""
    base = name.rpartition("/")[2]
    return base == "n" or base.startswith("n_") or base.endswith("_n")


def is_wall_clock(name: str) -> bool:
    """Keys of metric / training-log rows that measure time or the machine (seconds, tokens per second, peak
    memory, MFU): they differ between two runs of the same command; every other value must not."""
    return "seconds" in name or name.endswith("_per_s") or name in ("peak_mem_gb", "mfu")


def is_metric(name: str) -> bool:
    """Whether key ``name`` of a metric row (after the row's identity keys are removed) is a measurement:
    not a count, a timing, a confidence interval or a setting."""
    base = name.rpartition("/")[2]
    return not (
        is_count(name) or "seconds" in base or base.endswith("_ci") or base.endswith("_per_s") or base in NOT_METRICS
    )


def gate_operator(name: str) -> str:
    """The comparison a release-gate threshold on ``name`` uses: ``<=`` a ceiling on a lower-is-better metric,
    ``>=`` a floor otherwise."""
    return "<=" if higher_is_better(name) is False else ">="


__all__ = [
    "HIGHER_IS_BETTER",
    "LOG_SCALE",
    "NOT_METRICS",
    "RENAMED",
    "canonical",
    "gate_operator",
    "higher_is_better",
    "is_count",
    "is_metric",
    "is_wall_clock",
    "leaf",
    "mark",
]
