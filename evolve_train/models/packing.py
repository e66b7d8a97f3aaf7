"""Packed documents: how the ``clm`` objective lays documents' token ids into training rows.

* :func:`pack_documents` (and :class:`DocumentPacker`, the same batch by batch): documents (each
  ``prefix + tokens + EOS``) concatenated and cut into rows of ``seq_len`` tokens; only the very last row is
  shorter. Each row carries ``position_ids`` that restart at 0 at every document start (and at the row start,
  where a document cut by the previous row continues): the collate passes them to the model when
  ``trainer.attention_reset=true``, and Hugging Face's mask builder
  (``transformers.masking_utils.find_packed_sequence_indices``) then makes attention block-diagonal. Labels are
  those of each document alone: a document's first token (its BOS, or without one its first text token) is
  never a target, so no loss term predicts one document from another.
* :func:`chunk_documents`: the former layout (each document cut on its own, the last piece padded in its
  batch), kept for ``scripts/bench.py``'s packing-efficiency comparison.

The text format (``models/text_format.py``) packs with it; ``training/packing.py`` re-exports it next to the
token-budget batches.
"""

from __future__ import annotations

from typing import Iterable, Sequence

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
