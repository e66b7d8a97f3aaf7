"""Private vs dev eval items (docs/metrics.md#8-statistics-and-hygiene): ``dev_items`` and the private-leak check.

Every eval item carries ``split`` (``dev`` | ``private``; an item without one counts as private). Only dev
items may be used for tuning prompts or hyperparameters, or as few-shot examples: ``dev_items`` is the one
way to pick them. ``check_private_leaks`` runs in ``train`` before anything is written or trained and raises
a :class:`DataError` naming the private item and where its question was found. The rule, with its rationale,
is in docs/hygiene.md; in short, with every text compared as the token sequence of docs/metrics.md#1-answer-matching
``normalize``:

* A **surface** of a private item is its question and each of its held-out variants (``extra.variants``;
  a dated variant also without its date, so the wording is caught in a training example of any date).
  A surface containing ``?`` is *interrogative*; any other is a *cloze* (a statement with its value cut off).
* **Training examples** (every step's corpus: masked-entity pairs with the mask replaced by the output, and
  documents). An interrogative surface leaks when its tokens occur anywhere in an example; a cloze *variant*
  leaks when its tokens immediately followed by a gold alias occur in an example. The cloze *question* is
  not checked against the corpus: followed by its gold it is a statement of the fact, and facts belong in
  the corpora (docs/metrics.md#8-statistics-and-hygiene) — the embedded world's probes are exactly such efficacy probes. Its
  held-out variants are what must stay out of training, and they are checked.
* **QA-adaptation data**: an adaptation item whose question or prompt (normalized) equals a surface or the
  item's prompt leaks, and its pairs are also checked as training examples above.
* **Prompts** (the static text of ``data.prompt_template``, i.e. few-shot examples, or any text given to
  ``check_prompt_text``): any surface, cloze or not, whose tokens occur in it leaks.

Each evaluation touching private items is appended to ``<run_dir>/private_evaluations.jsonl``
(``record_private_evaluations``).
"""

from __future__ import annotations

import json
import logging
import string
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Optional, Union

from evolve_train.data.answers import normalize
from evolve_train.data.masking import MASKS
from evolve_train.data.timeline import EvalSet, Timeline
from evolve_train.errors import DataError

log = logging.getLogger(__name__)

DEV, PRIVATE = "dev", "private"
PRIVATE_LOG = "private_evaluations.jsonl"
_KEY = 3
"""Phrases are indexed by their first (up to) three tokens."""

Items = Union[Timeline, EvalSet, Iterable[EvalSet], Iterable[dict]]


# ---------------------------------------------------------------- dev / private


def is_private(item: dict) -> bool:
    """True unless the item is explicitly ``split: dev`` (an item without a split is private)."""
    return item.get("split") != DEV


def _items(source: Items) -> Iterator[tuple[Optional[str], dict]]:
    if isinstance(source, Timeline):
        source = source.eval_sets
    if isinstance(source, EvalSet):
        source = [source]
    for entry in source:
        if isinstance(entry, EvalSet):
            for item in entry.items:
                yield entry.name, item
        else:
            yield None, entry


def dev_items(source: Items, *, kinds: Optional[Iterable[str]] = None) -> list[dict]:
    """The ``dev`` items of a timeline, an eval set, eval sets or item dicts (of set ``kinds`` when given),
    in order, without duplicates by id. The only items that may tune prompts or serve as few-shot examples."""
    kinds = None if kinds is None else set(kinds)
    seen, out = set(), []
    for _, item in _items(source):
        if is_private(item) or (kinds is not None and item.get("set") not in kinds):
            continue
        if item.get("id") in seen:
            continue
        seen.add(item.get("id"))
        out.append(item)
    return out


def private_items(source: Items) -> list[tuple[Optional[str], dict]]:
    """(set name, item) of every private item."""
    return [(name, item) for name, item in _items(source) if is_private(item)]


# ---------------------------------------------------------------- phrase matching


def tokens(text: str) -> tuple[str, ...]:
    """The docs/metrics.md#1-answer-matching normalized token sequence of ``text``."""
    return tuple(normalize(text).split())


def is_interrogative(text: str) -> bool:
    return "?" in text


@dataclass(frozen=True)
class Surface:
    """One phrase of a private item that must not occur in a channel."""

    item_id: str
    set_name: Optional[str]
    what: str
    """``question`` or ``variant k``."""
    text: str
    phrase: tuple[str, ...]
    """Tokens that must not occur (the surface, or a cloze variant followed by a gold alias)."""

    def describe(self) -> str:
        where = f" (set {self.set_name})" if self.set_name else ""
        return f"private eval item '{self.item_id}'{where}: its {self.what} {self.text!r}"


