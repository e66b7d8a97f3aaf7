"""Token-budget batches and packed documents: how many tokens a micro-batch holds, and how the ``clm``
objective lays documents into rows.

* :class:`TokenBudgetBatches` (``trainer.tokens_per_batch``): each micro-batch is filled with
  length-grouped rows until its *padded* size (rows x width of its longest row) would pass the budget. The
  budget is **per process**, like ``trainer.batch_size``: a global batch holds ``num_processes`` times as
  many rows, and the loop's round-robin shard (``indices[process_index::num_processes]``) gives every
  process at most ``budget // width`` rows of at most ``width`` tokens. The batch list of an epoch is a pure
  function of (seed, epoch, lengths, budget, num_processes), so a resumed run skips exactly the batches it
  trained before.
* :func:`pack_documents`: documents (each ``prefix + tokens + EOS``) concatenated and cut into rows of
  ``seq_len`` tokens; only the very last row is shorter. Each row carries ``position_ids`` that restart at 0
  at every document start (and at the row start, where a document cut by the previous row continues): the
  collate passes them to the model when ``trainer.attention_reset=true``, and Hugging Face's mask builder
  (``transformers.masking_utils.find_packed_sequence_indices``) then makes attention block-diagonal.
  Labels are those of each document alone: a document's first token (its BOS, or without one its first
  text token) is never a target, so no loss term predicts one document from another.
* :func:`chunk_documents`: the former layout (each document cut on its own, the last piece padded in its
  batch), kept for ``scripts/bench.py``'s packing-efficiency comparison.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

IGNORE = -100
"""Label of a position the loss skips (the same value as ``models.text_format.IGNORE``)."""


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


class DocumentPacker:
    """Packs documents into rows of ``seq_len`` ids as they come (``add`` returns the rows that are full,
    ``flush`` the last, shorter one), holding less than one row between calls: a step's documents can be
    packed batch by batch (``TextFormat.encode_batches``) without holding the corpus in Python lists."""

    def __init__(self, seq_len: int, eos_id: int, prefix: Sequence[int] = ()):
        self.seq_len, self.eos_id, self.prefix = seq_len, eos_id, list(prefix)
        self.carry: dict[str, list[int]] = {"input_ids": [], "labels": [], "position_ids": []}

    def add(self, documents: Iterable[list[int]]) -> dict[str, list[list[int]]]:
        """Append ``prefix + ids + [eos_id]`` per document; the rows completed so far."""
        skip = max(1, len(self.prefix))  # the document's first token is never a target
        for doc in documents:
            piece = self.prefix + list(doc) + [self.eos_id]
            self.carry["input_ids"].extend(piece)
            self.carry["labels"].extend([IGNORE] * skip + piece[skip:])
            self.carry["position_ids"].extend(range(len(piece)))
        return self._rows(full_only=True)

    def flush(self) -> dict[str, list[list[int]]]:
        """The last row (shorter than ``seq_len``), if any tokens are left."""
        return self._rows(full_only=False)

    def _rows(self, full_only: bool) -> dict[str, list[list[int]]]:
        rows: dict[str, list[list[int]]] = {name: [] for name in self.carry}
        total = len(self.carry["input_ids"])
        stop = total - total % self.seq_len if full_only else total
        for start in range(0, stop, self.seq_len):
            for name, values in self.carry.items():
                rows[name].append(values[start : start + self.seq_len])
        rows["position_ids"] = [restart_first_segment(p) for p in rows["position_ids"]]
        self.carry = {name: values[stop:] for name, values in self.carry.items()}
        return rows


def pack_documents(
    documents: Iterable[list[int]], seq_len: int, eos_id: int, prefix: Sequence[int] = ()
) -> dict[str, list[list[int]]]:
    """Documents' token ids -> rows of ``seq_len`` ids (``input_ids``, ``labels``, ``position_ids``), each
    document laid out as ``prefix + ids + [eos_id]``; see the module docstring."""
    packer = DocumentPacker(seq_len, eos_id, prefix)
    rows = packer.add(documents)
    for name, values in packer.flush().items():
        rows[name].extend(values)
    return rows


def restart_first_segment(positions: list[int]) -> list[int]:
    """A row's ``positions`` with its leading run (a document continued from the previous row) restarted
    at 0, up to the first document start."""
    offset = positions[0] if positions else 0
    if offset == 0:
        return positions
    out = list(positions)
    for i, value in enumerate(positions):
        if i and value == 0:
            break
        out[i] = value - offset
    return out


def chunk_documents(
    documents: Iterable[list[int]], seq_len: int, eos_id: int, prefix: Sequence[int] = ()
) -> dict[str, list[list[int]]]:
    """The unpacked layout: each ``ids + [eos_id]`` cut on its own into pieces that each open with ``prefix``
    (the last piece of every document is short, and padded in its batch)."""
    width = seq_len - len(prefix)
    skip = [IGNORE] * len(prefix)
    rows: dict[str, list[list[int]]] = {"input_ids": [], "labels": []}
    for doc in documents:
        row = list(doc) + [eos_id]
        for start in range(0, len(row), width):
            rows["input_ids"].append(list(prefix) + row[start : start + width])
            rows["labels"].append(skip + row[start : start + width])
    return rows


def padding_efficiency(batches: Iterable[Sequence[int]], lengths: Sequence[int]) -> float:
    """Real tokens / all tokens (rows x padded width) over ``batches`` of row indices."""
    real = total = 0
    for batch in batches:
        widths = [lengths[i] for i in batch]
        real += sum(widths)
        total += len(widths) * max(widths)
    return real / total if total else 1.0
