"""The output head applied in chunks: a causal LM's last hidden states, and the per-token cross-entropy of its
head computed :data:`LOSS_CHUNK` positions at a time, so no ``[tokens x vocab]`` float32 logits exist at once.
Training (``training/loss.py``), LwF's teacher (``methods/lwf.py``) and scoring (``models/scoring.py``) read it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

IGNORE = -100
SPARSE_MIN_VOCAB = 16384
"""Vocabularies below this keep the model's own loss."""
LOSS_CHUNK = 1024
"""Positions per chunk of the chunked cross-entropy: the logits held at once are ``LOSS_CHUNK x vocab`` in
float32 (0.5 GB at a 128k vocabulary) plus their gradient in the backward."""
_NOT_PLAIN = ("final_logit_softcapping", "logit_scale", "output_multiplier_scale")


@dataclass
class HeadInputs:
    """What the chunked loss reads: the last hidden states (``[rows, width, hidden]``, after the final norm),
    the output head, and the labels. LwF's distillation reads the same (``methods/lwf.py``)."""

    hidden: torch.Tensor
    head: torch.nn.Module
    labels: torch.Tensor
    autocast: Optional[torch.dtype] = None
    """The autocast dtype the model's forward ran under (accelerate's mixed precision), for the head's chunks."""

    def precision(self):
        """The forward's autocast, for the head's chunks (a no-op context without one)."""
        device = self.hidden.device.type
        return torch.autocast(device, dtype=self.autocast, enabled=self.autocast is not None)


def _inner(model) -> torch.nn.Module:
    """The transformers model inside a PEFT wrapper (or the model itself)."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def chunk_capable(model) -> bool:
    """A decoder-only model with a large vocabulary whose logits are its head applied to the last hidden state."""
    inner = _inner(model)
    config = getattr(inner, "config", None)
    if config is None or getattr(config, "is_encoder_decoder", False):
        return False
    if getattr(config, "vocab_size", 0) < SPARSE_MIN_VOCAB or any(getattr(config, k, None) for k in _NOT_PLAIN):
        return False
    base, head = getattr(inner, "base_model", None), inner.get_output_embeddings()
    return base is not None and base is not inner and isinstance(head, torch.nn.Linear)


def forward_keeping_hidden(model, unwrapped, **inputs) -> tuple[Any, dict]:
    """``model(**inputs, logits_to_keep=1)`` (one position's logits instead of all of them) and what the base
    model computed: ``{"hidden": last hidden states, "autocast": the dtype its forward ran under or None}``.
    ``model`` may be accelerate's wrapper (so DDP and FSDP hooks run) around ``unwrapped``."""
    captured: dict[str, Any] = {}

    def keep(module, args, output):
        hidden = output.last_hidden_state if hasattr(output, "last_hidden_state") else output[0]
        device = hidden.device.type
        captured["hidden"] = hidden
        captured["autocast"] = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None

    handle = _inner(unwrapped).base_model.register_forward_hook(keep)
    try:
        output = model(**inputs, logits_to_keep=1)
    finally:
        handle.remove()
    return output, captured


def head_inputs(model, unwrapped, batch: dict) -> HeadInputs:
    """The model's last hidden states for ``batch`` (its forward called through ``model``, accelerate's wrapper,
    so DDP and FSDP hooks run), with one position's logits instead of all of them."""
    inputs = {key: value for key, value in batch.items() if key != "labels"}
    _, captured = forward_keeping_hidden(model, unwrapped, **inputs, use_cache=False)
    head = _inner(unwrapped).get_output_embeddings()
    return HeadInputs(captured["hidden"], head, batch["labels"], captured["autocast"])


def last_position_logprobs(model, **inputs) -> tuple[Any, torch.Tensor]:
    """``model(**inputs)``'s output and the float32 log-probabilities at each row's last position. A
    :func:`chunk_capable` model applies its head to those positions only, copied out of the hidden states first
    (a dense ``[rows, hidden]`` matrix, so identical models round identically, which transformers'
    ``logits_to_keep=1`` on a strided view did not); other models compute every position's logits."""
    if not chunk_capable(model):
        output = model(**inputs)
        return output, torch.log_softmax(output.logits[:, -1].float(), dim=-1)
    output, captured = forward_keeping_hidden(model, model, **inputs)
    last = captured["hidden"][:, -1].contiguous()
    return output, torch.log_softmax(_inner(model).get_output_embeddings()(last).float(), dim=-1)


def labelled_rows(hidden: torch.Tensor, labels: torch.Tensor, shift: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """The hidden states whose next token is labelled (``[n, hidden]``) and those tokens (``[n]``)."""
    if shift:
        hidden, labels = hidden[:, :-1], labels[:, 1:]
    mask = labels != IGNORE
    return hidden[mask], labels[mask]


def labelled_positions(labels: torch.Tensor) -> torch.Tensor:
    """Positions t (0-based, < width - 1) whose next token is labelled in at least one row."""
    return (labels[:, 1:] != IGNORE).any(0).nonzero().squeeze(1)


def _chunk_nll(hidden: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], targets: torch.Tensor):
    logits = F.linear(hidden, weight, bias).float()
    return F.cross_entropy(logits, targets, reduction="none", ignore_index=IGNORE)


def chunked_token_nll(
    hidden: torch.Tensor, head: torch.nn.Module, targets: torch.Tensor, chunk: Optional[int] = None
) -> torch.Tensor:
    """Each row's negative log-likelihood of its target (``hidden [n, h]``, ``targets [n]``; 0 where -100),
    ``chunk`` rows of logits at a time; with gradients, each chunk's logits are recomputed in the backward."""
    parts, chunk = [], chunk or LOSS_CHUNK
    for start in range(0, hidden.shape[0], chunk):
        args = (hidden[start : start + chunk], head.weight, head.bias, targets[start : start + chunk])
        if torch.is_grad_enabled() and (hidden.requires_grad or head.weight.requires_grad):
            parts.append(checkpoint(_chunk_nll, *args, use_reentrant=False))
        else:
            parts.append(_chunk_nll(*args))
    return torch.cat(parts) if parts else hidden.new_zeros(0, dtype=torch.float32)
