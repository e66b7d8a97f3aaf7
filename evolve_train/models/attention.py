"""Attention over packed documents: a block-diagonal mask, or the padding-free (varlen) layout.

Packed ``clm`` rows (``models/packing.py``) keep documents apart in one of two layouts
(``trainer.packed_attention``):

* ``mask``: the rows as they are (``[rows, width]``, right-padded) with per-document ``position_ids`` and no
  ``attention_mask``; transformers' mask builder detects the documents from the position ids and builds a
  block-diagonal causal mask, a ``[rows, 1, width, width]`` tensor for ``eager`` and ``sdpa`` (a block mask for
  ``flex_attention``). It rules out the flash kernels, which take no such mask.
* ``position_ids``: the convention of transformers' padding-free training (``DataCollatorWithFlattening``):
  the micro-batch's rows laid end to end as one row ``[1, tokens]`` without padding, position ids restarting
  at 0 at every document (and row) start, the first label of every row ignored (the shifted loss would
  otherwise predict a row's first token from the previous row's last), and the documents' cumulative lengths
  (``cu_seq_lens_q/k``, ``max_length_q/k``) computed on the host by :func:`flat_batch`. A varlen kernel
  attends within each document; no mask exists (an all-ones ``attention_mask`` keeps transformers from
  building one from the position ids). Kernels: :data:`VARLEN_IMPLEMENTATIONS`, i.e. transformers'
  ``flash_attention_2/3/4`` (which take ``cu_seq_lens`` directly) and :data:`SDPA_VARLEN`, registered here:
  ``scaled_dot_product_attention`` called causally on each document (any device and dtype; on a GPU the
  flash kernels are faster).

``auto`` (default) takes ``position_ids`` where the model's ``attn_implementation`` is a varlen one and
``mask`` elsewhere: with ``eager``/``sdpa`` position ids alone would let documents attend to each other
without the mask, so those keep it. Both layouts give the same loss (``tests/unit/training/
test_packed_attention.py``: 1e-5 in fp32 on tiny GPT-2 and Llama models).
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

IGNORE = -100
MODES = ("auto", "mask", "position_ids")
SDPA_VARLEN = "sdpa_varlen"
VARLEN_IMPLEMENTATIONS = ("flash_attention_2", "flash_attention_3", "flash_attention_4", SDPA_VARLEN)
"""Attention implementations that keep packed documents apart from ``cu_seq_lens`` (no mask)."""
MASK_IMPLEMENTATIONS = ("eager", "sdpa", "flex_attention", SDPA_VARLEN)
"""Attention implementations that make packed rows block-diagonal from ``position_ids`` (a built mask)."""


def attention_implementation(model) -> str:
    """The model's attention implementation (``eager`` when it does not say)."""
    return getattr(getattr(model, "config", None), "_attn_implementation", None) or "eager"


def packed_layout(mode: str, implementation: str) -> str:
    """``trainer.packed_attention`` resolved for an attention implementation: ``mask`` or ``position_ids``."""
    if mode not in MODES:
        raise ValueError(f"trainer.packed_attention must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "auto":
        return "position_ids" if implementation in VARLEN_IMPLEMENTATIONS else "mask"
    return mode


def check_packed_layout(layout: str, implementation: str) -> None:
    """A clear error when ``implementation`` cannot keep packed documents apart in ``layout``."""
    allowed = VARLEN_IMPLEMENTATIONS if layout == "position_ids" else MASK_IMPLEMENTATIONS
    if implementation not in allowed:
        raise ValueError(
            f"trainer.attention_reset=true with trainer.packed_attention={layout} needs one of the attention "
            f"implementations {', '.join(allowed)} (model.attn_implementation is {implementation!r}): set "
            "model.attn_implementation accordingly, trainer.packed_attention=auto or trainer.attention_reset=false"
        )


def flat_batch(examples: list[dict]) -> dict:
    """Packed rows (``input_ids``, ``labels``, ``position_ids`` restarting at 0 at each document and row start)
    as one padding-free row with the varlen kernels' arguments; built with NumPy on the host."""
    rows = [np.asarray(e["position_ids"], dtype=np.int64) for e in examples]
    positions = np.concatenate(rows)
    ids = np.concatenate([np.asarray(e["input_ids"], dtype=np.int64) for e in examples])
    labels = np.concatenate([np.asarray(e["labels"], dtype=np.int64) for e in examples])
    row_starts = np.cumsum([0] + [len(r) for r in rows[:-1]])
    if np.any(positions[row_starts] != 0):
        raise ValueError("packed rows must start their position ids at 0 (models/packing.py)")
    labels[row_starts] = IGNORE  # a row's first token is never predicted from the previous row
    bounds = np.append(np.flatnonzero(positions == 0), len(ids)).astype(np.int32)
    longest = int(np.diff(bounds).max())
    cu = torch.from_numpy(bounds)
    return {
        "input_ids": torch.from_numpy(ids)[None],
        "labels": torch.from_numpy(labels)[None],
        "position_ids": torch.from_numpy(positions)[None],
        "attention_mask": torch.ones((1, len(ids)), dtype=torch.long),
        "cu_seq_lens_q": cu,
        "cu_seq_lens_k": cu,
        "max_length_q": longest,
        "max_length_k": longest,
    }


def sdpa_varlen_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Optional[torch.Tensor],
    dropout: float = 0.0,
    scaling: Optional[float] = None,
    cu_seq_lens_q: Optional[torch.Tensor] = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' ``sdpa`` attention, but with ``cu_seq_lens_q`` (one flattened row: :func:`flat_batch`)
    each document attends causally to itself alone; without it, plain ``sdpa``. ``query``: ``[1, heads,
    tokens, dim]``; returns ``[1, tokens, heads, dim]``. The document bounds are read once per layer (on a
    GPU a host sync per layer: there the flash kernels, which read them on the device, are the fast choice)."""
    if cu_seq_lens_q is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    bounds = cu_seq_lens_q.tolist()
    grouped = key.shape[1] != query.shape[1]
    pieces = [
        torch.nn.functional.scaled_dot_product_attention(
            query[0, :, start:end],
            key[0, :, start:end],
            value[0, :, start:end],
            dropout_p=dropout,
            scale=scaling,
            is_causal=True,
            enable_gqa=grouped,
        )
        for start, end in zip(bounds[:-1], bounds[1:])
    ]
    out = torch.cat(pieces, dim=1)  # [heads, tokens, dim]
    return out.transpose(0, 1).unsqueeze(0).contiguous(), None


def register() -> None:
    """Make ``model.attn_implementation=sdpa_varlen`` known to transformers (its masks are ``sdpa``'s)."""
    AttentionInterface.register(SDPA_VARLEN, sdpa_varlen_attention)
    AttentionMaskInterface.register(SDPA_VARLEN, sdpa_mask)


register()
