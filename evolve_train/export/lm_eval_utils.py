"""Scoring of an exported evolve-train task in lm-evaluation-harness (copied into the task directory as ``utils.py``).

lm-eval imports this file from the task directory, where evolve-train may not be installed, so it imports
nothing but the standard library. Its answer matching is docs/metrics.md#1-answer-matching (SQuAD v1.1 normalization with
NFKC first), the same as ``evolve_train/evaluation/metrics/answer.py`` (a test checks the two agree).

* ``answer_filter`` (a ``custom`` filter): the generation cut at the first stop string and stripped, the
  prediction evolve-train scores; lm-eval's own ``exact_match`` compares the raw generation, whose leading
  space alone makes every answer wrong.
* ``process_results``: ``exact_match`` and ``f1`` of that prediction against every gold alias of the item.
* ``dev_items`` (``fewshot_config.process_docs``): the only items few-shot examples may come from.

The stop strings are the export's ``eval.stop_strings``, read from ``evolve_export.json`` next to this file.
"""

from __future__ import annotations

import functools
import json
import re
import string
import unicodedata
from collections import Counter
from pathlib import Path

MANIFEST = "evolve_export.json"
_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


@functools.lru_cache(maxsize=None)
def stop_strings() -> tuple:
    """The export's stop strings (read once from the manifest next to this file)."""
    manifest = Path(__file__).with_name(MANIFEST)
    try:
        return tuple(json.loads(manifest.read_text(encoding="utf-8"))["stop_strings"])
    except (OSError, ValueError, KeyError) as err:
        raise RuntimeError(
            f"{manifest}: cannot read 'stop_strings' of the export ({err}); "
            "export the task directory again with `evolve-data export-lm-eval`"
        ) from None


def normalize(text: str) -> str:
    """NFKC, lowercase, no punctuation, no articles a/an/the, whitespace collapsed and stripped."""
    text = unicodedata.normalize("NFKC", text).lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def aliases(golds) -> list:
    """A gold answer as a list of aliases: a single string is a list of one."""
    return [golds] if isinstance(golds, str) else list(golds)


def exact_match(prediction: str, golds) -> int:
    """1 if the normalized prediction equals any normalized alias, else 0."""
    predicted = normalize(prediction)
    return int(any(predicted == normalize(gold) for gold in aliases(golds)))


def _token_f1(predicted: list, gold: list) -> float:
    if not predicted and not gold:
        return 1.0
    if not predicted or not gold:
        return 0.0
    overlap = sum((Counter(predicted) & Counter(gold)).values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(predicted), overlap / len(gold)
    return 2 * precision * recall / (precision + recall)


def f1(prediction: str, golds) -> float:
    """Max over aliases of the token F1 on normalized tokens (multiset overlap)."""
    tokens = normalize(prediction).split()
    return max((_token_f1(tokens, normalize(gold).split()) for gold in aliases(golds)), default=0.0)


def cut_at_stop(text: str, stops) -> str:
    """The text up to (not including) the earliest occurrence of any stop string."""
    cut = len(text)
    for stop in stops:
        if stop:
            position = text.find(stop)
            if position != -1:
                cut = min(cut, position)
    return text[:cut]


@functools.lru_cache(maxsize=None)
def stop_patterns() -> tuple:
    """The export's stop patterns (``eval.stop_patterns``; none in an export made before they existed)."""
    manifest = Path(__file__).with_name(MANIFEST)
    try:
        return tuple(json.loads(manifest.read_text(encoding="utf-8")).get("stop_patterns", []))
    except (OSError, ValueError) as err:
        raise RuntimeError(f"{manifest}: cannot read the export's manifest ({err})") from None


def cut_at_pattern(text: str, patterns) -> str:
    """The text up to the start of the earliest match of any of the regular expressions."""
    cut = len(text)
    for pattern in patterns:
        found = re.search(pattern, text)
        if found:
            cut = min(cut, found.start())
    return text[:cut]


def answer_filter(resps, docs):
    """lm-eval ``custom`` filter: every response, leading whitespace dropped, cut at the export's stop
    strings, then at its stop patterns, and stripped (evolve-train's ``prediction_of``)."""
    stops, patterns = stop_strings(), stop_patterns()
    return [
        [cut_at_pattern(cut_at_stop(response.lstrip(), stops), patterns).strip() for response in responses]
        for responses in resps
    ]


def dev_items(docs):
    """lm-eval few-shot pool: the ``dev`` items of the set (docs/metrics.md#8-statistics-and-hygiene: never a private one)."""
    if hasattr(docs, "filter"):  # a datasets.Dataset
        return docs.filter(lambda doc: doc.get("split") == "dev")
    return [doc for doc in docs if doc.get("split") == "dev"]


def process_results(doc, results):
    """lm-eval ``process_results``: EM and F1 of the filtered prediction against the item's aliases."""
    prediction = results[0]
    return {"exact_match": exact_match(prediction, doc["answers"]), "f1": f1(prediction, doc["answers"])}
