"""Earlier time steps' training examples, as methods see them (replay mixes them, EWC estimates a Fisher).

Tokenizing is cheap but not free, and most methods never look back, so each step is tokenized on
first access only and then kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Callable


class TokenizedHistory(Sequence):
    """``history[i]``: step i's tokenized examples (a ``datasets.Dataset`` of ``input_ids``/``labels``)."""

    def __init__(self, steps: list, tokenize: Callable, pad_id: int, attention_reset: bool = False):
        self.steps = list(steps)
        """The raw time steps (``TimeStep``), oldest first."""
        self.pad_id = pad_id
        """Padding id for :func:`evolve_train.training.examples.collate`."""
        self.attention_reset = attention_reset
        """``trainer.attention_reset``: packed rows are collated as the loop collates them."""
        self._tokenize = tokenize
        self._cache: dict[int, object] = {}

    def __len__(self) -> int:
        return len(self.steps)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        if index not in self._cache:
            self._cache[index] = self._tokenize(self.steps[index])
        return self._cache[index]
