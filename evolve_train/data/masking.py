"""Masked-entity pairs from raw text: the salient-span format of the EvolvingQA / TemporalWiki corpora.

A pair is ``{"input": sentence with one entity replaced by the mask, "output": the entity}``, one pair per
entity span. The mask is ``<mask>`` for causal models and the T5 sentinel ``<extra_id_0>`` for seq2seq
models (``models/text_format.py`` reads either). Spans are character offsets ``[start, end)`` into the
text; the pair's context is the sentence holding the span (sentences end at ``.``, ``!`` or ``?``
followed by whitespace), so long documents give short training inputs.
"""

from __future__ import annotations

import re

MASKS = {"causal": "<mask>", "t5": "<extra_id_0>"}
MASK_TOKENS = ("<mask>", "<extra_id_0>", "[MASK]")
"""Every mask token a masked-entity input may hold (the two of ``MASKS`` and BERT's)."""

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_WORD = re.compile(r"\b(?:[A-Z][\w'’-]*|\d{4}\b)")
_CAPITALIZED = re.compile(r"[A-Z][\w'’-]*")


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """[start, end) of each sentence of ``text`` (whitespace between sentences belongs to none)."""
    spans, start = [], 0
    for match in _SENTENCE_END.finditer(text):
        spans.append((start, match.start()))
        start = match.end()
    if start < len(text):
        spans.append((start, len(text)))
    return spans


def capitalized_spans(text: str) -> list[tuple[int, int]]:
    """The ``--heuristic capitalized`` entity spans: maximal runs of capitalized words joined by single
    spaces, and 4-digit numbers (years). A run that is only a sentence's first word is skipped (it is
    capitalized for grammar, not as a name); a first word followed by more capitalized words is kept."""
    starts = {start for start, _ in sentence_spans(text)}
    spans: list[tuple[int, int]] = []
    position = 0
    while True:
        match = _WORD.search(text, position)
        if match is None:
            return spans
        start, end = match.span()
        if match.group().isdigit():
            spans.append((start, end))
            position = end
            continue
        words = 1
        while True:
            following = _CAPITALIZED.match(text, end + 1) if text[end : end + 1] == " " else None
            if following is None:
                break
            end = following.end()
            words += 1
        if not (start in starts and words == 1):
            spans.append((start, end))
        position = end


def masked_pairs(text: str, spans: list[tuple[int, int]], mask: str) -> list[dict]:
    """One ``{"input", "output"}`` pair per span, the input being the span's sentence with the span masked.
    A span crossing a sentence boundary uses the whole text as context; empty or blank spans are skipped."""
    sentences = sentence_spans(text)
    pairs = []
    for start, end in spans:
        entity = text[start:end].strip()
        if not entity:
            continue
        low, high = next(((s, e) for s, e in sentences if s <= start and end <= e), (0, len(text)))
        context = text[low:start] + mask + text[end:high]
        pairs.append({"input": context.strip(), "output": entity})
    return pairs
