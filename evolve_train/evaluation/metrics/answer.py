"""Answer matching: SQuAD v1.1 normalization with NFKC first, exact match and token F1 (docs/metrics.md#1-answer-matching)."""

from __future__ import annotations

import re
from collections import Counter
from typing import Sequence

from evolve_train.data.answers import Golds, aliases, exact_match, normalize  # noqa: F401  (defined with the data)

DEFAULT_STOPS: tuple[str, ...] = ("\n",)


def _token_f1(predicted: list[str], gold: list[str]) -> float:
    if not predicted and not gold:
        return 1.0
    if not predicted or not gold:
        return 0.0
    overlap = sum((Counter(predicted) & Counter(gold)).values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(predicted), overlap / len(gold)
    return 2 * precision * recall / (precision + recall)


def f1(prediction: str, golds: Golds) -> float:
    """docs/metrics.md#1-answer-matching: max over aliases of token F1 on normalized tokens, multiset overlap;
    both token lists empty → 1, exactly one empty → 0. No aliases → 0."""
    tokens = normalize(prediction).split()
    return max((_token_f1(tokens, normalize(gold).split()) for gold in aliases(golds)), default=0.0)


def cut_at_stop(text: str, stops: Sequence[str] = DEFAULT_STOPS) -> str:
    """docs/metrics.md#1-answer-matching: the generation up to (not including) the earliest occurrence of any stop string."""
    cut = len(text)
    for stop in stops:
        if stop:
            position = text.find(stop)
            if position != -1:
                cut = min(cut, position)
    return text[:cut]


def cut_at_pattern(text: str, patterns: Sequence[str] = ()) -> str:
    """``text`` up to the start of the earliest match of any of the regular expressions ``patterns``."""
    cut = len(text)
    for pattern in patterns:
        found = re.search(pattern, text)
        if found:
            cut = min(cut, found.start())
    return text[:cut]


def prediction_of(raw: str, stop_strings: Sequence[str], stop_patterns: Sequence[str] = ()) -> str:
    """The answer read off a raw generation: leading whitespace and newlines dropped (a pretrained model
    often opens with a newline, which a ``\n`` stop would cut to an empty answer), cut at the first stop
    string, then at the first match of a stop pattern (``eval.stop_patterns``), stripped."""
    return cut_at_pattern(cut_at_stop(raw.lstrip(), list(stop_strings)), stop_patterns).strip()


def contains_answer(texts: Sequence[str], golds: Golds) -> int:
    """docs/metrics.md#10-open-book-evaluation: 1 if some gold alias, normalized as §1, occurs in the normalized text of one of ``texts``,
    else 0. Occurs = as a whole-token sequence (``"pavin"`` is not found in ``"pavinsky"``), as DPR's
    ``has_answer``; an alias that normalizes to nothing never occurs."""
    wanted = [normalize(gold) for gold in aliases(golds)]
    haystacks = [f" {normalize(text)} " for text in texts]
    return int(any(alias and f" {alias} " in hay for alias in wanted for hay in haystacks))


def recall_at_k(retrieved: Sequence[Sequence[str]], golds: Sequence[Golds]) -> float | None:
    """docs/metrics.md#10-open-book-evaluation: share of questions whose retrieved passages (``retrieved[i]``: the texts of question i's
    top k) contain a gold alias (:func:`contains_answer`); None without questions."""
    if len(retrieved) != len(golds):
        raise ValueError(f"{len(retrieved)} retrieved lists for {len(golds)} questions")
    hits = [contains_answer(texts, gold) for texts, gold in zip(retrieved, golds)]
    return sum(hits) / len(hits) if hits else None
