"""The update pairs of docs/metrics.md#4-paired-temporal-metrics: items of one base question whose answers changed, (older, newer).

Explicit pairs come from the data's ``pair_id``; the others are paired automatically (per base question,
ordered by timestamp, consecutive items with disjoint alias sets). The loaders use the pairing to mark the
newer item of a pair as an update, so it lives with the data; ``evaluation/metrics/temporal.py`` re-exports
it with the paired metrics.
"""

from __future__ import annotations

from datetime import date
from typing import Iterable, Sequence

from evolve_train.data.answers import normalize
from evolve_train.data.qa_items import QAItem
from evolve_train.data.timestamps import parse_timestamp, strip_timestamp_phrase

Pair = tuple[QAItem, QAItem]


def alias_set(item: QAItem) -> frozenset[str]:
    """The item's normalized aliases (docs/metrics.md#1-answer-matching/§4)."""
    return frozenset(normalize(answer) for answer in item.answers)


def base_question_key(item: QAItem) -> str:
    """§4 grouping key: the `base_question` field, else the question without its timestamp phrase;
    normalized (§1) so that case and punctuation left by the phrase removal do not split a group."""
    return normalize(item.base_question or strip_timestamp_phrase(item.question, item.timestamp))


def group_by_base_question(items: Iterable[QAItem]) -> dict[str, list[QAItem]]:
    """Timestamped items grouped by base question, each group in file order (docs/metrics.md#4-paired-temporal-metrics)."""
    groups: dict[str, list[QAItem]] = {}
    for item in items:
        if item.timestamp is not None:
            groups.setdefault(base_question_key(item), []).append(item)
    return groups


def build_pairs(items: Iterable[QAItem]) -> list[Pair]:
    """docs/metrics.md#4-paired-temporal-metrics "Automatic pairing": per base-question group, order by timestamp (a year as 1 January,
    a year-month as the 1st); of items sharing a timestamp only the first in file order takes part; each two
    consecutive items whose normalized alias sets are disjoint form one pair (older, newer)."""
    pairs: list[Pair] = []
    for group in group_by_base_question(items).values():
        first_per_day: dict[date, QAItem] = {}
        for item in group:
            first_per_day.setdefault(parse_timestamp(item.timestamp), item)
        ordered = [first_per_day[day] for day in sorted(first_per_day)]
        pairs += [
            (older, newer)
            for older, newer in zip(ordered, ordered[1:])
            if alias_set(older).isdisjoint(alias_set(newer))
        ]
    return pairs


def explicit_pairs(items: Iterable[QAItem]) -> list[Pair]:
    """Pairs given by the data's `pair_id`: each group ordered by timestamp (file order when a member has
    none), consecutive members paired (older, newer)."""
    groups: dict[str, list[QAItem]] = {}
    for item in items:
        if item.pair_id is not None:
            groups.setdefault(item.pair_id, []).append(item)
    pairs: list[Pair] = []
    for group in groups.values():
        if all(item.timestamp is not None for item in group):
            group = sorted(group, key=lambda item: parse_timestamp(item.timestamp))
        pairs += list(zip(group, group[1:]))
    return pairs


def resolve_pairs(items: Sequence[QAItem]) -> list[Pair]:
    """Explicit pairs for items with a `pair_id`, automatic pairing (§4) among the others."""
    return explicit_pairs(items) + build_pairs([item for item in items if item.pair_id is None])
