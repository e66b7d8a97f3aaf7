"""Metric definitions (docs/metrics.md) and `score_items`, the scoring shared by `evolve-score` and the evaluator."""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence, Union

from evolve_train.data.qa_items import QAItem
from evolve_train.evaluation.metrics.answer import DEFAULT_STOPS, aliases, cut_at_stop, exact_match, f1, normalize
from evolve_train.evaluation.metrics.calibration import (
    brier,
    calibration_summary,
    cyclic_rotations,
    ece,
    length_normalized,
    mc_accuracy,
    mc_accuracy_norm,
    mc_predict,
    overconfident_error_rate,
    position_consistency,
    softmax,
)
from evolve_train.evaluation.metrics.continual import (
    avg_acc,
    bwt,
    continual_summary,
    forgetting,
    forgetting_max,
    fuar,
    fwt,
)
from evolve_train.evaluation.metrics.dimensions import (
    DIMENSIONS,
    accuracy_per_dimension,
    dimension_summary,
    error_share,
)
from evolve_train.evaluation.metrics.registry import get_metric, list_metrics, register_metric
from evolve_train.evaluation.metrics.stats import (
    bootstrap_ci_bounds,
    cohen_kappa,
    paraphrase_gap,
    flip_rate,
    paired_bootstrap_diff,
    release_gate,
)
from evolve_train.evaluation.metrics.temporal import (
    build_pairs,
    confusion_index,
    draw_other_timestamps,
    explicit_pairs,
    old_knowledge_retention,
    pair_asymmetry,
    resolve_pairs,
    shuffled_timestamp,
    stable_items,
    time_accuracy,
    timestamp_ablation,
    timestamp_invariance,
    update_adoption,
    year_slices,
)

Prediction = Union[str, Mapping[str, Any]]
NO_SET = "all"


def _prediction_text(item: QAItem, prediction: Prediction) -> tuple[str, Optional[list[float]]]:
    """(text, option scores); an MC item given only option scores predicts its argmax option's text."""
    if isinstance(prediction, str):
        return prediction, None
    text, scores = prediction.get("prediction"), prediction.get("option_scores")
    if scores is not None:
        if item.options is None:
            raise ValueError(f"item '{item.id}' has option_scores but no options")
        if len(scores) != len(item.options):
            raise ValueError(f"item '{item.id}': {len(scores)} option_scores for {len(item.options)} options")
        scores = [float(s) for s in scores]
        if text is None:
            text = item.options[mc_predict(scores)]
    if not isinstance(text, str):
        raise ValueError(f"item '{item.id}' has no prediction text")
    return text, scores


def _answer_summary(items: Sequence[QAItem], texts: Mapping[str, str]) -> dict[str, Any]:
    if not items:
        return {"em": None, "f1": None, "n": 0}
    return {
        "em": sum(exact_match(texts[i.id], i.answers) for i in items) / len(items),
        "f1": sum(f1(texts[i.id], i.answers) for i in items) / len(items),
        "n": len(items),
    }


def score_items(
    items: Sequence[QAItem],
    predictions: Mapping[str, Prediction],
    stops: Sequence[str] = DEFAULT_STOPS,
    tau: float = 0.8,
) -> dict[str, Any]:
    """Score predictions against QA items (docs/metrics.md#1-answer-matching, docs/metrics.md#4-paired-temporal-metrics, docs/metrics.md#6-the-five-dimensions, docs/metrics.md#7-multiple-choice-and-confidence); the `evolve-score` report.

    `predictions`: item id → prediction text, or {"prediction": text, "option_scores": [...]} (MC items; a
    missing text is the argmax option). Texts are cut at `stops` (§1). Every item is scored against its own
    gold (timestamped items: the answer at their timestamp; others: the latest answer). Returns
    {overall, sets, paired, time_accuracy, old_knowledge_retention, dimensions, calibration}; a group
    without items has null metrics and n 0. Raises ValueError on a duplicate, missing or unknown id.
    """
    ids = [item.id for item in items]
    if len(set(ids)) != len(ids):
        raise ValueError(f"duplicate item id '{next(i for i in ids if ids.count(i) > 1)}'")
    known = set(ids)
    unknown = [key for key in predictions if key not in known]
    if unknown:
        raise ValueError(f"prediction for unknown item id '{unknown[0]}'")
    texts: dict[str, str] = {}
    mc_items: list[tuple[QAItem, list[float]]] = []
    for item in items:
        if item.id not in predictions:
            raise ValueError(f"no prediction for item id '{item.id}'")
        text, scores = _prediction_text(item, predictions[item.id])
        texts[item.id] = cut_at_stop(text, stops)
        if scores is not None:
            mc_items.append((item, scores))

    sets: dict[str, list[QAItem]] = {}
    for item in items:
        sets.setdefault(item.set if item.set is not None else NO_SET, []).append(item)
    pairs = resolve_pairs(items)
    with_dimension = [item for item in items if item.dimension is not None]
    return {
        "overall": _answer_summary(items, texts),
        "sets": {name: _answer_summary(members, texts) for name, members in sets.items()},
        "paired": {
            "update_adoption": update_adoption(pairs, texts),
            "confusion_index": confusion_index(pairs, texts),
            "n_pairs": len(pairs),
        },
        "time_accuracy": time_accuracy(items, texts),
        "old_knowledge_retention": old_knowledge_retention(items, texts),
        "dimensions": dimension_summary(
            [i.dimension for i in with_dimension], [exact_match(texts[i.id], i.answers) for i in with_dimension]
        ),
        "calibration": calibration_summary(
            [scores for _, scores in mc_items],
            [item.options for item, _ in mc_items],
            [item.gold_index for item, _ in mc_items],
            tau,
        ),
    }


__all__ = [
    "DEFAULT_STOPS",
    "DIMENSIONS",
    "NO_SET",
    "Prediction",
    "score_items",
    "normalize",
    "aliases",
    "exact_match",
    "f1",
    "cut_at_stop",
    "avg_acc",
    "forgetting",
    "forgetting_max",
    "bwt",
    "fwt",
    "fuar",
    "continual_summary",
    "build_pairs",
    "explicit_pairs",
    "resolve_pairs",
    "update_adoption",
    "confusion_index",
    "pair_asymmetry",
    "time_accuracy",
    "year_slices",
    "stable_items",
    "old_knowledge_retention",
    "timestamp_ablation",
    "timestamp_invariance",
    "draw_other_timestamps",
    "shuffled_timestamp",
    "accuracy_per_dimension",
    "error_share",
    "dimension_summary",
    "mc_predict",
    "length_normalized",
    "mc_accuracy",
    "mc_accuracy_norm",
    "softmax",
    "ece",
    "brier",
    "overconfident_error_rate",
    "cyclic_rotations",
    "position_consistency",
    "calibration_summary",
    "paired_bootstrap_diff",
    "bootstrap_ci_bounds",
    "cohen_kappa",
    "flip_rate",
    "paraphrase_gap",
    "release_gate",
    "register_metric",
    "get_metric",
    "list_metrics",
]
