"""Tokenized training rows -> length-grouped batches (the rows come from the model adapter,
``models/adapter.py: ModelAdapter.encode_step``).

Batches are *length-grouped* rather than packed: the examples are short (a fact is ~15 tokens), so
grouping similar lengths wastes almost nothing on padding (``scripts/bench.py`` measures it) while
every example attends only to itself — packing without attention reset would let unrelated facts
leak into each other's context.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import torch

from evolve_train.models.adapter import IGNORE


@dataclass
class LengthGroupedBatches:
    """Shuffled batches of similar-length examples; a fixed seed and epoch give a fixed order."""

    lengths: list[int]
    batch_size: int
    seed: int
    group_factor: int = 50

    def epoch(self, epoch: int) -> list[list[int]]:
        rng = random.Random(f"{self.seed}-{epoch}")
        order = list(range(len(self.lengths)))
        rng.shuffle(order)
        group = self.batch_size * self.group_factor
        batches = []
        for start in range(0, len(order), group):
            chunk = sorted(order[start:start + group], key=lambda i: self.lengths[i])
            batches.extend(chunk[i:i + self.batch_size] for i in range(0, len(chunk), self.batch_size))
        rng.shuffle(batches)
        return batches

    def __len__(self) -> int:
        return -(-len(self.lengths) // self.batch_size)


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
    return [dict(zip(split, row)) for row in zip(*split.values())]


def collate(examples: list[dict], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad a batch (rows of lists, arrays or tensors); padded label positions are ignored by the loss.

    The labels are padded to the longest labels of the batch: a decoder-only row's labels are as long as its
    ids (so as wide as the ids), an encoder-decoder row's labels are its own (decoder) sequence.

    Filled in numpy, then handed to torch without a copy: a few dozen small torch ops per batch cost
    ~5x more (0.18 vs 0.04 ms per demo batch, ~1 % of the demo model's step)."""
    lengths = [len(e["input_ids"]) for e in examples]
    label_lengths = [len(e["labels"]) for e in examples]
    width = max(lengths)
    label_width = max(label_lengths)
    input_ids = np.full((len(examples), width), pad_id, dtype=np.int64)
    labels = np.full((len(examples), label_width), IGNORE, dtype=np.int64)
    for row, example in enumerate(examples):
        input_ids[row, :lengths[row]] = example["input_ids"]
        labels[row, :label_lengths[row]] = example["labels"]
    mask = (np.arange(width) < np.array(lengths)[:, None]).astype(np.int64)
    return {"input_ids": torch.from_numpy(input_ids), "attention_mask": torch.from_numpy(mask),
            "labels": torch.from_numpy(labels)}
