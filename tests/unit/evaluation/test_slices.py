"""Held-out time slices, the ``slices`` evaluator and the TiC-LM aggregates (docs/metrics.md#9-time-sliced-perplexity)."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import torch

from evolve_train.data.corpus import ArrowRecords
from evolve_train.data.slices import heldout_indices, split_records
from evolve_train.data.timeline import build_timeline
from evolve_train.evaluation.metrics.timesliced import (
    aggregate_intervals,
    aggregates,
    backward,
    forward,
    in_dist,
    regret,
    row_aggregates,
    with_perplexity,
)
from evolve_train.training.examples import as_array_rows, collate
from helpers import tiny_cfg


P3 = {0: {0: 1.0, 1: 2.0, 2: 3.0}, 1: {0: 1.5, 1: 0.5, 2: 2.5}, 2: {0: 2.0, 1: 1.0, 2: 0.25}}


def test_aggregates_equal_a_hand_computation_on_3x3():
    # lower triangle: (1,0)=1.5, (2,0)=2.0, (2,1)=1.0 ; diagonal 1.0, 0.5, 0.25 ; upper: (0,1)=2, (0,2)=3, (1,2)=2.5
    assert backward(P3) == pytest.approx((1.5 + 2.0 + 1.0) / 3)
    assert in_dist(P3) == pytest.approx((1.0 + 0.5 + 0.25) / 3)
    assert forward(P3) == pytest.approx((2.0 + 3.0 + 2.5) / 3)
    assert row_aggregates(P3, 0) == {"backward": None, "in_dist": 1.0, "forward": pytest.approx(2.5)}
    assert row_aggregates(P3, 1) == {"backward": 1.5, "in_dist": 0.5, "forward": 2.5}
    assert row_aggregates(P3, 2) == {"backward": pytest.approx(1.5), "in_dist": 0.25, "forward": None}
    whole = aggregates({str(i): {str(j): v for j, v in row.items()} for i, row in P3.items()})  # JSON keys
    assert whole["backward"] == pytest.approx(1.5) and whole["rows"]["2"]["backward"] == pytest.approx(1.5)
    assert with_perplexity({"in_dist": 0.5})["in_dist_perplexity"] == pytest.approx(math.exp(0.5))


def test_missing_cells_are_skipped_and_regret_uses_shared_cells():
    M = {0: {0: 1.0, 1: None}, 1: {0: 2.0, 1: 1.0}}
    assert forward(M) is None and backward(M) == 2.0
    oracle = {0: {0: 0.5, 1: 3.0}, 1: {0: 1.0}}  # no (1, 1) cell: the run's (1, 1) is left out too
    out = regret(M, oracle)
    assert out["regret_backward"] == pytest.approx(1.0)
    assert out["regret_in_dist"] == pytest.approx(0.5)  # only (0, 0): 1.0 - 0.5
    assert out["regret_forward"] is None


def test_bootstrap_intervals_hold_the_point_estimate():
    rng = np.random.default_rng(1)
    items = {i: {j: (rng.uniform(1, 5, 40) * (1 + abs(i - j)), np.full(40, 4.0)) for j in range(3)} for i in range(3)}
    P = {i: {j: float(s.sum() / t.sum()) for j, (s, t) in row.items()} for i, row in items.items()}
    ci = aggregate_intervals(items, B=200, seed=0)
    for name, fn in (("backward", backward), ("in_dist", in_dist), ("forward", forward)):
        low, high = ci[name]
        assert low < fn(P) < high


def test_heldout_selection_is_seeded_and_sized():
    first, again = heldout_indices(200, 0.05, 0, 1), heldout_indices(200, 0.05, 0, 1)
    assert list(first) == list(again) and len(first) == 10 and len(set(first.tolist())) == 10
    assert len(heldout_indices(200, 0.05, 0, 2)) == 10 and list(heldout_indices(200, 0.05, 0, 2)) != list(first)
    assert len(heldout_indices(1, 0.5, 0, 0)) == 0 and len(heldout_indices(10, 0.0, 0, 0)) == 0
    records = [{"input": f"x {k} <mask>", "output": str(k)} for k in range(40)]
    kept, held = split_records(records, 0.1, 0, 0)
    assert (
        len(held) == 4
        and len(kept) == 36
        and {r["output"] for r in kept} | {r["output"] for r in held} == {str(k) for k in range(40)}
    )


def test_arrow_corpora_stay_arrow_with_their_own_fingerprint():
    from datasets import Dataset

    records = ArrowRecords(Dataset.from_list([{"input": f"a {k} <mask>", "output": str(k)} for k in range(30)]), "f0")
    kept, held = split_records(records, 0.2, 0, 3)
    assert isinstance(kept, ArrowRecords) and kept.fingerprint not in ("f0", held.fingerprint)
    assert len(kept) == 24 and len(held) == 6
    assert sorted(r["output"] for r in list(kept) + list(held)) == sorted(str(k) for k in range(30))


@pytest.mark.parametrize("overrides", [[], ["data.objective=clm"], ["data.keep_history=true"]])
def test_no_heldout_example_is_ever_trained_on(tmp_path, overrides):
    """Every example of every step's training corpus (as the run tokenizes it, replay mixed in) against every
    slice: none of the held-out examples' rows occurs among the rows trained at any step."""
    from evolve_train.run import ContinualRun

    cfg = tiny_cfg(tmp_path, "method=replay", *overrides)
    run = ContinualRun(cfg).setup()
    timeline = run.timeline
    objective = str(run.cfg.data.objective)
    field = "texts" if objective == "clm" else "pairs"
    raw = build_timeline(dataclasses.replace(run.cfg.data, heldout_share=0.0, keep_history=False))
    for step, whole in zip(timeline.steps, raw.steps):
        assert len(step.heldout) == round(0.05 * len(getattr(whole, field)))
        assert len(step.heldout) >= 1
    held_records = [json.dumps(r, sort_keys=True) for step in timeline.steps for r in step.heldout]
    trained_records = {json.dumps(r, sort_keys=True) for step in timeline.steps for r in getattr(step, field)}
    assert not set(held_records) & trained_records
    # the tokenized rows the loop trains on (the method's mixing included)
    held_rows = set()
    for step in timeline.steps:
        from evolve_train.data.schema import TimeStep

        corpus = TimeStep(index=step.index, name="slice", **{field: list(step.heldout)})
        for row in as_array_rows(run.text_format.encode_step(corpus, objective, run.cfg.trainer.seq_len)):
            held_rows.add(tuple(row["input_ids"].tolist()))
    for k in range(len(timeline.steps)):
        examples = run.examples(run.plan(k))
        trained = {tuple(np.asarray(examples[n]["input_ids"]).tolist()) for n in range(len(examples))}
        assert trained and not held_rows & trained
    run.close(True)


