"""The training loss of one micro-batch, with the output head run only where a label needs it.

Masked-entity rows carry labels on the answer and its EOS only (~4 of ~22 tokens on the dated world), yet a
causal LM's forward computes logits, and the loss their log-softmax, at every position: with a 49k-token
vocabulary (SmolLM2) that head and softmax are ~20 % of a training step on CPU. :func:`batch_loss` asks the
model for logits only at the positions whose next token is labelled in some row (``logits_to_keep`` as a
1-D index tensor, transformers' own argument) and computes the same mean cross-entropy over the labelled
tokens as transformers' ``ForCausalLMLoss`` (logits in float32). Dense labels (``clm``), encoder-decoder
models, models without ``logits_to_keep`` and small vocabularies (:data:`SPARSE_MIN_VOCAB`) take the model's
own loss.
"""

from __future__ import annotations

import torch

from evolve_train.training.distributed import sum_over_processes

IGNORE = -100
SPARSE_SHARE = 0.5
"""Positions kept (share of the row) below which the head runs on the labelled positions only."""
SPARSE_MIN_VOCAB = 16384
"""Vocabularies below this keep the model's own loss: their head is a small share of a step (the demo's 2k
vocabulary), and its runs stay bit for bit what they were."""
_ACCEPTS: dict[type, bool] = {}


def _sparse_capable(model) -> bool:
    from evolve_train.models.generation import _accepts

    config = getattr(model, "config", None)
    if getattr(config, "is_encoder_decoder", False) or getattr(config, "vocab_size", 0) < SPARSE_MIN_VOCAB:
        return False
    kind = type(model)
    if kind not in _ACCEPTS:
        _ACCEPTS[kind] = _accepts(model, "logits_to_keep")
    return _ACCEPTS[kind]


def labelled_positions(labels: torch.Tensor) -> torch.Tensor:
    """Positions t (0-based, < width - 1) whose next token is labelled in at least one row."""
    return (labels[:, 1:] != IGNORE).any(0).nonzero().squeeze(1)


def batch_loss(model, unwrapped, batch: dict) -> torch.Tensor:
    """The micro-batch's loss (mean over labelled tokens). ``model``: what to call (accelerate's wrapped
    model); ``unwrapped``: the module whose signature tells whether ``logits_to_keep`` is accepted."""
    labels = batch.get("labels")
    if labels is None or labels.shape[1] < 2 or not _sparse_capable(unwrapped):
        return model(**batch, use_cache=False).loss
    positions = labelled_positions(labels)
    if positions.numel() == 0 or positions.numel() > SPARSE_SHARE * (labels.shape[1] - 1):
        return model(**batch, use_cache=False).loss
    inputs = {key: value for key, value in batch.items() if key != "labels"}
    logits = model(**inputs, use_cache=False, logits_to_keep=positions).logits  # (rows, kept, vocab)
    targets = labels[:, 1:].index_select(1, positions)
    return torch.nn.functional.cross_entropy(
        logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE
    )


def loss_token_count(batch: dict, encoder_decoder: bool) -> int:
    """The tokens a micro-batch's mean loss averages over: labelled next tokens (decoder-only, labels shifted
    by one as in transformers' ``ForCausalLMLoss`` and :func:`batch_loss`) or labelled targets (encoder-decoder)."""
    labels = batch["labels"]
    return int(((labels if encoder_decoder else labels[:, 1:]) != IGNORE).sum())


def global_mean_scale(local: int, accelerator) -> float:
    """The factor that turns this process's mean loss into its share of the global batch's mean loss.

    DDP and FSDP average the gradients of the processes, each the gradient of its own shard's *mean* loss: the
    processes' tokens weigh alike whatever their count, so two processes with batch B differ from one process
    with batch 2B (measured: 1.9 % of the weights after a tiny run). Scaled by ``local * world / global``
    (``global``: every process's ``local``, summed), the average of the processes' losses is the mean over all
    the global batch's tokens, as one process computes it."""
    total = sum_over_processes(accelerator, local)
    return local * accelerator.num_processes / total if total else 1.0
