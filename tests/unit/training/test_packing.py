"""Token-budget batches and packed ``clm`` documents (training/packing.py).

- the batch order is a pure function of (seed, epoch, lengths, budget, processes), every row is trained once
  an epoch, and every process's share of a batch fits the budget;
- the loop plans its optimizer steps from those batches, also over a method's per-epoch row subsets;
- packed rows are ``seq_len`` long but the last, documents keep their own positions and labels, and with
  ``attention_reset`` a document's logits do not depend on the other documents of its row while its loss
  equals its loss alone (fp32, tiny GPT-2 and tiny Llama built from config).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from accelerate import Accelerator
from helpers.methods import PAD, method, one_thread, tiny_gpt2, token_rows, trainer_cfg

from evolve_train.config import TrainerConfig
from evolve_train.errors import ConfigError
from evolve_train.training.examples import LengthGroupedBatches, collate
from evolve_train.training.loop import check_attention_reset, planned_steps_for_method, train_time_step
from evolve_train.training.plan import StepPlan
from evolve_train.training.packing import (
    IGNORE,
    TokenBudgetBatches,
    chunk_documents,
    pack_documents,
    padding_efficiency,
)
from evolve_train.training.telemetry import Throughput, flops_per_token
from helpers.packing import DOCS, EOS, packed_logits, spans


def lengths_of(n: int, seed: int) -> list[int]:
    return np.random.default_rng(seed).integers(3, 60, n).tolist()


@pytest.mark.parametrize("processes", [1, 2, 3])
def test_budget_batches_are_fixed_for_a_seed_cover_every_row_once_and_fit_the_budget(processes):
    lengths = lengths_of(500, 0)
    batches = TokenBudgetBatches(lengths, 256, seed=7, num_processes=processes)
    first = batches.epoch(0)
    assert first == TokenBudgetBatches(list(lengths), 256, seed=7, num_processes=processes).epoch(0)
    assert first != batches.epoch(1) and first != TokenBudgetBatches(
        lengths, 256, seed=8, num_processes=processes
    ).epoch(0)
    assert sorted(i for batch in first for i in batch) == list(range(len(lengths)))
    for batch in first:
        for process in range(processes):
            shard = batch[process::processes]
            assert not shard or len(shard) * max(lengths[i] for i in shard) <= 256
    assert batches.count(0) == len(first)
    assert all(len(batch) >= processes for batch in first)  # no process is left without rows
    assert padding_efficiency(first, lengths) > 0.9  # length-grouped: little padding
    assert len(first) < len(lengths) * 40 / 256 * 1.3 / processes + 5  # and the batches are full


def test_a_row_longer_than_the_budget_gets_a_batch_of_its_own():
    batches = TokenBudgetBatches([10, 300, 10], 100, seed=0).epoch(0)
    assert [1] in batches and sorted(map(len, batches)) == [1, 2]


class EveryOtherRowOnOddEpochs:
    """A stand-in for a method that selects rows per epoch (replay's decay)."""

    def epoch_rows(self, epoch: int, n: int):
        return list(range(0, n, 2)) if epoch % 2 else None


@pytest.mark.parametrize("epochs", [1, 2.5, 3])
def test_planned_steps_count_each_epochs_budget_batches(epochs):
    lengths = lengths_of(300, 1)
    batches = TokenBudgetBatches(lengths, 200, seed=3)
    selecting = EveryOtherRowOnOddEpochs()
    counts = [batches.count(0), len(batches.subset(lengths[::2]).epoch(1)), batches.count(2)]
    whole = int(epochs)
    expected = sum(counts[:whole]) + (epochs - whole) * (counts[whole] if whole < 3 else 0)
    assert planned_steps_for_method(batches, epochs, 2, selecting) == int(np.ceil(expected / 2))
    fixed = LengthGroupedBatches(lengths, 16, seed=3)
    assert planned_steps_for_method(fixed, epochs, 1, method("full")) == int(np.ceil(len(fixed) * epochs))


def test_the_loop_trains_the_planned_budget_batches_and_logs_throughput():
    examples = token_rows(64, 2, 64, seed=3)
    cfg = trainer_cfg(tokens_per_batch=64, seq_len=32, log_every=2)
    rows = []
    with one_thread():
        result = train_time_step(
            StepPlan(
                step=1,
                trainer=cfg,
                examples=examples,
                epochs=2,
                strategies=method("full"),
                collate=lambda r: collate(r, PAD),
                seed=5,
            ),
            tiny_gpt2(),
            Accelerator(cpu=True),
            log_fn=rows.append,
        )
    lengths = [len(r) for r in examples["input_ids"]]
    batches = TokenBudgetBatches(lengths, 64, seed=5)
    assert result.optimizer_steps == batches.count(0) + batches.count(1)
    assert result.tokens == 2 * sum(lengths) and result.tokens_per_s > 0
    assert rows and all(r["tokens_per_s"] > 0 for r in rows)
    assert "mfu" not in rows[0] and "peak_mem_gb" not in rows[0]  # CPU


def test_tokens_per_batch_below_seq_len_is_refused_naming_both_keys():
    with pytest.raises(ConfigError, match="trainer.tokens_per_batch.*trainer.seq_len"):
        TrainerConfig(tokens_per_batch=100, seq_len=128)


def test_packed_rows_are_full_but_the_last_and_keep_each_documents_positions_and_labels():
    docs = [[5, 6, 7], [8, 9], [10, 11, 12, 13, 14, 15], [16]]
    rows = pack_documents(docs, seq_len=6, eos_id=EOS, prefix=[2])
    assert [len(r) for r in rows["input_ids"]] == [6, 6, 6, 2]
    stream = [t for r in rows["input_ids"] for t in r]
    assert stream == [2, 5, 6, 7, EOS, 2, 8, 9, EOS, 2, 10, 11, 12, 13, 14, 15, EOS, 2, 16, EOS]
    # a document continued from the previous row restarts at 0 there
    assert rows["position_ids"] == [[0, 1, 2, 3, 4, 0], [0, 1, 2, 0, 1, 2], [0, 1, 2, 3, 4, 0], [0, 1]]
    labels = [t for r in rows["labels"] for t in r]
    assert labels == [IGNORE, 5, 6, 7, EOS, IGNORE, 8, 9, EOS, IGNORE, 10, 11, 12, 13, 14, 15, EOS, IGNORE, 16, EOS]
    plain = pack_documents([[5, 6], [7]], seq_len=8, eos_id=EOS)  # no BOS: the first text token is no target
    assert plain == {
        "input_ids": [[5, 6, EOS, 7, EOS]],
        "labels": [[IGNORE, 6, EOS, IGNORE, EOS]],
        "position_ids": [[0, 1, 2, 0, 1]],
    }


def test_packing_wastes_less_than_padded_chunks():
    docs = [list(range(3, 3 + n)) for n in lengths_of(200, 4)]
    packed = pack_documents(docs, 64, EOS)["input_ids"]
    chunked = chunk_documents(docs, 64, EOS)["input_ids"]
    assert sum(map(len, packed)) == sum(map(len, chunked))
    assert all(len(r) == 64 for r in packed[:-1])
    width = lambda rows: len(rows) * 64  # noqa: E731  (each row padded to seq_len)
    assert sum(map(len, packed)) / width(packed) > 0.99 > sum(map(len, chunked)) / width(chunked)


def test_without_attention_reset_documents_see_the_earlier_ones():
    model = tiny_gpt2().eval()
    logits, _ = packed_logits(model, DOCS, reset=False)
    other, _ = packed_logits(model, [DOCS[0], [t + 20 for t in DOCS[1]], DOCS[2]], reset=False)
    third = list(spans(DOCS))[2]
    assert not torch.allclose(logits[third], other[third], atol=1e-4)


def test_attention_reset_refuses_an_attention_implementation_that_would_ignore_it():
    model = tiny_gpt2()
    model.config._attn_implementation = "flash_attention_2"
    rows = [{"input_ids": [5, 1], "labels": [IGNORE, 1], "position_ids": [0, 1]}]
    with pytest.raises(ValueError, match="attention_reset.*flash_attention_2"):
        check_attention_reset(TrainerConfig(attention_reset=True, packed_attention="mask"), model, rows)
    assert check_attention_reset(TrainerConfig(attention_reset=True), model, rows)  # auto: padding-free rows
    assert not check_attention_reset(TrainerConfig(attention_reset=False), model, rows)  # plain packing: fine
    model.config._attn_implementation = "sdpa"
    with pytest.raises(ValueError, match="packed_attention=position_ids.*'sdpa'"):
        check_attention_reset(TrainerConfig(attention_reset=True, packed_attention="position_ids"), model, rows)


def test_flops_per_token_follow_the_stated_formula():
    model = tiny_gpt2(n_layer=2)
    embeddings = model.transformer.wte.weight.numel() + model.transformer.wpe.weight.numel()
    n = sum(p.numel() for p in model.parameters()) - embeddings  # the LM head is tied to wte
    assert flops_per_token(model, 32) == 6 * n + 12 * 2 * 32 * 32
    meter = Throughput(torch.device("cpu"), 0, flops_per_token(model, 32), None, 1)
    assert set(meter.window(1000)) == {"tokens_per_s"}  # no peak known on a CPU
    meter = Throughput(torch.device("cpu"), 0, flops_per_token(model, 32), 1e12, 2)  # trainer.peak_flops=1e12
    meter.start_time -= 2.0  # a 2 s window
    row = meter.window(4000)
    assert row["tokens_per_s"] == pytest.approx(2000, rel=0.01)
    assert row["mfu"] == pytest.approx(row["tokens_per_s"] * flops_per_token(model, 32) / 2e12, rel=1e-3)


def test_only_the_last_batch_of_an_epoch_is_short():
    lengths = [10] * 1000  # 10 rows a batch; groups of 5 batches' tokens (group_factor 5), 1000 = 100 batches
    batches = TokenBudgetBatches(lengths, 100, seed=1, group_factor=5).epoch(0)
    assert sorted(map(len, batches)) == [10] * 100
    batches = TokenBudgetBatches(lengths[:995], 100, seed=1, group_factor=5).epoch(0)
    assert sorted(map(len, batches)) == [5] + [10] * 99


@pytest.mark.parametrize("prefix", [(), (1,), (1, 2)])
@pytest.mark.parametrize("seq_len", [1, 4, 7, 64])
def test_the_array_packer_gives_the_rows_of_the_list_packer_and_stores_them_alike(prefix, seq_len):
    import random

    import pyarrow as pa

    from evolve_train.models.packing import ArrayPacker, DocumentPacker
    from evolve_train.training.compact_rows import compact_batch

    rng = random.Random(seq_len * 10 + len(prefix))
    batches = [
        [[rng.randrange(3, 500) for _ in range(rng.choice([0, 1, 2, 5, 9, 30]))] for _ in range(n)]
        for n in (3, 0, 7, 1)
    ]
    lists, arrays = DocumentPacker(seq_len, 9, prefix), ArrayPacker(seq_len, 9, prefix)
    got = [arrays.add(batch) for batch in batches] + [arrays.flush()]
    expected = [lists.add(batch) for batch in batches] + [lists.flush()]
    assert sum(batch.n_rows for batch in got) > 1
    for mine, theirs in zip(got, expected):
        assert dict(mine) == theirs  # input_ids, labels and position_ids, row by row
        if mine.n_rows:
            assert compact_batch(mine, pa.uint16()).to_pydict() == compact_batch(theirs, pa.uint16()).to_pydict()
