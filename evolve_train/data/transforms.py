"""Loader-independent transforms of a built timeline: time-aware training and the full-history corpus.

* ``data.time_prefix`` (TempLAMA's time-aware training, Dhingra et al. 2022): every training example of
  step k starts with step k's date in ``data.time_prefix_format`` (the step's name: a year, a month code
  such as ``0102``, a date), and every timestamped eval item's question starts with its own timestamp,
  with ``extra.ts_template`` / ``extra.cloze`` set so the timestamp ablation (docs/metrics.md#5-timestamp-ablation) asks it with
  another date (``shuffled``) and without one (``none``). The embedded world and DyKnow write the same
  prefix themselves, dating their corpora with the step's year or cut (``data.world.dates=prefix``,
  ``data.dyknow.dates=prefix``), so they are not transformed again here (``SELF_DATED``).
* ``data.heldout_share``: each step's held-out slice, never trained on (``data/slices.py``; taken before the
  history is joined, so a slice holds its own step's examples).
* ``data.order=shuffled`` (the ordered-vs-shuffled baseline, as in Kairos): the union of every step's training
  pairs and documents dealt back into the same number of steps with the same per-step sizes, in a seeded
  random order (``data.order_seed``), so time order is the one thing removed (:func:`with_shuffled_order`).
  Applied after the held-out slices are taken (each slice still holds its own step's examples) and before
  the history is joined; the eval sets are unchanged.
* ``data.keep_history``: step k's corpus is every step's corpus up to k (each dated snapshot so far, not
  only the diff) — the positive control of ``experiment=time_aware``.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import Sequence

import numpy as np

from evolve_train.config import DataConfig
from evolve_train.data.corpus import ArrowRecords
from evolve_train.data.dates import check_prefix_format, dated, dated_template
from evolve_train.data.schema import TimeStep, Timeline
from evolve_train.data.slices import with_heldout
from evolve_train.data.timestamps import strip_timestamp_phrase

SELF_DATED = ("synthetic_world", "dyknow")
"""Data kinds whose loader writes the date forms itself (``data.time_prefix`` selects their prefix form)."""


def prefixed_step(step: TimeStep, prefix_format: str) -> TimeStep:
    """The step's pairs and documents, each starting with the step's date (its name)."""
    date = step.name
    pairs = [
        {**pair, "input": dated(pair["input"], date, "prefix", prefix_format=prefix_format)} for pair in step.pairs
    ]
    texts = [{**doc, "text": dated(doc["text"], date, "prefix", prefix_format=prefix_format)} for doc in step.texts]
    return replace(step, pairs=pairs, texts=texts)


def prefixed_item(item: dict, prefix_format: str) -> dict:
    """A timestamped item asked with its timestamp as a prefix (an inline timestamp phrase of its question
    is removed, so the prefix is the one date the question carries); others unchanged."""
    if item.get("timestamp") is None:
        return item
    own = str(item["timestamp"])
    extra = dict(item.get("extra") or {})
    cloze = extra.get("cloze") or strip_timestamp_phrase(item["question"], own)
    extra.update(cloze=cloze, ts_template=dated_template(cloze, "prefix", prefix_format=prefix_format))
    if extra.get("variants"):
        extra["variants"] = [
            dated(strip_timestamp_phrase(v, own), own, "prefix", prefix_format=prefix_format) for v in extra["variants"]
        ]
    return {**item, "question": dated(cloze, own, "prefix", prefix_format=prefix_format), "extra": extra}


def with_time_prefix(timeline: Timeline, prefix_format: str) -> Timeline:
    steps = [prefixed_step(step, prefix_format) for step in timeline.steps]
    sets = [replace(s, items=[prefixed_item(item, prefix_format) for item in s.items]) for s in timeline.eval_sets]
    return replace(timeline, steps=steps, eval_sets=sets)


def with_history(timeline: Timeline) -> Timeline:
    """Step k's corpus = the corpora of steps 0..k, oldest first."""
    steps, pairs, texts = [], [], []
    for step in timeline.steps:
        pairs, texts = pairs + step.pairs, texts + step.texts
        steps.append(replace(step, pairs=list(pairs), texts=list(texts)))
    return replace(timeline, steps=steps)


