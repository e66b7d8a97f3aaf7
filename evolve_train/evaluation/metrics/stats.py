"""Statistics and evaluation hygiene: paired bootstrap, kappa, flip rate, paraphrase gap and the
release gate (docs/metrics.md#8-statistics-and-hygiene)."""

from __future__ import annotations

from collections import Counter
from typing import Any, Hashable, Mapping, Optional, Sequence, Union

import numpy as np

from evolve_train.evaluation.metrics.answer import normalize
from evolve_train.evaluation.metrics.directions import gate_operator

Outcomes = Union[Mapping[Hashable, int], Sequence[int]]
DEFAULT_GATE = {"flip_rate_max": 0.10, "paraphrase_gap_max": 0.03, "ci_low_min": 0.0, "slice_floors": {}}


def _aligned(a: Outcomes, b: Outcomes) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(a, Mapping) != isinstance(b, Mapping):
        raise ValueError("pass both runs as id → 0/1 mappings or both as lists")
    if isinstance(a, Mapping):
        for first, second, name in ((a, b, "b"), (b, a, "a")):
            missing = [key for key in first if key not in second]
            if missing:
                raise ValueError(
                    f"different question sets: question '{sorted(missing, key=str)[0]}' is "
                    f"missing from run {name} ({len(missing)} missing)"
                )
        keys = sorted(a, key=str)
        a, b = [a[k] for k in keys], [b[k] for k in keys]
    elif len(a) != len(b):
        raise ValueError(f"different question sets: {len(a)} vs {len(b)} questions")
    if len(a) == 0:
        raise ValueError("no questions to compare")
    arrays = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    for array in arrays:
        if not np.isin(array, (0.0, 1.0)).all():
            raise ValueError("per-question outcomes must be 0 or 1")
    return arrays


