"""Answer normalization and exact match (docs/metrics.md#1-answer-matching): SQuAD v1.1 normalization with NFKC first.

The data checks use them too (a perturbed question must keep its gold, a refreshed fact must change its
answer), so they live with the data; ``evaluation/metrics/answer.py`` re-exports them with the rest of
answer matching (token F1, stop strings).
"""

from __future__ import annotations

import re
import string
import unicodedata
from typing import Sequence, Union

Golds = Union[str, Sequence[str]]

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize(text: str) -> str:
    """docs/metrics.md#1-answer-matching: NFKC → lowercase → drop `string.punctuation` → drop whole words a/an/the →
    collapse whitespace → strip."""
    text = unicodedata.normalize("NFKC", text).lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def aliases(golds: Golds) -> list[str]:
    """A gold answer as a list of aliases: a single string is a list of one (docs/metrics.md#1-answer-matching)."""
    return [golds] if isinstance(golds, str) else list(golds)


def exact_match(prediction: str, golds: Golds) -> int:
    """docs/metrics.md#1-answer-matching: 1 if normalize(prediction) equals normalize(g) for any alias g, else 0."""
    predicted = normalize(prediction)
    return int(any(predicted == normalize(gold) for gold in aliases(golds)))