def test_token_nll_is_the_models_own_loss(tmp_path):
    from evolve_train.run import ContinualRun

    run = ContinualRun(tiny_cfg(tmp_path)).setup()
    rows = as_array_rows(run.text_format.encode_step(run.timeline.steps[0], "masked_entity", 128))[:8]
    batch = collate(rows, run.text_format.pad_id)
    sums, counts = run.text_format.token_nll(run.model, batch)
    with torch.no_grad():
        loss = float(run.model(**batch, use_cache=False).loss)
    assert sum(counts) == sum(int((r["labels"] != -100).sum()) for r in rows)
    assert sum(sums) / sum(counts) == pytest.approx(loss, rel=1e-5)
    run.close(True)


def test_token_nll_of_a_seq2seq_model_is_its_own_loss():
    from evolve_train.config import ModelConfig
    from evolve_train.data.schema import TimeStep
    from evolve_train.models.build import build_text_format, build_model, train_tokenizer

    pairs = [
        {"input": "The director of Acme is <mask>.", "output": "Ann Lee"},
        {"input": "Zeta was founded in <mask>.", "output": "1990"},
    ]
    tokenizer = train_tokenizer([p["input"] + " " + p["output"] for p in pairs] * 20, 300, "t5")
    torch.manual_seed(0)
    cfg = ModelConfig(arch="t5", n_layer=1, n_embd=32, n_head=2)
    model, text_format = build_model(cfg, tokenizer), build_text_format(cfg, tokenizer)
    rows = as_array_rows(text_format.encode_step(TimeStep(0, "0", pairs=pairs), "masked_entity", 64))
    batch = collate(rows, text_format.pad_id)
    sums, counts = text_format.token_nll(model, batch)
    with torch.no_grad():
        loss = float(model(**batch).loss)
    assert counts == [len(r["labels"]) for r in rows]
    assert sum(sums) / sum(counts) == pytest.approx(loss, rel=1e-5)


@pytest.mark.parametrize("count", [2, 3])
def test_processes_score_whole_batches_of_the_slices_bit_for_bit_as_one(count):
    import threading

    from helpers.shards import Locked, ThreadShards, World, context
    from helpers.models import tiny_model

    from evolve_train.data.schema import TimeStep
    from evolve_train.evaluation.context import Shards
    from evolve_train.evaluation.evaluators.slices import score_rows
    from evolve_train.models.build import train_tokenizer
    from evolve_train.models.text_format import CausalLMFormat

    texts = [{"text": " ".join(["Acme hired Ann Lee in 2019."] * (1 + k % 5))} for k in range(23)]
    tokenizer = train_tokenizer([t["text"] for t in texts], vocab_size=300)
    text_format, model = CausalLMFormat(tokenizer), tiny_model("gpt2", tokenizer)
    rows = as_array_rows(text_format.encode_step(TimeStep(0, "0", texts=texts), "clm", 24))
    reference = score_rows(context(text_format, model, Shards()), rows)
    world = World(count)
    contexts = [
        context(Locked(text_format, world.model_lock), model, ThreadShards(i, count, world=world)) for i in range(count)
    ]
    results = [None] * count

    def process(index: int) -> None:
        results[index] = score_rows(contexts[index], rows)

    threads = [threading.Thread(target=process, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(result == reference for result in results)  # exact
    loads = contexts[0].shards.done_per_process()
    assert sum(loads) == len(rows) and min(loads) > 0
