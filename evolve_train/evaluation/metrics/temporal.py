"""Paired temporal metrics and timestamp ablations on scored items (docs/metrics.md#4-paired-temporal-metrics and §5).

Predictions are a mapping item id → prediction text (already cut at the stop strings).
"""

from __future__ import annotations

import random
from datetime import date
from typing import Any, Iterable, Mapping, Optional, Sequence

from evolve_train.data.pairs import (  # noqa: F401  (re-exported: the pairing lives with the data)
    Pair,
    alias_set,
    base_question_key,
    build_pairs,
    explicit_pairs,
    group_by_base_question,
    resolve_pairs,
)
from evolve_train.data.qa_items import QAItem
from evolve_train.data.timestamps import TimestampLike, parse_timestamp
from evolve_train.evaluation.metrics.answer import exact_match, normalize
from evolve_train.evaluation.metrics.stats import paired_bootstrap_diff

Predictions = Mapping[str, str]
Slices = Mapping[str, tuple[Optional[TimestampLike], Optional[TimestampLike]]]


def _prediction(predictions: Predictions, item: QAItem) -> str:
    try:
        return predictions[item.id]
    except KeyError:
        raise ValueError(f"no prediction for item '{item.id}'") from None


def _em_summary(items: Iterable[QAItem], predictions: Predictions) -> dict[str, Any]:
    scores = [exact_match(_prediction(predictions, item), item.answers) for item in items]
    return {"em": sum(scores) / len(scores) if scores else None, "n": len(scores)}


def adoption_per_pair(pairs: Sequence[Pair], predictions: Predictions) -> list[int]:
    """1 for each pair with EM(p_old, g_old) = 1 and EM(p_new, g_new) = 1, else 0."""
    return [
        int(
            exact_match(_prediction(predictions, old), old.answers)
            and exact_match(_prediction(predictions, new), new.answers)
        )
        for old, new in pairs
    ]


def confusion_per_pair(pairs: Sequence[Pair], predictions: Predictions) -> list[float]:
    """Per pair: (EM(p_old, g_new) + EM(p_new, g_old)) / 2."""
    return [
        (
            exact_match(_prediction(predictions, old), new.answers)
            + exact_match(_prediction(predictions, new), old.answers)
        )
        / 2
        for old, new in pairs
    ]


def update_adoption(pairs: Sequence[Pair], predictions: Predictions) -> Optional[float]:
    """docs/metrics.md#4-paired-temporal-metrics: fraction of pairs with EM(p_old, g_old) = 1 and EM(p_new, g_new) = 1; None if no pairs."""
    hits = adoption_per_pair(pairs, predictions)
    return sum(hits) / len(hits) if hits else None


def confusion_index(pairs: Sequence[Pair], predictions: Predictions) -> Optional[float]:
    """docs/metrics.md#4-paired-temporal-metrics: (#pairs with EM(p_old, g_new) = 1 + #pairs with EM(p_new, g_old) = 1) / (2·#pairs)."""
    crossed = confusion_per_pair(pairs, predictions)
    return sum(crossed) / len(crossed) if crossed else None


def pair_asymmetry(pairs: Sequence[Pair], predictions: Predictions) -> Optional[float]:
    """docs/metrics.md#4-paired-temporal-metrics (EvolveBench's pseudo-code count): fraction of pairs with exactly one of the two right."""
    if not pairs:
        return None
    one_right = sum(
        exact_match(_prediction(predictions, old), old.answers)
        != exact_match(_prediction(predictions, new), new.answers)
        for old, new in pairs
    )
    return one_right / len(pairs)


def year_slices(years: Iterable[int]) -> dict[str, tuple[date, date]]:
    """One half-open slice [1 Jan y, 1 Jan y+1) per calendar year, keyed "YYYY"."""
    return {f"{y:04d}": (date(y, 1, 1), date(y + 1, 1, 1)) for y in sorted(set(years))}


def time_accuracy(
    items: Sequence[QAItem], predictions: Predictions, slices: Optional[Slices] = None
) -> dict[str, dict[str, Any]]:
    """docs/metrics.md#4-paired-temporal-metrics: mean EM over timestamped items whose timestamp lies in each slice, with `n`.

    `slices` maps a name to a half-open range [start, end) of timestamps (None = unbounded); default one
    per calendar year present, keyed "YYYY". A slice without items reports em None and n 0.
    """
    dated = [(parse_timestamp(item.timestamp), item) for item in items if item.timestamp is not None]
    if slices is None:
        slices = year_slices(day.year for day, _ in dated)
    result: dict[str, dict[str, Any]] = {}
    for name, (start, end) in slices.items():
        low = parse_timestamp(start) if start is not None else None
        high = parse_timestamp(end) if end is not None else None
        inside = [item for day, item in dated if (low is None or day >= low) and (high is None or day < high)]
        result[name] = _em_summary(inside, predictions)
    return result


