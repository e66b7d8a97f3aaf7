"""Packed documents: how the ``clm`` objective lays documents' token ids into training rows.

* :func:`pack_documents` (and :class:`DocumentPacker`, the same batch by batch): documents (each
  ``prefix + tokens + EOS``) concatenated and cut into rows of ``seq_len`` tokens; only the very last row is
  shorter. Each row carries ``position_ids`` that restart at 0 at every document start (and at the row start,
  where a document cut by the previous row continues): the collate passes them to the model when
  ``trainer.attention_reset=true``, and Hugging Face's mask builder
  (``transformers.masking_utils.find_packed_sequence_indices``) then makes attention block-diagonal. Labels are
  those of each document alone: a document's first token (its BOS, or without one its first text token) is
  never a target, so no loss term predicts one document from another.
* :class:`ArrayPacker`: the same rows as :class:`DocumentPacker`, built with NumPy as flat arrays
  (:class:`PackedBatch`: token ids, which positions are not targets, where documents start), which the
  tokenized cache stores without ever making per-token Python lists.
* :func:`chunk_documents`: the former layout (each document cut on its own, the last piece padded in its
  batch), kept for ``scripts/bench.py``'s packing-efficiency comparison.

The text format (``models/text_format.py``) packs with it; ``training/packing.py`` re-exports it next to the
token-budget batches.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Iterable, Sequence

import numpy as np

IGNORE = -100
"""Label of a position the loss skips (the same value as ``models.text_format.IGNORE``)."""


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


class PackedBatch(Mapping):
    """Packed rows as flat arrays: ``ids`` (every row's token ids, end to end), ``offsets`` (row ``r`` is
    ``ids[offsets[r]:offsets[r + 1]]``), ``skip`` (the position's label is ``IGNORE``; elsewhere it is the id)
    and ``starts`` (a document starts at the position: position ids count up from 0 there). Read as a mapping
    it is the batch :class:`DocumentPacker` gives (``input_ids``, ``labels``, ``position_ids`` as lists)."""

    def __init__(self, ids: np.ndarray, offsets: np.ndarray, skip: np.ndarray, starts: np.ndarray):
        self.ids, self.offsets, self.skip, self.starts = ids, offsets, skip, starts
        self._lists: dict[str, list[list[int]]] = {}

    def __len__(self) -> int:
        return 3

    def __iter__(self):
        return iter(("input_ids", "labels", "position_ids"))

    def __getitem__(self, name: str) -> list[list[int]]:
        if name not in ("input_ids", "labels", "position_ids"):
            raise KeyError(name)
        if name not in self._lists:
            self._lists[name] = [values.tolist() for values in self._rows(self._column(name))]
        return self._lists[name]

    @property
    def n_rows(self) -> int:
        return len(self.offsets) - 1

    def _rows(self, values: np.ndarray) -> list[np.ndarray]:
        return [values[a:b] for a, b in zip(self.offsets[:-1], self.offsets[1:])]

    def _column(self, name: str) -> np.ndarray:
        if name == "input_ids":
            return self.ids
        if name == "labels":
            return np.where(self.skip, IGNORE, self.ids)
        restart = self.starts.copy()
        restart[self.offsets[:-1][self.offsets[:-1] < len(restart)]] = True  # a row starts its positions at 0
        index = np.arange(len(restart))
        return index - np.maximum.accumulate(np.where(restart, index, 0))


class ArrayPacker:
    """:class:`DocumentPacker` with NumPy: ``add`` returns the full rows as a :class:`PackedBatch`, ``flush``
    the last, shorter one; less than one row is held between calls."""

    def __init__(self, seq_len: int, eos_id: int, prefix: Sequence[int] = ()):
        self.seq_len, self.eos_id, self.prefix = seq_len, eos_id, np.asarray(list(prefix), dtype=np.int64)
        self.carry = (np.zeros(0, np.int64), np.zeros(0, bool), np.zeros(0, bool))

    def add(self, documents: Sequence[Sequence[int]]) -> PackedBatch:
        """Append ``prefix + ids + [eos_id]`` per document; the rows completed so far."""
        lengths = np.fromiter((len(doc) for doc in documents), dtype=np.int64, count=len(documents))
        pre = len(self.prefix)
        sizes = lengths + pre + 1
        first = np.zeros(len(documents), dtype=np.int64)
        np.cumsum(sizes[:-1], out=first[1:])
        total = int(sizes.sum())
        ids, text = np.empty(total, dtype=np.int64), np.ones(total, dtype=bool)
        if pre:
            at = (first[:, None] + np.arange(pre)).ravel()
            ids[at], text[at] = np.tile(self.prefix, len(documents)), False
        ids[first + sizes - 1], text[first + sizes - 1] = self.eos_id, False
        ids[text] = np.fromiter(itertools.chain.from_iterable(documents), dtype=np.int64, count=int(lengths.sum()))
        skip, starts = np.zeros(total, dtype=bool), np.zeros(total, dtype=bool)
        skip[(first[:, None] + np.arange(max(1, pre))).ravel()] = True  # the document's first token: no target
        starts[first] = True
        self.carry = tuple(np.concatenate([held, new]) for held, new in zip(self.carry, (ids, skip, starts)))
        return self._rows(full_only=True)

    def flush(self) -> PackedBatch:
        """The last row (shorter than ``seq_len``), if any tokens are left."""
        return self._rows(full_only=False)

    def _rows(self, full_only: bool) -> PackedBatch:
        total = len(self.carry[0])
        stop = total - total % self.seq_len if full_only else total
        offsets = np.append(np.arange(0, stop, self.seq_len, dtype=np.int64), stop) if stop else np.zeros(1, np.int64)
        ids, skip, starts = (values[:stop] for values in self.carry)
        self.carry = tuple(values[stop:] for values in self.carry)
        return PackedBatch(ids, offsets, skip, starts)