class PhraseIndex:
    """Finds the first indexed phrase occurring (as contiguous tokens) in a token sequence."""

    def __init__(self) -> None:
        self._by_key: dict[tuple[str, ...], list[Surface]] = {}
        self._lengths: set[int] = set()

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_key.values())

    def add(self, surface: Surface) -> None:
        if not surface.phrase:
            return
        key = surface.phrase[:_KEY]
        self._by_key.setdefault(key, []).append(surface)
        self._lengths.add(len(key))

    def find(self, sequence: tuple[str, ...]) -> Optional[Surface]:
        if not self._by_key:
            return None
        lengths = sorted(self._lengths)
        for start in range(len(sequence)):
            for n in lengths:
                for surface in self._by_key.get(sequence[start : start + n], ()):
                    if sequence[start : start + len(surface.phrase)] == surface.phrase:
                        return surface
        return None


def _surfaces(name: Optional[str], item: dict) -> Iterator[tuple[str, str]]:
    """The question and the held-out variants; a variant that carries the item's timestamp also without the
    date and what precedes it, so a held-out wording is found in a training example of any date."""
    yield "question", item["question"]
    stamp = str(item["timestamp"]) if item.get("timestamp") is not None else None
    for k, variant in enumerate((item.get("extra") or {}).get("variants") or []):
        if isinstance(variant, str):
            yield f"held-out variant {k}", variant
            after = variant.split(stamp, 1)[1] if stamp and stamp in variant else ""
            if after.strip(" ,:"):
                yield f"held-out variant {k} (at any date)", after


def corpus_index(private: list[tuple[Optional[str], dict]]) -> PhraseIndex:
    """Phrases of private items that must not occur in a training example (see the module docstring)."""
    index = PhraseIndex()
    for name, item in private:
        for what, text in _surfaces(name, item):
            if is_interrogative(text):
                index.add(Surface(item["id"], name, what, text, tokens(text)))
            elif what != "question":  # a cloze variant: followed by its gold
                for gold in item.get("answers") or []:
                    index.add(
                        Surface(item["id"], name, what + " followed by its gold", text, tokens(text) + tokens(gold))
                    )
    return index


def prompt_index(private: list[tuple[Optional[str], dict]]) -> PhraseIndex:
    """Every surface of every private item (few-shot prompts may show none of them)."""
    index = PhraseIndex()
    for name, item in private:
        for what, text in _surfaces(name, item):
            index.add(Surface(item["id"], name, what, text, tokens(text)))
    return index


def filled(pair: dict) -> str:
    """A masked-entity pair as the text it teaches: the mask replaced by the output."""
    text, output = str(pair.get("input", "")), str(pair.get("output", ""))
    if not any(mask in text for mask in MASKS.values()):
        return f"{text} {output}"
    for mask in MASKS.values():
        text = text.replace(mask, f" {output} ")
    return text


def training_examples(timeline: Timeline) -> Iterator[tuple[str, str]]:
    """(where, text) of every training example of every step."""
    for step in timeline.steps:
        label = f"step {step.index} ({step.name})"
        for k, pair in enumerate(step.pairs):
            yield (
                f"{label} training pair #{k} (input {pair.get('input')!r}, output {pair.get('output')!r})",
                filled(pair),
            )
        for k, doc in enumerate(step.texts):
            doc_id = doc.get("doc_id")
            yield (
                f"{label} training document {doc_id!r}" if doc_id is not None else f"{label} training document #{k}",
                str(doc.get("text", "")),
            )


