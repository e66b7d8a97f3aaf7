"""Turn a time step's corpus into tokenized training examples and length-grouped batches.

Causal format of a masked-entity pair: the text left of the mask, then `` <output><eos>``, with the
loss on the output and the EOS only (salient-span loss; a causal model predicts the span from its
left context — use ``model=t5_small`` to condition on both sides). Pairs with no text left of the
mask have nothing to condition on and are dropped (counted). The ``clm`` objective trains on every
token of the plain-text documents, cut into ``seq_len`` pieces.

Batches are *length-grouped* rather than packed: the examples are short (a fact is ~15 tokens), so
grouping similar lengths wastes almost nothing on padding (``scripts/bench.py`` measures it) while
every example attends only to itself — packing without attention reset would let unrelated facts
leak into each other's context.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass

import numpy as np
import torch
from datasets import Dataset

from evolve_train.data.timeline import TimeStep

log = logging.getLogger(__name__)
MASK_TOKENS = ("<mask>", "<extra_id_0>", "[MASK]")
IGNORE = -100


def split_masked(text: str) -> tuple[str, str] | None:
    for mask in MASK_TOKENS:
        if mask in text:
            left, right = text.split(mask, 1)
            return left, right
    return None


def causal_pair_text(pair: dict) -> tuple[str, str] | None:
    """(context, target) of a masked-entity pair for a causal model, or None if it has no left context."""
    parts = split_masked(pair["input"])
    left = (parts[0] if parts else pair["input"]).rstrip()
    if not left:
        return None
    return left, " " + pair["output"].strip()


T5_SENTINEL = "<extra_id_0>"


def seq2seq_source(text: str) -> str:
    """Encoder input of a seq2seq (T5) model: the mask token becomes the sentinel ``<extra_id_0>``; a text
    without one (a QA prompt, a cloze) gets the sentinel appended, so training pairs and eval prompts
    share one format."""
    for mask in MASK_TOKENS:
        if mask in text:
            return text.replace(mask, T5_SENTINEL, 1)
    return f"{text.rstrip()} {T5_SENTINEL}"


def _with_eos(ids: list[int], eos: int, limit: int) -> list[int]:
    """``ids`` ending in exactly one EOS (a pretrained T5 tokenizer appends it, a local BPE does not)."""
    if ids and ids[-1] == eos:
        return ids[:limit]
    return ids[:limit - 1] + [eos]


def tokenize_step(step: TimeStep, objective: str, tokenizer, seq_len: int, seq2seq: bool = False) -> Dataset:
    """Tokenize a step's corpus once (a ``datasets.Dataset`` of ``input_ids``/``labels``)."""
    eos = tokenizer.eos_token_id
    if seq2seq:
        if not step.pairs and step.texts:
            raise ValueError(f"step {step.name}: a seq2seq model trains on masked-entity pairs and this step has "
                             "only text documents (make pairs with `evolve-data mask --format t5`)")
        rows = [{"source": seq2seq_source(p["input"]), "target": p["output"].strip()} for p in step.pairs]
        dataset = Dataset.from_list(rows)

        def encode(batch):
            sources = tokenizer(batch["source"], truncation=True, max_length=seq_len)["input_ids"]
            targets = tokenizer(batch["target"], truncation=True, max_length=seq_len)["input_ids"]
            return {"input_ids": sources, "labels": [_with_eos(t, eos, seq_len) for t in targets]}

        return dataset.map(encode, batched=True, remove_columns=dataset.column_names)

    if objective == "masked_entity":
        formatted = [causal_pair_text(p) for p in step.pairs]
        dropped = sum(f is None for f in formatted)
        if dropped:
            log.warning("step %d: dropped %d masked pairs with no text left of the mask", step.index, dropped)
        rows = [{"context": c, "target": t} for c, t in (f for f in formatted if f is not None)]
        dataset = Dataset.from_list(rows)

        def encode(batch):
            contexts = tokenizer(batch["context"])["input_ids"]
            targets = tokenizer(batch["target"])["input_ids"]
            ids, labels = [], []
            for context, target in zip(contexts, targets):
                target = target + [eos]
                context = context[-(seq_len - len(target)):]
                ids.append(context + target)
                labels.append([IGNORE] * len(context) + target)
            return {"input_ids": ids, "labels": labels}

        return dataset.map(encode, batched=True, remove_columns=dataset.column_names)

    dataset = Dataset.from_list([{"text": t["text"]} for t in step.texts])

    def chunk(batch):
        ids = []
        for row in tokenizer(batch["text"])["input_ids"]:
            row = row + [eos]
            ids.extend(row[i:i + seq_len] for i in range(0, len(row), seq_len))
        return {"input_ids": ids, "labels": ids}

    return dataset.map(chunk, batched=True, remove_columns=dataset.column_names)


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


def collate(examples: list[dict], pad_id: int, seq2seq: bool = False) -> dict[str, torch.Tensor]:
    """Right-pad a batch (rows of lists, arrays or tensors); padded label positions are ignored by the loss.

    Filled in numpy, then handed to torch without a copy: a few dozen small torch ops per batch cost
    ~5x more (0.18 vs 0.04 ms per demo batch, ~1 % of the demo model's step)."""
    lengths = [len(e["input_ids"]) for e in examples]
    label_lengths = [len(e["labels"]) for e in examples]
    width = max(lengths)
    # a causal row's labels are as long as its ids; a seq2seq row's labels are its own (decoder) sequence
    label_width = max(label_lengths) if seq2seq else width
    input_ids = np.full((len(examples), width), pad_id, dtype=np.int64)
    labels = np.full((len(examples), label_width), IGNORE, dtype=np.int64)
    for row, example in enumerate(examples):
        input_ids[row, :lengths[row]] = example["input_ids"]
        labels[row, :label_lengths[row]] = example["labels"]
    mask = (np.arange(width) < np.array(lengths)[:, None]).astype(np.int64)
    return {"input_ids": torch.from_numpy(input_ids), "attention_mask": torch.from_numpy(mask),
            "labels": torch.from_numpy(labels)}