def _resamples(n: int, B: int, seed: int):
    """B resamples of ``n`` indices with replacement (numpy default_rng(seed)), in chunks of at most ~1M indices."""
    rng = np.random.default_rng(seed)
    rows_per_chunk = max(1, 1_000_000 // n)
    for start in range(0, B, rows_per_chunk):
        yield rng.integers(0, n, size=(min(rows_per_chunk, B - start), n))


def bootstrap_ci_bounds(sorted_diffs: Sequence[float]) -> tuple[float, float]:
    """docs/metrics.md#8-statistics-and-hygiene: the 2.5th / 97.5th percentiles of B sorted diffs:
    sorted_diffs[int(B·0.025)] and sorted_diffs[int(B·0.975) − 1]."""
    count = len(sorted_diffs)
    return float(sorted_diffs[int(count * 0.025)]), float(sorted_diffs[int(count * 0.975) - 1])


def paired_bootstrap_diff(a: Outcomes, b: Outcomes, B: int = 2000, seed: int = 0) -> dict[str, float]:
    """docs/metrics.md#8-statistics-and-hygiene: observed mean(a) − mean(b) and its paired-bootstrap 95% interval.

    `a`, `b`: per-question 0/1 outcomes of two runs over the same questions, as id → 0/1 mappings (a
    differing question set raises ValueError naming a missing id) or lists of equal length. Indices are
    resampled with replacement B times (numpy default_rng(seed)).
    """
    first, second = _aligned(a, b)
    n = len(first)
    diffs = [first[index].mean(axis=1) - second[index].mean(axis=1) for index in _resamples(n, B, seed)]
    ordered = np.sort(np.concatenate(diffs))
    low, high = bootstrap_ci_bounds(ordered)
    return {"diff": float(first.mean() - second.mean()), "ci_low": low, "ci_high": high, "B": B, "n": n}


def bootstrap_mean_ci(values: Sequence[float], B: int = 2000, seed: int = 0) -> Optional[list[float]]:
    """95% percentile-bootstrap interval ``[low, high]`` of the mean of per-item ``values`` (items resampled with
    replacement B times, numpy default_rng(seed); bounds as in :func:`bootstrap_ci_bounds`); None with no items."""
    array = np.asarray(values, dtype=float)
    if array.size == 0:
        return None
    means = [array[index].mean(axis=1) for index in _resamples(array.size, B, seed)]
    return list(bootstrap_ci_bounds(np.sort(np.concatenate(means))))


def bootstrap_ratio_ci(
    sums: Sequence[float], counts: Sequence[float], B: int = 2000, seed: int = 0
) -> Optional[list[float]]:
    """95% percentile-bootstrap interval ``[low, high]`` of ``sum(sums) / sum(counts)`` over items (e.g. the mean
    token NLL of a text over its documents: each document's summed NLL and token count), items resampled with
    replacement B times (numpy default_rng(seed); bounds as in :func:`bootstrap_ci_bounds`); None with no items
    or no counts."""
    top, bottom = np.asarray(sums, dtype=float), np.asarray(counts, dtype=float)
    if top.size == 0 or bottom.sum() <= 0:
        return None
    ratios = []
    for index in _resamples(top.size, B, seed):
        totals = bottom[index].sum(axis=1)
        ratios.append(np.where(totals > 0, top[index].sum(axis=1) / np.maximum(totals, 1e-300), np.nan))
    ordered = np.sort(np.concatenate(ratios))
    ordered = ordered[~np.isnan(ordered)]
    return list(bootstrap_ci_bounds(ordered)) if ordered.size else None


def cohen_kappa(y_true: Sequence[Hashable], y_pred: Sequence[Hashable]) -> Optional[float]:
    """docs/metrics.md#8-statistics-and-hygiene: (p_o − p_e) / (1 − p_e); 1.0 when p_e = 1; None with no items."""
    if len(y_true) != len(y_pred):
        raise ValueError(f"length mismatch: {len(y_true)} vs {len(y_pred)}")
    if not y_true:
        return None
    n = len(y_true)
    observed = sum(t == p for t, p in zip(y_true, y_pred)) / n
    true_counts, pred_counts = Counter(y_true), Counter(y_pred)
    expected = sum(true_counts[label] * pred_counts[label] for label in true_counts) / (n * n)
    if expected == 1:
        return 1.0
    return (observed - expected) / (1 - expected)


def _template_answer(answer: Union[str, Sequence[str]]) -> str:
    """One template's normalized prediction: the majority over sampled repeats (ties → first seen)."""
    if isinstance(answer, str):
        return normalize(answer)
    if not answer:
        raise ValueError("a template has no predictions")
    return Counter(normalize(a) for a in answer).most_common(1)[0][0]


def flip_rate(predictions: Union[Mapping[Hashable, Sequence[Any]], Sequence[Sequence[Any]]]) -> Optional[float]:
    """docs/metrics.md#8-statistics-and-hygiene: fraction of questions whose normalized prediction differs across the K equivalent
    templates. Per question: one entry per template, a string (greedy) or a list of n sampled repeats
    (majority vote). None with no questions."""
    per_question = list(predictions.values()) if isinstance(predictions, Mapping) else list(predictions)
    if not per_question:
        return None
    flips = sum(len({_template_answer(answer) for answer in templates}) > 1 for templates in per_question)
    return flips / len(per_question)


def _accuracy(outcomes: Union[float, Sequence[int]]) -> float:
    if isinstance(outcomes, (int, float)):
        return float(outcomes)
    if not outcomes:
        raise ValueError("no outcomes to average")
    return sum(outcomes) / len(outcomes)


def paraphrase_gap(original: Union[float, Sequence[int]], variants: Sequence[Union[float, Sequence[int]]]) -> float:
    """docs/metrics.md#8-statistics-and-hygiene: acc(original) − mean over k of acc(perturbed variant k); each argument an accuracy
    or a list of per-question 0/1 outcomes. A hint of memorised surface form, never proof of a clean model."""
    if not variants:
        raise ValueError("no perturbed variants")
    return _accuracy(original) - sum(_accuracy(v) for v in variants) / len(variants)


def _check(name: str, value: Optional[float], threshold: float, op: str) -> dict[str, Any]:
    if value is None:
        passed = False
    else:
        passed = {"<=": value <= threshold, ">": value > threshold, ">=": value >= threshold}[op]
    return {"name": name, "value": value, "op": op, "threshold": threshold, "passed": bool(passed)}


def release_gate(values: Mapping[str, Any], thresholds: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
    """docs/metrics.md#8-statistics-and-hygiene: pass/fail and every check with its value and threshold.

    values: flip_rate, paraphrase_gap, bootstrap_ci_low (paired-bootstrap CI low vs the baseline run)
    and slices {name: accuracy}. thresholds (defaults DEFAULT_GATE): flip_rate_max (≤), paraphrase_gap_max
    (≤), ci_low_min (strictly >), slice_floors {name: floor} (≥); a threshold set to None disables its
    check. A checked value that is missing or None fails.
    """
    unknown = sorted(set(thresholds or {}) - set(DEFAULT_GATE))
    if unknown:
        raise ValueError(f"unknown release-gate threshold(s) {unknown}; known: {sorted(DEFAULT_GATE)}")
    limits = {**DEFAULT_GATE, **(thresholds or {})}
    checks = []
    for name, key, op in (
        ("flip_rate", "flip_rate_max", gate_operator("flip_rate")),
        ("paraphrase_gap", "paraphrase_gap_max", gate_operator("paraphrase_gap")),
        ("bootstrap_ci_low", "ci_low_min", ">"),
    ):
        if limits.get(key) is not None:
            checks.append(_check(name, values.get(name), limits[key], op))
    slices = values.get("slices") or {}
    for slice_name, floor in (limits.get("slice_floors") or {}).items():
        checks.append(_check(f"slice:{slice_name}", slices.get(slice_name), floor, ">="))
    return {"passed": all(check["passed"] for check in checks), "checks": checks}