SHUFFLED_FIELDS = ("pairs", "texts")
"""The corpora ``data.order=shuffled`` deals, each on its own (a step keeps its count of each)."""


def dealt_indices(sizes: Sequence[int], seed: int, field: str) -> list[np.ndarray]:
    """Indices into the union of ``sizes`` records (the steps' records concatenated, oldest first), dealt into
    pieces of ``sizes``: one permutation of ``range(sum(sizes))`` made by ``numpy.random.default_rng([seed,
    k])`` (k: the field's index in :data:`SHUFFLED_FIELDS`), cut at the cumulative sizes."""
    order = np.random.default_rng([seed, SHUFFLED_FIELDS.index(field)]).permutation(int(sum(sizes)))
    bounds = np.cumsum([0, *sizes])
    return [order[bounds[k] : bounds[k + 1]] for k in range(len(sizes))]


def _union(parts: list[Sequence[dict]]):
    """``(records, fingerprint)`` of every step's records, oldest first: one Arrow dataset (and the parts'
    fingerprints) when every non-empty part is Arrow, else a list (and ``None``)."""
    filled = [part for part in parts if len(part)]
    if all(isinstance(part, ArrowRecords) for part in filled):
        from datasets import concatenate_datasets

        return concatenate_datasets([p.dataset for p in filled]), ":".join(p.fingerprint for p in filled)
    return [record for part in filled for record in part], None


def deal_records(parts: list[Sequence[dict]], seed: int, field: str) -> list[Sequence[dict]]:
    """``parts`` (one step's records each) shuffled across the steps: piece k has ``len(parts[k])`` records,
    taken without replacement from the union (:func:`dealt_indices`). An Arrow corpus stays Arrow (a ``select``
    with its own fingerprint, so the tokenized cache never confuses a dealt step with the original)."""
    sizes = [len(part) for part in parts]
    if sum(sizes) == 0:
        return list(parts)
    union, fingerprint = _union(parts)
    pieces = []
    for k, indices in enumerate(dealt_indices(sizes, seed, field)):
        if fingerprint is None:
            pieces.append([union[int(i)] for i in indices])
            continue
        tag = hashlib.sha256(f"{fingerprint}:shuffled:{field}:{seed}:{k}".encode()).hexdigest()
        pieces.append(ArrowRecords(union.select(indices.tolist()), tag))
    return pieces


def with_shuffled_order(timeline: Timeline, seed: int) -> Timeline:
    """``data.order=shuffled``: every step's pairs and documents dealt at random into the same steps with the
    same per-step counts (:func:`deal_records`); held-out slices and eval sets unchanged. A record keeps what it
    holds (a date prefix written before, ``data.time_prefix``, stays its own step's date)."""
    dealt = {name: deal_records([getattr(s, name) for s in timeline.steps], seed, name) for name in SHUFFLED_FIELDS}
    steps = [
        replace(step, **{name: dealt[name][k] for name in SHUFFLED_FIELDS}) for k, step in enumerate(timeline.steps)
    ]
    return replace(timeline, steps=steps)


def apply_transforms(timeline: Timeline, cfg: DataConfig) -> Timeline:
    """The transforms ``cfg`` asks for (the world and DyKnow date their own corpora: see the module docstring)."""
    if cfg.time_prefix:
        check_prefix_format(cfg.time_prefix_format)
        if cfg.kind not in SELF_DATED:
            timeline = with_time_prefix(timeline, cfg.time_prefix_format)
    timeline = with_heldout(timeline, cfg.objective, cfg.heldout_share, cfg.heldout_seed)  # before the history
    if cfg.order == "shuffled":  # after the slices, before the history
        timeline = with_shuffled_order(timeline, cfg.order_seed)
    if cfg.keep_history:
        timeline = with_history(timeline)
    return timeline
