"""Token-budget batches and packed ``clm`` documents (training/packing.py).

- the batch order is a pure function of (seed, epoch, lengths, budget, processes), every row is trained once
  an epoch, and every process's share of a batch fits the budget;
- the loop plans its optimizer steps from those batches, also over a method's per-epoch row subsets;
- packed rows are ``seq_len`` long but the last, documents keep their own positions and labels, and with
  ``attention_reset`` a document's logits do not depend on the other documents of its row while its loss
  equals its loss alone (fp32, tiny GPT-2 and tiny Llama built from config).
"""

from __future__ import annotations

import pytest
import torch
from helpers.methods import PAD, tiny_gpt2
from transformers import LlamaConfig, LlamaForCausalLM

from evolve_train.training.packing import (
    IGNORE,
)
from helpers.packing import DOCS, EOS, packed_logits, spans


def tiny_llama() -> LlamaForCausalLM:
    torch.manual_seed(0)
    return LlamaForCausalLM(
        LlamaConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            vocab_size=64,
            max_position_embeddings=64,
            pad_token_id=PAD,
            attn_implementation="sdpa",
        )
    )


def gpt2_eager():
    model = tiny_gpt2()
    model.config._attn_implementation = "eager"
    return model


MODELS = {"gpt2-sdpa": tiny_gpt2, "gpt2-eager": gpt2_eager, "llama-sdpa": tiny_llama}


@pytest.mark.parametrize("name", MODELS)
def test_with_attention_reset_a_document_is_blind_to_the_others_and_its_loss_is_its_own(name):
    model = MODELS[name]().eval()
    logits, rows = packed_logits(model, DOCS)
    changed = [DOCS[0], [t + 20 for t in DOCS[1]], DOCS[2]]
    other, _ = packed_logits(model, changed)
    first, second, third = spans(DOCS)
    assert torch.allclose(logits[first], other[first], atol=1e-6)  # causal: before the change
    assert torch.allclose(logits[third], other[third], atol=1e-6)  # after it, yet unchanged
    labels = torch.tensor(rows["labels"][0])
    for doc, span in zip(DOCS, spans(DOCS)):
        ids = torch.tensor([doc + [EOS]])
        with torch.no_grad():
            alone = model(input_ids=ids, labels=ids).loss
        packed = torch.nn.functional.cross_entropy(logits[span][:-1], labels[span][1:], ignore_index=IGNORE)
        assert packed.item() == pytest.approx(alone.item(), abs=1e-4)


def test_a_crash_mid_epoch_under_a_token_budget_resumes_to_the_same_run_bitwise(tmp_path, monkeypatch, caplog):
    """The fixed-row resume check of tests/unit/training/test_reliability.py and tests/e2e/test_reliability.py, with ``trainer.tokens_per_batch``."""
    import json
    import logging

    from helpers import tiny_cfg
    from helpers.faults import FAST, crash_at, metrics, same_weights, train_log

    from evolve_train.run import train
    from evolve_train.training import faults
    from evolve_train.training.train_state import MANIFEST, list_states

    budget = [
        *FAST,
        "data.world.n_steps=1",  # one time step: step 0 only
        "trainer.tokens_per_batch=256",
        "trainer.save_every_n_steps=3",
    ]
    monkeypatch.setattr(faults, "_arrivals", {})
    train(tiny_cfg(tmp_path / "reference", *budget))
    crash_at(monkeypatch, "optimizer_step", 26)  # step 0 (19 batches an epoch): in its second epoch
    with pytest.raises(Exception, match="optimizer_step:26"):
        train(tiny_cfg(tmp_path / "run", *budget))
    ((_, _, state),) = [s for s in list_states(tmp_path / "run") if s[1] == 24]
    progress = json.loads((state / MANIFEST).read_text())["progress"]
    assert progress["epoch"] >= 1 and progress["next_batch"] > 0  # mid-epoch, past the first one
    monkeypatch.undo()
    monkeypatch.setattr(faults, "_arrivals", {})
    caplog.set_level(logging.INFO)
    train(tiny_cfg(tmp_path / "run", *budget))
    assert "resuming time step 0 from the training state" in caplog.text
    reference, run = tmp_path / "reference", tmp_path / "run"
    assert metrics(run) == metrics(reference) and train_log(run) == train_log(reference)
    assert any(r["tokens_per_s"] > 0 for r in (json.loads(x) for x in (run / "train_log.jsonl").open()))
    steps = sorted(p.name for p in (reference / "steps").iterdir())
    assert steps and steps == sorted(p.name for p in (run / "steps").iterdir())
    for step in steps:
        assert same_weights(reference / "steps" / step, run / "steps" / step), step


def test_a_clm_run_trains_on_packed_documents_with_attention_reset_and_logs_throughput(tmp_path):
    import json

    from helpers import tiny_cfg

    from evolve_train.run import train

    train(
        tiny_cfg(
            tmp_path,
            "data.objective=clm",
            "data.world.n_steps=1",
            "eval.evaluators=[splits]",
            "trainer.seq_len=64",
            "trainer.num_threads=1",
        )
    )
    log = [json.loads(line) for line in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    assert log and all(r["tokens_per_s"] > 0 and r["loss"] == r["loss"] for r in log)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert any(r.get("train_tokens_per_s", 0) > 0 for r in rows if r["checkpoint"] == 0)
