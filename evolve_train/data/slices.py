"""Held-out time slices (docs/metrics.md#9-time-sliced-perplexity): a fixed, seeded share of each step's training corpus, never trained on.

:func:`with_heldout` moves ``data.heldout_share`` of each step's training examples — the masked-entity pairs
(``data.objective=masked_entity``) or the documents (``clm``; under ``auto`` the step's own objective,
``data/objective.py``) — from ``TimeStep.pairs`` / ``texts`` into ``TimeStep.heldout``, before
``data.keep_history`` joins the corpora (so the slice of step j holds step j's examples only, and no step
trains on any slice). The selection is ``round(share · n)`` distinct indices (at
least one, at most n − 1, when the step has two or more examples and the share is positive) drawn by
``numpy.random.default_rng([heldout_seed, step index])``: the same data and settings always hold out the
same examples. An Arrow corpus (``data/corpus.py``) stays Arrow: a ``select`` of its rows, with its own
fingerprint, so the tokenized cache never confuses the kept rows with the whole corpus.

The ``slices`` evaluator (``evaluation/evaluators/slices.py``) scores every slice at every checkpoint.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import Sequence

import numpy as np

from evolve_train.data.corpus import ArrowRecords
from evolve_train.data.objective import corpus_objective
from evolve_train.data.schema import TimeStep, Timeline


def heldout_indices(n: int, share: float, seed: int, step: int) -> np.ndarray:
    """Sorted indices of the held-out examples of a step with ``n`` examples (see the module docstring)."""
    if share <= 0 or n < 2:
        return np.zeros(0, dtype=np.int64)
    count = min(n - 1, max(1, int(round(share * n))))
    return np.sort(np.random.default_rng([seed, step]).choice(n, size=count, replace=False)).astype(np.int64)


def _take(records: Sequence[dict], indices: np.ndarray, tag: str):
    """``records[indices]``: an Arrow ``select`` (fingerprinted with ``tag``) or a list."""
    if isinstance(records, ArrowRecords):
        fingerprint = hashlib.sha256(f"{records.fingerprint}:{tag}".encode()).hexdigest()
        return ArrowRecords(records.dataset.select(indices.tolist()), fingerprint)
    return [records[int(i)] for i in indices]


def split_records(records: Sequence[dict], share: float, seed: int, step: int) -> tuple[Sequence[dict], Sequence[dict]]:
    """``(kept for training, held out)`` of a step's ``records``; unchanged records (and no slice) at share 0."""
    held = heldout_indices(len(records), share, seed, step)
    if not len(held):
        return records, []
    keep = np.setdiff1d(np.arange(len(records), dtype=np.int64), held, assume_unique=True)
    tag = f"heldout:{share}:{seed}:{step}"
    return _take(records, keep, tag + ":train"), _take(records, held, tag + ":slice")


def heldout_step(step: TimeStep, objective: str, share: float, seed: int) -> TimeStep:
    """The step with its slice taken out of the objective's corpus (pairs, or documents for ``clm``; under
    ``auto`` the step's own objective, ``data/objective.py``, and no slice where it has none)."""
    resolved = corpus_objective(objective, step)
    if resolved is None:
        return step
    field = "texts" if resolved == "clm" else "pairs"
    kept, held = split_records(getattr(step, field), share, seed, step.index)
    return replace(step, **{field: kept}, heldout=held)


def with_heldout(timeline: Timeline, objective: str, share: float, seed: int) -> Timeline:
    """Every step's held-out slice (``data.heldout_share``, ``data.heldout_seed``)."""
    if share <= 0:
        return timeline
    return replace(timeline, steps=[heldout_step(step, str(objective), share, seed) for step in timeline.steps])
