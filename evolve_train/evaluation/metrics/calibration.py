"""Multiple choice by option log-likelihood, and confidence calibration (docs/metrics.md#7-multiple-choice-and-confidence).

Each question has a list of option scores (sum of the option's token log-probabilities given the prompt).
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

Scores = Sequence[float]


def mc_predict(scores: Scores) -> int:
    """docs/metrics.md#7-multiple-choice-and-confidence: index of the highest score; ties go to the first option."""
    if not scores:
        raise ValueError("no option scores")
    best = 0
    for index, score in enumerate(scores):
        if score > scores[best]:
            best = index
    return best


def length_normalized(scores: Scores, options: Sequence[str]) -> list[float]:
    """docs/metrics.md#7-multiple-choice-and-confidence (`acc_norm`): each score divided by its option's length in UTF-8 bytes."""
    if len(scores) != len(options):
        raise ValueError(f"{len(scores)} scores for {len(options)} options")
    lengths = [len(option.encode("utf-8")) for option in options]
    if 0 in lengths:
        raise ValueError("an empty option has no length to normalize by")
    return [score / length for score, length in zip(scores, lengths)]


def _mean(values: Sequence[float]) -> Optional[float]:
    return sum(values) / len(values) if values else None


def mc_accuracy(scores: Sequence[Scores], golds: Sequence[int]) -> Optional[float]:
    """docs/metrics.md#7-multiple-choice-and-confidence `acc`: fraction of questions whose argmax option is the gold one."""
    _same_length(scores, golds)
    return _mean([float(mc_predict(s) == g) for s, g in zip(scores, golds)])


def mc_accuracy_norm(
    scores: Sequence[Scores], options: Sequence[Sequence[str]], golds: Sequence[int]
) -> Optional[float]:
    """docs/metrics.md#7-multiple-choice-and-confidence `acc_norm`: `acc` on scores divided by the option lengths in UTF-8 bytes."""
    _same_length(scores, golds)
    return _mean([float(mc_predict(length_normalized(s, o)) == g) for s, o, g in zip(scores, options, golds)])


def softmax(scores: Scores) -> list[float]:
    """docs/metrics.md#7-multiple-choice-and-confidence: confidence = softmax of the option scores (max-shifted for stability)."""
    top = max(scores)
    exps = [math.exp(score - top) for score in scores]
    total = sum(exps)
    return [e / total for e in exps]


def ece(confidences: Sequence[float], correct: Sequence[int], n_bins: int = 10) -> Optional[float]:
    """docs/metrics.md#7-multiple-choice-and-confidence: Σ_bins (n_b / n)·|acc_b − conf_b| over `n_bins` equal-width bins of the max-probability
    confidence; bin b holds [b/n_bins, (b+1)/n_bins), the last bin includes 1.0."""
    _same_length(confidences, correct)
    if not confidences:
        return None
    bins: dict[int, list[tuple[float, int]]] = {}
    for confidence, right in zip(confidences, correct):
        index = min(int(confidence * n_bins), n_bins - 1)
        bins.setdefault(index, []).append((confidence, int(right)))
    total = len(confidences)
    return sum(
        len(members)
        / total
        * abs(sum(r for _, r in members) / len(members) - sum(c for c, _ in members) / len(members))
        for members in bins.values()
    )


def brier(probabilities: Sequence[Sequence[float]], golds: Sequence[int]) -> Optional[float]:
    """docs/metrics.md#7-multiple-choice-and-confidence: mean over questions of Σ_options (prob_k − 1[k = gold])²."""
    _same_length(probabilities, golds)
    return _mean(
        [sum((p - (k == gold)) ** 2 for k, p in enumerate(probs)) for probs, gold in zip(probabilities, golds)]
    )


def overconfident_error_rate(confidences: Sequence[float], correct: Sequence[int], tau: float = 0.8) -> Optional[float]:
    """docs/metrics.md#7-multiple-choice-and-confidence: #(wrong and confidence ≥ τ) / #wrong; None if there are no errors."""
    _same_length(confidences, correct)
    wrong = [c for c, right in zip(confidences, correct) if not right]
    return sum(c >= tau for c in wrong) / len(wrong) if wrong else None


def cyclic_rotations(options: Sequence[str], k: Optional[int] = None) -> list[list[str]]:
    """The option order rotated by 0..k−1 places (k defaults to the number of options), for §7's
    position-consistency check."""
    count = len(options) if k is None else k
    return [list(options[r % len(options) :]) + list(options[: r % len(options)]) for r in range(count)]


def position_consistency(chosen: Sequence[Sequence[str]]) -> Optional[float]:
    """docs/metrics.md#7-multiple-choice-and-confidence: fraction of questions whose chosen option text is the same under all K rotations
    (`chosen[q]` = the texts chosen under each rotation)."""
    if any(not texts for texts in chosen):
        raise ValueError("a question has no chosen options")
    return _mean([float(len(set(texts)) == 1) for texts in chosen])


def calibration_summary(
    scores: Sequence[Scores], options: Sequence[Sequence[str]], golds: Sequence[int], tau: float = 0.8
) -> dict[str, Any]:
    """docs/metrics.md#7-multiple-choice-and-confidence for a group of MC questions: {acc, acc_norm, ece, brier, overconfident_error_rate, n};
    with no questions every metric is None and n is 0."""
    _same_length(scores, golds)
    probabilities = [softmax(s) for s in scores]
    confidences = [max(p) for p in probabilities]
    correct = [int(mc_predict(s) == g) for s, g in zip(scores, golds)]
    return {
        "acc": mc_accuracy(scores, golds),
        "acc_norm": mc_accuracy_norm(scores, options, golds),
        "ece": ece(confidences, correct),
        "brier": brier(probabilities, golds),
        "overconfident_error_rate": overconfident_error_rate(confidences, correct, tau),
        "n": len(scores),
    }


def _same_length(first: Sequence[Any], second: Sequence[Any]) -> None:
    if len(first) != len(second):
        raise ValueError(f"length mismatch: {len(first)} vs {len(second)}")
