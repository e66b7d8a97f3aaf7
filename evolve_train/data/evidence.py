"""The evidence a knowledge-cutoff estimate reads (``evaluation/metrics/cutoff.py``): rows of a loss matrix over
time slices, and dated answers to facts. Plain data, so the loaders of others' results (``data/loaders``) build them
without reaching up into evaluation."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable, Optional

import numpy as np

Label = Hashable


@dataclass
class LossRow:
    """One row of a loss matrix: the mean loss per slice (in slice order), optionally per-document losses
    (``docs[j]``: slice j's documents, the same order at every row that scores the same documents) or the
    standard error of each slice's mean over its items, and the item counts."""

    name: str
    means: np.ndarray
    docs: Optional[list[np.ndarray]] = None
    stderr: Optional[np.ndarray] = None
    counts: Optional[np.ndarray] = None

    def __post_init__(self) -> None:
        self.means = np.asarray(self.means, dtype=float)
        if self.docs is not None:
            self.docs = [np.asarray(d, dtype=float) for d in self.docs]
            self.means = np.array([d.mean() if len(d) else np.nan for d in self.docs])
            self.counts = np.array([len(d) for d in self.docs])
        if self.stderr is not None:
            self.stderr = np.asarray(self.stderr, dtype=float)

    @property
    def n(self) -> int:
        return int(np.sum(self.counts)) if self.counts is not None else 0


@dataclass
class LossMatrix:
    """Rows over the same slices (labels in time order)."""

    slices: list[Label]
    rows: list[LossRow] = field(default_factory=list)

    def row(self, name: str) -> LossRow:
        for row in self.rows:
            if row.name == name:
                return row
        raise KeyError(f"no row {name!r} (rows: {[r.name for r in self.rows]})")


@dataclass(frozen=True)
class DatedAnswer:
    """One answer to one fact (one prompt): the start year of the value given (None: no dated value), whether
    it is the fact's current value (None: not judged, or irrelevant) and the start year of the current value."""

    fact: Hashable
    year: Optional[int] = None
    current: Optional[bool] = None
    current_year: Optional[int] = None
    prompt: str = ""
    """Which prompt (wording) of the fact was answered; informational."""