def stable_items(items: Sequence[QAItem]) -> list[QAItem]:
    """docs/metrics.md#4-paired-temporal-metrics: items flagged `stable: true`; where no item carries the flag, the items of base-question
    groups spanning ≥ 2 distinct timestamps whose normalized alias sets are all equal."""
    if any(item.stable is not None for item in items):
        return [item for item in items if item.stable]
    chosen: set[str] = set()
    for group in group_by_base_question(items).values():
        days = {parse_timestamp(item.timestamp) for item in group}
        if len(days) >= 2 and len({alias_set(item) for item in group}) == 1:
            chosen.update(item.id for item in group)
    return [item for item in items if item.id in chosen]


def old_knowledge_retention(items: Sequence[QAItem], predictions: Predictions) -> dict[str, Any]:
    """docs/metrics.md#4-paired-temporal-metrics: mean EM over questions about stable knowledge, {"em", "n"} (em None when n = 0)."""
    return _em_summary(stable_items(items), predictions)


def timestamp_ablation(
    items: Sequence[QAItem], true: Predictions, shuffled: Predictions, none: Predictions
) -> dict[str, Any]:
    """docs/metrics.md#5-timestamp-ablation: accuracy of the timestamped items asked with their own (`true`), a shuffled and no
    timestamp, all scored against the gold of the true timestamp; timestamp_reliance = acc_true − acc_shuffled."""
    dated = [item for item in items if item.timestamp is not None]
    correct = {
        name: [exact_match(_prediction(group, item), item.answers) for item in dated]
        for name, group in (("true", true), ("shuffled", shuffled), ("none", none))
    }
    acc = {name: sum(scores) / len(scores) if scores else None for name, scores in correct.items()}
    reliance = None if acc["true"] is None else acc["true"] - acc["shuffled"]
    interval = None
    if dated:  # paired bootstrap of true vs shuffled outcomes over the questions (docs/metrics.md#8-statistics-and-hygiene's resampling)
        diff = paired_bootstrap_diff(correct["true"], correct["shuffled"])
        interval = [diff["ci_low"], diff["ci_high"]]
    return {**acc, "n": len(dated), "timestamp_reliance": reliance, "timestamp_reliance_ci": interval}


def timestamp_invariance(original: Predictions, replaced: Mapping[str, Sequence[str]]) -> Optional[float]:
    """docs/metrics.md#5-timestamp-ablation: fraction of questions whose normalized prediction is identical under each of the K
    other timestamps (`replaced[id]` holds the K predictions); None with no questions."""
    if set(original) != set(replaced):
        missing = sorted(set(original) ^ set(replaced), key=str)[0]
        raise ValueError(f"question '{missing}' is not in both the original and the replaced predictions")
    same = 0
    for item_id, prediction in original.items():
        if not replaced[item_id]:
            raise ValueError(f"question '{item_id}' has no predictions with replaced timestamps")
        same += all(normalize(other) == normalize(prediction) for other in replaced[item_id])
    return same / len(original) if original else None


def draw_other_timestamps(
    own: TimestampLike, pool: Iterable[str], k: int = 1, seed: int = 0, key: str = ""
) -> list[str]:
    """docs/metrics.md#5-timestamp-ablation: k distinct timestamps from `pool` whose day differs from `own`, drawn with a fixed seed
    (per `key`, e.g. the item id, so one item's draw does not depend on the others')."""
    own_day = parse_timestamp(own)
    candidates = sorted({ts for ts in pool if parse_timestamp(ts) != own_day}, key=lambda ts: (parse_timestamp(ts), ts))
    if len(candidates) < k:
        raise ValueError(f"need {k} timestamp(s) other than {own!r}, the data has {len(candidates)}")
    return random.Random(f"{seed}:{key}").sample(candidates, k)


def shuffled_timestamp(own: TimestampLike, pool: Iterable[str], seed: int = 0, key: str = "") -> str:
    """docs/metrics.md#5-timestamp-ablation `shuffled` group: one timestamp from the dataset's others, different from `own`."""
    return draw_other_timestamps(own, pool, 1, seed, key)[0]
