"""The precision of evaluation (``eval.precision``), chosen, not inherited from training.

``fp32`` turns autocast off (so a checkpoint scores the same whatever precision trained it and on any CPU or
GPU), ``bf16`` / ``fp16`` autocast to that dtype, ``train`` uses the autocast of ``trainer.mixed_precision`` as
the run resolved it, ``bf16_copy`` evaluates a bfloat16 copy of the weights without autocast
(:func:`evaluated_weights`). :func:`eval_autocast` returns the context and the name every metric row records as
``eval_precision``: ``fp32``, ``bf16``, ``fp16`` or ``bf16_copy``, and for weights stored in a lower dtype than
the autocast (``model.dtype=bfloat16`` evaluated without autocast) the weights' dtype (``bf16``).
"""

from __future__ import annotations

import contextlib
from typing import ContextManager, Iterator

import torch

AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
WEIGHT_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
ACCELERATE_NAMES = {"no": "fp32", "bf16": "bf16", "fp16": "fp16"}
COPY_DTYPES = {"bf16_copy": torch.bfloat16}
"""``eval.precision`` choices that evaluate a copy of the weights in a lower dtype (:func:`evaluated_weights`)."""


def _cast_copy(model: torch.nn.Module, dtype: torch.dtype, device: torch.device) -> torch.nn.Module:
    """A copy of ``model`` on ``device`` whose floating-point parameters and buffers are ``dtype`` (others, such
    as integer position ids, keep theirs), made tensor by tensor: no full-precision copy on ``device``."""
    from evolve_train.training.distributed import fill_skeleton, meta_skeleton

    def cast(tensor: torch.Tensor, _meta) -> torch.Tensor:
        return tensor.detach().to(device, dtype if tensor.is_floating_point() else tensor.dtype)

    return fill_skeleton(meta_skeleton(model), model, parameter=cast)


@contextlib.contextmanager
def evaluated_weights(choice: str, model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """The model to evaluate under ``eval.precision=choice``: ``model`` itself, or for ``bf16_copy`` a bfloat16
    copy. On an accelerator the original's weights wait in host memory while the copy is used and come back
    after (unchanged, bit for bit); on a CPU they stay where they are."""
    dtype = COPY_DTYPES.get(str(choice))
    parameter = next(model.parameters(), None)
    if dtype is None or parameter is None:
        yield model
        return
    device = parameter.device
    park = device.type != "cpu"
    if park:
        model.to("cpu")
    try:
        yield _cast_copy(model, dtype, device)
    finally:
        if park:
            model.to(device)


def eval_autocast(choice: str, accelerator, model) -> tuple[ContextManager, str]:
    """(context manager, recorded precision) of evaluating ``model`` under ``eval.precision=choice``."""
    parameter = next(model.parameters(), None)
    device = parameter.device.type if parameter is not None else "cpu"
    weights = WEIGHT_NAMES.get(parameter.dtype, str(parameter.dtype)) if parameter is not None else "fp32"
    choice = str(choice)
    if choice in COPY_DTYPES:  # the copy's own dtype, no autocast
        return torch.autocast(device_type=device, enabled=False), choice
    if choice == "train":
        resolved = str(accelerator.mixed_precision)
        context, used = accelerator.autocast(), ACCELERATE_NAMES.get(resolved, resolved)
    elif choice in AUTOCAST_DTYPES:
        context, used = torch.autocast(device_type=device, dtype=AUTOCAST_DTYPES[choice]), choice
    else:
        context, used = torch.autocast(device_type=device, enabled=False), "fp32"
    if used == "fp32" and weights != "fp32":
        used = weights  # no autocast: the computation runs in the weights' dtype
    return context or contextlib.nullcontext(), used


__all__ = ["COPY_DTYPES", "eval_autocast", "evaluated_weights"]
