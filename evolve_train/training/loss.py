"""The training loss of one micro-batch, without the full ``[tokens x vocab]`` logits.

A causal LM's own loss computes logits at every position and upcasts them to float32: at 16,384 tokens and a
128k vocabulary that is ~8 GB per copy, and the log-softmax and its gradient add more. For vocabularies of
:data:`SPARSE_MIN_VOCAB` and up, :func:`batch_loss` runs the model for its hidden states (the model's own
forward, through accelerate's wrapper, with ``logits_to_keep=1``), keeps the positions whose next token is
labelled, and computes the cross-entropy :data:`LOSS_CHUNK` positions at a time: each chunk's logits are built
from the output head, reduced to a sum of token losses and dropped; the backward recomputes them
(``torch.utils.checkpoint``). The result is the mean cross-entropy over the labelled tokens that transformers'
``ForCausalLMLoss`` computes (logits in float32), and its gradient; the peak holds one chunk's logits.
Where Liger Kernel is installed and the hidden states are on CUDA, its fused linear cross-entropy does the same
in one kernel (``pip install evolve-train[liger]``).

Encoder-decoder models, models whose head is not a plain linear map of the last hidden state (logit soft-capping
or scaling) and small vocabularies take the model's own loss: their head is a small share of a step (the demo's
2k vocabulary), and their runs stay bit for bit what they were.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch

from evolve_train.models.head import (  # noqa: F401  (re-exported: the loss's parts)
    IGNORE,
    LOSS_CHUNK,
    SPARSE_MIN_VOCAB,
    HeadInputs,
    chunk_capable,
    chunked_token_nll,
    head_inputs,
    labelled_positions,
    labelled_rows,
)


def _liger() -> Optional[Callable]:
    try:  # optional extra: evolve-train[liger]
        from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy
    except ImportError:
        return None
    return liger_fused_linear_cross_entropy


def chunked_cross_entropy(inputs: HeadInputs, chunk: Optional[int] = None) -> torch.Tensor:
    """The mean cross-entropy over the labelled next tokens, as ``ForCausalLMLoss`` computes it."""
    hidden, targets = labelled_rows(inputs.hidden, inputs.labels)
    if targets.numel() == 0:
        return inputs.hidden.sum() * 0.0
    fused = _liger() if hidden.is_cuda else None
    if fused is not None:
        with inputs.precision():
            return fused(hidden, inputs.head.weight, targets, bias=inputs.head.bias, ignore_index=IGNORE)
    with inputs.precision():  # the head in the forward's precision, as the model's own loss computes it
        return chunked_token_nll(hidden, inputs.head, targets, chunk).sum() / targets.numel()


def batch_loss(model, unwrapped, batch: dict, *, keep: Optional[list] = None) -> torch.Tensor:
    """The micro-batch's loss (mean over labelled tokens). ``model``: what to call (accelerate's wrapped
    model); ``unwrapped``: the module that tells whether the chunked loss applies. ``keep``: a list that gets
    the :class:`HeadInputs` of the chunked path (for LwF), or the model's outputs otherwise."""
    labels = batch.get("labels")
    if labels is None or labels.shape[1] < 2 or not chunk_capable(unwrapped):
        outputs = model(**batch, use_cache=False)
        if keep is not None:
            keep.append(outputs)
        return outputs.loss
    inputs = head_inputs(model, unwrapped, batch)
    if keep is not None:
        keep.append(inputs)
    return chunked_cross_entropy(inputs)


def loss_token_count(batch: dict, encoder_decoder: bool) -> torch.Tensor:
    """The tokens a micro-batch's mean loss averages over: labelled next tokens (decoder-only, labels shifted
    by one as in transformers' ``ForCausalLMLoss`` and :func:`batch_loss`) or labelled targets (encoder-decoder);
    an int64 scalar on the labels' device (never read back to the host)."""
    labels = batch["labels"]
    return ((labels if encoder_decoder else labels[:, 1:]) != IGNORE).sum()


def global_mean_scale(local: torch.Tensor, accelerator) -> torch.Tensor:
    """The factor that turns this process's mean loss into its share of the global batch's mean loss.

    DDP and FSDP average the gradients of the processes, each the gradient of its own shard's *mean* loss: the
    processes' tokens weigh alike whatever their count, so two processes with batch B differ from one process
    with batch 2B (measured: 1.9 % of the weights after a tiny run). Scaled by ``local * world / global``
    (``global``: every process's ``local``, summed), the average of the processes' losses is the mean over all
    the global batch's tokens, as one process computes it.

    ``local`` is a device scalar (:func:`loss_token_count`); the sum is an integer all-reduce on the device and
    the factor a float64 device scalar: exact counts, no host sync."""
    total = accelerator.reduce(local.reshape(1), "sum").reshape(())
    share = local.double() * accelerator.num_processes / total.clamp(min=1).double()
    return torch.where(total > 0, share, torch.ones_like(share))
