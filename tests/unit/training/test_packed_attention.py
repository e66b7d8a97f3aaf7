"""Packed documents without a materialised mask (``trainer.packed_attention``, models/attention.py).

fp32 on CPU: the padding-free layout (rows laid end to end, position ids and document bounds, the
``sdpa_varlen`` kernel) gives the loss and gradients of the masked layout (``[rows, 1, width, width]``
block-diagonal mask, ``sdpa``) on tiny GPT-2 and Llama models, and no ``[batch, 1, seq, seq]`` tensor is
allocated on its way (every op's outputs watched with a ``TorchDispatchMode``); a short ``clm`` run trains the
same losses either way.
"""

from __future__ import annotations

import json

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from evolve_train.models.attention import SDPA_VARLEN, flat_batch, packed_layout
from evolve_train.models.packing import pack_documents
from evolve_train.run import train
from evolve_train.training.examples import collate
from helpers import tiny_cfg

PAD, EOS = 0, 2
DOCS = [[5, 6, 7, 8, 9], list(range(10, 22)), [22, 23, 24], list(range(25, 40)), [40, 41]]
SEQ_LEN = 12  # documents cut across rows, a short last row (padding in the masked layout)


def tiny_gpt2() -> GPT2LMHeadModel:
    config = GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=64, n_positions=64)
    config.attn_pdrop = config.resid_pdrop = config.embd_pdrop = 0.0
    return GPT2LMHeadModel(config)


def tiny_llama() -> LlamaForCausalLM:
    config = LlamaConfig(
        num_hidden_layers=2,
        hidden_size=32,
        intermediate_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=64,
        max_position_embeddings=64,
        pad_token_id=PAD,
    )
    return LlamaForCausalLM(config)


MODELS = {"gpt2": tiny_gpt2, "llama": tiny_llama}


class SquareMasks(TorchDispatchMode):
    """Records the shape of every op output shaped ``[batch, 1, n, n]`` (a materialised attention mask)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, tuple[int, ...]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(tensor, torch.Tensor) and tensor.dim() == 4 and tensor.shape[1] == 1:
                if tensor.shape[2] == tensor.shape[3] > 1:
                    self.seen.append((str(func), tuple(tensor.shape)))
        return out


def packed_rows() -> list[dict]:
    rows = pack_documents(DOCS, seq_len=SEQ_LEN, eos_id=EOS)
    return [{name: values[i] for name, values in rows.items()} for i in range(len(rows["input_ids"]))]


def loss_and_grads(model, implementation: str, batch: dict) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model.config._attn_implementation = implementation
    model.zero_grad()
    with SquareMasks() as watch:
        loss = model(**batch, use_cache=False).loss
        loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()], watch.seen


@pytest.mark.parametrize("name", MODELS)
def test_the_padding_free_layout_gives_the_masked_loss_without_a_square_mask(name):
    torch.manual_seed(0)
    model = MODELS[name]().train()
    rows = packed_rows()
    masked, masked_grads, masked_seen = loss_and_grads(model, "sdpa", collate(rows, PAD, attention_reset=True))
    flat, flat_grads, flat_seen = loss_and_grads(model, SDPA_VARLEN, flat_batch(rows))
    assert masked_seen, "the masked layout builds a [rows, 1, width, width] mask (the watch sees it)"
    assert flat_seen == []
    assert abs(flat.item() - masked.item()) <= 1e-5
    for a, b in zip(flat_grads, masked_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_the_flat_batch_ignores_row_starts_and_bounds_every_document():
    rows = packed_rows()
    batch = flat_batch(rows)
    widths = [len(r["input_ids"]) for r in rows]
    assert batch["input_ids"].shape == (1, sum(widths)) and "cu_seq_lens_q" in batch
    starts = torch.tensor([0, *torch.tensor(widths).cumsum(0)[:-1].tolist()])
    assert (batch["labels"][0, starts] == -100).all()
    bounds = batch["cu_seq_lens_q"].tolist()
    assert bounds[0] == 0 and bounds[-1] == sum(widths) and set(starts.tolist()) <= set(bounds)
    assert batch["max_length_q"] == max(b - a for a, b in zip(bounds, bounds[1:]))
    labelled = sum(1 for r in rows for label in r["labels"][1:] if label != -100)
    assert int((batch["labels"] != -100).sum()) == labelled  # the masked layout's targets, no more


def test_auto_takes_the_padding_free_layout_only_where_the_kernel_is_varlen():
    assert packed_layout("auto", "flash_attention_2") == "position_ids"
    assert packed_layout("auto", SDPA_VARLEN) == "position_ids"
    assert packed_layout("auto", "sdpa") == "mask" and packed_layout("auto", "eager") == "mask"
    assert packed_layout("mask", SDPA_VARLEN) == "mask"
    with pytest.raises(ValueError, match="packed_attention"):
        packed_layout("flat", "sdpa")


def test_a_clm_run_trains_the_same_losses_in_either_layout(tmp_path):
    losses = {}
    for implementation in ("sdpa", SDPA_VARLEN):
        run_dir = tmp_path / implementation
        train(
            tiny_cfg(
                run_dir,
                "data.objective=clm",
                "data.world.n_steps=1",
                "eval.evaluators=[splits]",
                "trainer.seq_len=64",
                "trainer.log_every=1",
                "model.dropout=0.0",
                f"model.attn_implementation={implementation}",
            )
        )
        rows = [json.loads(line) for line in (run_dir / "train_log.jsonl").read_text().splitlines()]
        losses[implementation] = [row["loss"] for row in rows]
    assert len(losses["sdpa"]) > 1
    assert losses[SDPA_VARLEN] == pytest.approx(losses["sdpa"], abs=1e-5)
