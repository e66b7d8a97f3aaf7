"""Token-budget batches and packed documents: how many tokens a micro-batch holds, and how the ``clm``
objective lays documents into rows.

* :class:`TokenBudgetBatches` (``trainer.tokens_per_batch``): each micro-batch is filled with
  length-grouped rows until its *padded* size (rows x width of its longest row) would pass the budget. The
  budget is **per process**, like ``trainer.batch_size``: a global batch holds ``num_processes`` times as
  many rows, and the loop's round-robin shard (``indices[process_index::num_processes]``) gives every
  process at most ``budget // width`` rows of at most ``width`` tokens. The batch list of an epoch is a pure
  function of (seed, epoch, lengths, budget, num_processes), so a resumed run skips exactly the batches it
  trained before.
* :func:`pack_documents`, :class:`DocumentPacker`, :func:`chunk_documents` (how ``clm`` documents are laid
  into rows): defined in ``models/packing.py``, where the text format uses them, and re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from evolve_train.models.packing import (  # noqa: F401  (re-exported: the document packing)
    IGNORE,
    DocumentPacker,
    chunk_documents,
    pack_documents,
    restart_first_segment,
)


@dataclass
class TokenBudgetBatches:
    """Shuffled batches of similar-length rows, each at most ``tokens_per_batch`` padded tokens per process.

    Same interface as ``training.examples.LengthGroupedBatches``: ``lengths``, ``epoch(e)`` (the batches, as
    global row indices), ``count(e)`` (how many) and ``subset(rows)``. Rows are shuffled, cut into groups
    of about ``group_factor`` global budgets of tokens, sorted by length inside each group, filled greedily
    into batches (a group's last batch is carried into the next group, so only the epoch's last batch may
    be short), and the batches shuffled: a fixed seed and epoch give a fixed order."""

    lengths: Sequence[int]
    tokens_per_batch: int
    seed: int
    num_processes: int = 1
    group_factor: int = 50
    same_count_every_epoch = False  # a budget's batch count depends on the epoch's shuffle

    def epoch(self, epoch: int) -> list[list[int]]:
        lengths = np.asarray(self.lengths, dtype=np.int64)
        rng = np.random.default_rng([self.seed, epoch])
        order = rng.permutation(len(lengths))
        batches: list[list[int]] = []
        carry = np.empty(0, dtype=np.int64)
        for group in self._groups(lengths, order):
            group = np.concatenate([carry, group])
            filled = self._fill(group[np.argsort(lengths[group], kind="stable")], lengths)
            carry = np.asarray(filled.pop(), dtype=np.int64)  # a group's last batch may be short: refilled next
            batches.extend(filled)
        self._settle(batches, carry.tolist(), lengths)
        return [batches[i] for i in rng.permutation(len(batches))]

    def _settle(self, batches: list[list[int]], rows: list[int], lengths: np.ndarray) -> None:
        """The epoch's last rows: a batch of their own. Fewer than ``num_processes`` would leave a process
        without rows: they join the first batch with room for them, or take rows from one that has enough."""
        n = self.num_processes
        if 0 < len(rows) < n:
            for batch in batches:
                if -(-(len(batch) + len(rows)) // n) * int(lengths[batch + rows].max()) <= self.tokens_per_batch:
                    batch.extend(rows)
                    return
            donor = next((b for b in batches if len(b) >= 2 * n - len(rows)), None)
            if donor is not None:  # one row per process fits (the config keeps tokens_per_batch >= seq_len)
                rows = rows + [donor.pop() for _ in range(n - len(rows))]
        if rows:
            batches.append(rows)

    def _groups(self, lengths: np.ndarray, order: np.ndarray) -> list[np.ndarray]:
        """``order`` cut where the running token count passes each multiple of the group size."""
        group_tokens = self.group_factor * self.tokens_per_batch * self.num_processes
        running = np.cumsum(lengths[order])
        cuts = np.flatnonzero(np.diff(running // group_tokens)) + 1
        return np.split(order, cuts)

    def _fill(self, ordered: np.ndarray, lengths: np.ndarray) -> list[list[int]]:
        """Rows sorted by length (ascending) -> batches whose per-process share fits the budget."""
        n, batches, current = self.num_processes, [], []
        for row in ordered.tolist():
            rows_per_process = -(-(len(current) + 1) // n)
            if current and rows_per_process * int(lengths[row]) > self.tokens_per_batch:
                batches.append(current)
                current = []
            current.append(row)
        if current:
            batches.append(current)
        return batches

    def count(self, epoch: int) -> int:
        return len(self.epoch(epoch))

    def subset(self, lengths: Sequence[int]) -> "TokenBudgetBatches":
        """The same batching over other rows' ``lengths`` (a method's per-epoch selection)."""
        return TokenBudgetBatches(
            list(lengths), self.tokens_per_batch, self.seed, self.num_processes, self.group_factor
        )


def padding_efficiency(batches: Iterable[Sequence[int]], lengths: Sequence[int]) -> float:
    """Real tokens / all tokens (rows x padded width) over ``batches`` of row indices."""
    real = total = 0
    for batch in batches:
        widths = [lengths[i] for i in batch]
        real += sum(widths)
        total += len(widths) * max(widths)
    return real / total if total else 1.0
