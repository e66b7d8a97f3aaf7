"""The chunked head and loss (``models/head.py``, ``training/loss.py``): loss and gradients equal the unchunked
computation, for training, LwF's teacher and held-out scoring; the model's head never sees all positions."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

from evolve_train.methods.lwf import chunked_distillation, distillation
from evolve_train.models import head as head_module
from evolve_train.models.head import IGNORE, SPARSE_MIN_VOCAB, HeadInputs, chunk_capable
from evolve_train.models.scoring import batch_token_nll
from evolve_train.training import loss as loss_module
from evolve_train.training.loss import batch_loss, chunked_cross_entropy


def llama(vocab: int = SPARSE_MIN_VOCAB, seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(config)


def dense_batch(vocab: int, rows: int = 3, width: int = 24) -> dict:
    torch.manual_seed(1)
    ids = torch.randint(3, vocab, (rows, width))
    labels = ids.clone()
    labels[0, :5] = IGNORE  # a prompt without loss
    labels[1, 20:] = IGNORE  # padding
    mask = (labels != IGNORE).long()
    mask[0, :5] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def test_chunked_cross_entropy_and_gradients_equal_the_unchunked_ones():
    torch.manual_seed(0)
    hidden = torch.randn(3, 20, 16, requires_grad=True)
    head = torch.nn.Linear(16, 500, bias=True)
    labels = torch.randint(0, 500, (3, 20))
    labels[0, :7] = IGNORE
    chunked = chunked_cross_entropy(HeadInputs(hidden, head, labels), chunk=7)  # 50 rows: 8 chunks, the last short
    chunked.backward()
    got = [hidden.grad.clone(), head.weight.grad.clone(), head.bias.grad.clone()]
    hidden.grad, head.weight.grad, head.bias.grad = None, None, None
    logits = head(hidden)[:, :-1].float()
    dense = F.cross_entropy(logits.reshape(-1, 500), labels[:, 1:].reshape(-1), ignore_index=IGNORE)
    dense.backward()
    assert float(chunked.detach()) == pytest.approx(float(dense.detach()), rel=1e-5)
    for mine, theirs in zip(got, [hidden.grad, head.weight.grad, head.bias.grad]):
        assert torch.allclose(mine, theirs, rtol=1e-5, atol=1e-8)


def test_the_training_loss_equals_the_models_own_and_its_head_sees_one_position(monkeypatch):
    monkeypatch.setattr(head_module, "LOSS_CHUNK", 16)  # 66 loss tokens: 5 chunks
    model = llama()
    assert chunk_capable(model)
    batch = dense_batch(SPARSE_MIN_VOCAB)
    widths = []
    handle = model.lm_head.register_forward_hook(lambda m, args, out: widths.append(args[0].shape[1]))
    chunked = batch_loss(model, model, batch)
    handle.remove()
    assert widths == [1]  # the model's own head ran on one position; the loss built the rest chunk by chunk
    chunked.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    dense = model(**batch, use_cache=False).loss
    dense.backward()
    assert float(chunked.detach()) == pytest.approx(float(dense.detach()), rel=1e-5)
    for name, p in model.named_parameters():
        assert torch.allclose(grads[name], p.grad, rtol=1e-4, atol=1e-7), name


def test_small_vocabularies_and_soft_capped_heads_keep_the_models_own_loss():
    assert not chunk_capable(llama(vocab=512))
    capped = llama()
    capped.config.final_logit_softcapping = 30.0
    assert not chunk_capable(capped)


def test_heldout_scoring_equals_the_unchunked_token_losses(monkeypatch):
    model = llama().eval()
    batch = dense_batch(SPARSE_MIN_VOCAB)
    monkeypatch.setattr(head_module, "LOSS_CHUNK", 10)
    sums, counts = batch_token_nll(model, dict(batch), shift=True)
    monkeypatch.setattr(loss_module, "chunk_capable", lambda m: False)
    from evolve_train.models import scoring

    monkeypatch.setattr(scoring, "chunk_capable", lambda m: False)
    dense_sums, dense_counts = batch_token_nll(model, dict(batch), shift=True)
    assert counts == dense_counts and sum(counts) == int((batch["labels"][:, 1:] != IGNORE).sum())
    assert sums == pytest.approx(dense_sums, rel=1e-5)


@pytest.mark.parametrize("targets", ["kl", "argmax"])
def test_chunked_distillation_equals_the_one_on_full_logits(targets):
    student, teacher = llama(seed=0), llama(seed=2).eval()
    batch = dense_batch(SPARSE_MIN_VOCAB)
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    with torch.no_grad():
        teacher_out = loss_module.head_inputs(teacher, teacher, batch)
    s_inputs = loss_module.head_inputs(student, student, batch)
    chunked = chunked_distillation(s_inputs, teacher_out, temperature=2.0, targets=targets, chunk=9)
    chunked.backward()
    grads = {name: p.grad.clone() for name, p in student.named_parameters()}
    student.zero_grad()
    with torch.no_grad():
        teacher_logits = teacher(**inputs).logits
    full = distillation(student(**inputs).logits, teacher_logits, batch["labels"], 2.0, targets)
    full.backward()
    assert float(chunked.detach()) == pytest.approx(float(full.detach()), rel=1e-5)
    for name, p in student.named_parameters():
        assert torch.allclose(grads[name], p.grad, rtol=1e-4, atol=1e-7), name


def test_liger_is_used_only_on_cuda(monkeypatch):
    calls = []
    monkeypatch.setattr(loss_module, "_liger", lambda: lambda *a, **k: calls.append(a))
    torch.manual_seed(0)
    hidden = torch.randn(1, 6, 8)
    labels = torch.randint(0, 40, (1, 6))
    value = chunked_cross_entropy(HeadInputs(hidden, torch.nn.Linear(8, 40), labels))
    assert calls == [] and torch.isfinite(value)  # CPU tensors: the chunked loss, not the fused kernel


def test_the_head_chunks_run_in_the_forwards_autocast():
    model = llama()
    batch = dense_batch(SPARSE_MIN_VOCAB)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        inputs = loss_module.head_inputs(model, model, batch)
        chunked = loss_module.chunked_cross_entropy(inputs, chunk=16)
        dense = model(**batch, use_cache=False).loss
    assert inputs.autocast == torch.bfloat16
    assert loss_module.head_inputs(model, model, batch).autocast is None
    assert float(chunked.detach()) == pytest.approx(float(dense.detach()), rel=1e-3)


def test_the_shared_prefix_prefill_runs_the_head_on_each_prompts_last_position_only():
    """Option scoring's prefill: the head's own matmul sees one position per prompt (not every prompt position's
    128k-way logits), and the scores equal the full-sequence scoring of the same options."""
    from evolve_train.models.scoring import causal_option_scores

    model = llama().eval()
    torch.manual_seed(2)
    prompts = {
        "a": torch.randint(3, SPARSE_MIN_VOCAB, (9,)).tolist(),
        "b": torch.randint(3, SPARSE_MIN_VOCAB, (5,)).tolist(),
    }
    requests = [("a", "x"), ("a", "y"), ("b", "x"), ("b", "z")]
    targets = [torch.randint(3, SPARSE_MIN_VOCAB, (n,)).tolist() for n in (1, 3, 2, 4)]
    shapes = []
    handle = model.lm_head.register_forward_hook(lambda m, args, out: shapes.append(tuple(args[0].shape)))
    with torch.no_grad():
        shared = causal_option_scores(model, requests, prompts, targets, pad=0, share_prefix=True)
    handle.remove()
    assert shapes[0][-2:] == (1, 32) and shapes[1] == (2, 32)  # the model's logits_to_keep=1, then ours: 2 prompts
    with torch.no_grad():
        full = causal_option_scores(model, requests, prompts, targets, pad=0, share_prefix=False)
    assert shared == pytest.approx(full, rel=1e-5)