def _excerpt(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def _leak(surface: Surface, where: str, rule: str) -> DataError:
    return DataError(
        f"{surface.describe()} {rule} {where}. Private eval items must never be trained on or "
        "shown in prompts (docs/metrics.md#8-statistics-and-hygiene, docs/hygiene.md): remove it there, or use a dev item"
    )


def static_prompt_text(template: str) -> str:
    """The literal text of a prompt template, each ``{field}`` replaced by a line break."""
    parts = []
    for literal, field_name, _, _ in string.Formatter().parse(template):
        parts.append(literal)
        if field_name is not None:
            parts.append("\n")
    return "".join(parts)


def check_prompt_text(text: str, source: Items, where: str = "a few-shot prompt") -> None:
    """DataError if ``text`` (a few-shot prompt, a prompt template) contains a surface of a private item."""
    _check_prompt(text, private_items(source), where)


def _check_prompt(text: str, private: list[tuple[Optional[str], dict]], where: str) -> None:
    hit = prompt_index(private).find(tokens(text))
    if hit is not None:
        raise _leak(hit, where + f" ({_excerpt(text)!r})", "occurs in")


def check_private_leaks(
    timeline: Timeline, qa_pairs: Optional[list[dict]] = None, qa_source: Optional[str] = None
) -> dict:
    """Raise DataError if a private item leaks into the training examples, the QA-adaptation pairs
    (``qa_pairs``: ``{input, output}``, read from ``qa_source``) or the prompt template's static text.
    Returns counts of what was checked (for the log and tests)."""
    start = time.perf_counter()
    private = private_items(timeline)
    _check_prompt(
        static_prompt_text(timeline.prompt_template), private, f"data.prompt_template {timeline.prompt_template!r}"
    )
    index = corpus_index(private)
    n_examples = 0
    for where, text in training_examples(timeline):
        n_examples += 1
        hit = index.find(tokens(text))
        if hit is not None:
            raise _leak(hit, where, "occurs in")
    if qa_pairs:
        source = f"the QA-adaptation set {qa_source}" if qa_source else "the QA-adaptation set"
        exact: dict[tuple[str, ...], Surface] = {}
        for name, item in private:
            for what, text in _surfaces(name, item):
                exact.setdefault(tokens(text), Surface(item["id"], name, what, text, tokens(text)))
            prompt = timeline.prompt(item)
            exact.setdefault(tokens(prompt), Surface(item["id"], name, "prompt", prompt, tokens(prompt)))
        for k, pair in enumerate(qa_pairs):
            where = f"{source}, item #{k} ({_excerpt(str(pair.get('input')))!r})"
            hit = exact.get(tokens(str(pair.get("input", ""))))
            if hit is not None:
                raise _leak(hit, where, "is asked by")
            hit = index.find(tokens(filled(pair)))
            if hit is not None:
                raise _leak(hit, where, "occurs in")
    n_cloze = sum(1 for _, item in private if not is_interrogative(item["question"]))
    counts = {
        "private_items": len(private),
        "cloze_questions": n_cloze,
        "phrases": len(index),
        "training_examples": n_examples,
        "qa_pairs": len(qa_pairs or []),
        "seconds": round(time.perf_counter() - start, 3),
    }
    log.info(
        "private-leak check: %(private_items)d private items (%(cloze_questions)d cloze questions: their "
        "held-out variants are checked against the corpus), %(training_examples)d training examples, "
        "%(qa_pairs)d QA-adaptation pairs: clean (%(seconds).2f s)",
        counts,
    )
    return counts


# ---------------------------------------------------------------- the record of private evaluations


def record_private_evaluations(run_dir: Path, checkpoint: int, sets: list[EvalSet], rows: list[dict]) -> list[dict]:
    """Append one record per eval set that was evaluated (named in ``rows``) and holds private items:
    time, checkpoint, set, count of private items, evaluators. Returns the records."""
    evaluated: dict[str, set[str]] = {}
    for row in rows:
        if row.get("set_name") is not None:
            evaluated.setdefault(str(row["set_name"]), set()).add(str(row.get("group")))
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    records = []
    for eval_set in sets:
        count = sum(1 for item in eval_set.items if is_private(item))
        if eval_set.name in evaluated and count:
            records.append(
                {
                    "time": now,
                    "checkpoint": checkpoint,
                    "set": eval_set.name,
                    "count": count,
                    "n": len(eval_set.items),
                    "evaluators": sorted(evaluated[eval_set.name]),
                }
            )
    if records:  # append by an atomic replace: a killed run never leaves half a line
        from evolve_train.utils.io import atomic_write_text

        path = Path(run_dir) / PRIVATE_LOG
        before = path.read_text(encoding="utf-8") if path.exists() else ""
        atomic_write_text(path, before + "".join(json.dumps(record) + "\n" for record in records))
    return records


__all__ = [
    "DEV",
    "PRIVATE",
    "PRIVATE_LOG",
    "dev_items",
    "private_items",
    "is_private",
    "check_private_leaks",
    "check_prompt_text",
    "record_private_evaluations",
    "tokens",
    "filled",
    "static_prompt_text",
]
