"""Tokenized training rows -> length-grouped batches (the rows come from the text format,
``models/text_format.py: TextFormat.encode_step``).

Masked-entity rows are *length-grouped* rather than packed: the examples are short (a fact is ~15 tokens),
so grouping similar lengths wastes almost nothing on padding (``scripts/bench.py`` measures it) while
every example attends only to itself. A batch holds either ``trainer.batch_size`` rows
(:class:`LengthGroupedBatches`) or as many rows as fit ``trainer.tokens_per_batch`` padded tokens
(``training/packing.py: TokenBudgetBatches``). The ``clm`` objective's documents *are* packed into
``seq_len`` rows (``training/packing.py``); with ``trainer.attention_reset`` the collate hands the model
per-document position ids so that no document attends to another.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from evolve_train.models.text_format import IGNORE
from evolve_train.training.compact_rows import decode_row


@dataclass
class LengthGroupedBatches:
    """Shuffled batches of similar-length examples; a fixed seed and epoch give a fixed order.

    ``batch_size`` is the global batch (rows of every process); the loop gives process ``i`` the rows
    ``batch[i::num_processes]``. A group's last batch with fewer rows than processes would leave a process
    without rows (and its collectives unmatched): it joins the batch before it, so every process trains on
    every batch. One process: unchanged."""

    lengths: Sequence[int]
    batch_size: int
    seed: int
    group_factor: int = 50
    num_processes: int = 1
    same_count_every_epoch = True  # every epoch has len(self) batches

    def epoch(self, epoch: int) -> list[list[int]]:
        if 0 < len(self.lengths) < self.num_processes:
            raise ValueError(
                f"{len(self.lengths)} training rows for {self.num_processes} processes: every process needs "
                "at least one row per batch (use fewer processes or more data)"
            )
        rng = random.Random(f"{self.seed}-{epoch}")
        order = list(range(len(self.lengths)))
        rng.shuffle(order)
        group = self.batch_size * self.group_factor
        batches = []
        for start in range(0, len(order), group):
            chunk = sorted(order[start : start + group], key=lambda i: self.lengths[i])
            batches.extend(chunk[i : i + self.batch_size] for i in range(0, len(chunk), self.batch_size))
            if len(batches) > 1 and len(batches[-1]) < self.num_processes:  # a short last batch: joins the one before
                batches[-2].extend(batches.pop())
        rng.shuffle(batches)
        return batches

    def __len__(self) -> int:
        count, rows = 0, len(self.lengths)
        for start in range(0, rows, self.batch_size * self.group_factor):
            count += -(-min(self.batch_size * self.group_factor, rows - start) // self.batch_size)
            if (
                count > 1
                and (min(self.batch_size * self.group_factor, rows - start) % self.batch_size or self.batch_size)
                < self.num_processes
            ):
                count -= 1
        return count

    def count(self, epoch: int) -> int:
        """Batches in ``epoch`` (the same in every epoch)."""
        return len(self)

    def subset(self, lengths: Sequence[int]) -> "LengthGroupedBatches":
        """The same batching over other rows' ``lengths`` (a method's per-epoch selection)."""
        return LengthGroupedBatches(list(lengths), self.batch_size, self.seed, self.group_factor, self.num_processes)


def as_array_rows(examples) -> list[dict[str, np.ndarray]]:
    """The tokenized examples as one dict of int64 arrays per example, converted once per time step: each
    Arrow column becomes one flat array (no Python pass over tokens) split into per-row views at its offsets."""
    if len(examples) == 0:
        return []
    table = examples.with_format("arrow")[:]  # honours a select()/shuffle() index mapping
    split = {}
    for name in table.column_names:
        column = table.column(name).combine_chunks()
        flat = column.flatten().to_numpy(zero_copy_only=False).astype(np.int64)
        split[name] = np.split(flat, column.offsets.to_numpy()[1:-1] - column.offsets[0].as_py())
    return [decode_row(dict(zip(split, row))) for row in zip(*split.values())]


def collate(examples: list[dict], pad_id: int, attention_reset: bool = False) -> dict[str, torch.Tensor]:
    """Right-pad a batch (rows of lists, arrays or tensors); padded label positions are ignored by the loss.

    The labels are padded to the longest labels of the batch: a decoder-only row's labels are as long as its
    ids (so as wide as the ids), an encoder-decoder row's labels are its own (decoder) sequence.

    Rows with ``position_ids`` (packed ``clm`` documents) under ``attention_reset``: the batch carries the
    per-document ``position_ids`` and *no* ``attention_mask`` (the padding, on the right, is a segment of its
    own), so the model's mask builder makes attention block-diagonal (``training/packing.py``; the model
    must be called with ``use_cache=False``, as the loop does). Otherwise the usual padding mask, and
    position ids 0..n-1 (packed documents then attend to the earlier documents of their row).

    Filled in numpy, then handed to torch without a copy: a few dozen small torch ops per batch cost
    ~5x more (0.18 vs 0.04 ms per demo batch, ~1 % of the demo model's step)."""
    lengths = [len(e["input_ids"]) for e in examples]
    label_lengths = [len(e["labels"]) for e in examples]
    width = max(lengths)
    input_ids = np.full((len(examples), width), pad_id, dtype=np.int64)
    labels = np.full((len(examples), max(label_lengths)), IGNORE, dtype=np.int64)
    for row, example in enumerate(examples):
        input_ids[row, : lengths[row]] = example["input_ids"]
        labels[row, : label_lengths[row]] = example["labels"]
    batch = {"input_ids": torch.from_numpy(input_ids), "labels": torch.from_numpy(labels)}
    if attention_reset and "position_ids" in examples[0]:
        batch["position_ids"] = torch.from_numpy(packed_positions(examples, lengths, width))
    else:
        batch["attention_mask"] = torch.from_numpy((np.arange(width) < np.array(lengths)[:, None]).astype(np.int64))
    return batch


def packed_positions(examples: list[dict], lengths: list[int], width: int) -> np.ndarray:
    """Each row's ``position_ids``, its right padding numbered 0, 1, ... as a segment of its own."""
    positions = np.tile(np.arange(width, dtype=np.int64), (len(examples), 1))
    for row, example in enumerate(examples):
        positions[row, : lengths[row]] = example["position_ids"]
        positions[row, lengths[row] :] -= lengths[row]
    return positions


def row_lengths(rows) -> np.ndarray:
    """``len(rows[i]["input_ids"])`` for every row, as int64 (a row store's own ``lengths`` when it has them)."""
    lengths = getattr(rows, "lengths", None)
    if lengths is None:
        lengths = [len(row["input_ids"]) for row in rows]
    return np.asarray(lengths, dtype=np.int64)
