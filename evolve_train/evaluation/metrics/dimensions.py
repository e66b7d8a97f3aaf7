"""Accuracy per EvolveBench dimension and error clustering (docs/metrics.md#6-the-five-dimensions)."""

from __future__ import annotations

from typing import Any, Optional, Sequence

DIMENSIONS = ("version_awareness", "event_ordering", "knowledge_evolution", "trend_extrapolation", "time_localization")


def _checked(dimensions: Sequence[Optional[str]], correct: Sequence[int]) -> list[tuple[str, int]]:
    if len(dimensions) != len(correct):
        raise ValueError(f"{len(dimensions)} dimensions but {len(correct)} scores")
    return [(d, int(c)) for d, c in zip(dimensions, correct) if d is not None]


def accuracy_per_dimension(dimensions: Sequence[Optional[str]], correct: Sequence[int]) -> dict[str, dict[str, Any]]:
    """docs/metrics.md#6-the-five-dimensions: {dimension: {"em", "n"}} over the items that carry a dimension (None = no dimension)."""
    counts: dict[str, list[int]] = {}
    for dimension, right in _checked(dimensions, correct):
        counts.setdefault(dimension, []).append(right)
    return {d: {"em": sum(v) / len(v), "n": len(v)} for d, v in sorted(counts.items())}


def error_share(dimensions: Sequence[Optional[str]], correct: Sequence[int]) -> dict[str, Optional[float]]:
    """docs/metrics.md#6-the-five-dimensions: error_share[d] = wrong answers in d / all wrong answers (None for all d when none wrong)."""
    scored = _checked(dimensions, correct)
    wrong_total = sum(1 for _, right in scored if not right)
    shares: dict[str, Optional[float]] = {}
    for dimension in sorted({d for d, _ in scored}):
        wrong = sum(1 for d, right in scored if d == dimension and not right)
        shares[dimension] = wrong / wrong_total if wrong_total else None
    return shares


def dimension_summary(dimensions: Sequence[Optional[str]], correct: Sequence[int]) -> dict[str, dict[str, Any]]:
    """docs/metrics.md#6-the-five-dimensions: {dimension: {"em", "n", "error_share"}}."""
    shares = error_share(dimensions, correct)
    return {d: {**row, "error_share": shares[d]} for d, row in accuracy_per_dimension(dimensions, correct).items()}
