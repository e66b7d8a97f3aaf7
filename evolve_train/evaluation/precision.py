"""The precision of evaluation (``eval.precision``), chosen, not inherited from training.

``fp32`` turns autocast off (so a checkpoint scores the same whatever precision trained it and on any CPU or
GPU), ``bf16`` / ``fp16`` autocast to that dtype, ``train`` uses the autocast of ``trainer.mixed_precision`` as
the run resolved it. :func:`eval_autocast` returns the context and the name every metric row records as
``eval_precision``: ``fp32``, ``bf16`` or ``fp16``, and for weights stored in a lower dtype than the autocast
(``model.dtype=bfloat16`` evaluated without autocast) the weights' dtype (``bf16``).
"""

from __future__ import annotations

import contextlib
from typing import ContextManager

import torch

AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
WEIGHT_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
ACCELERATE_NAMES = {"no": "fp32", "bf16": "bf16", "fp16": "fp16"}


def eval_autocast(choice: str, accelerator, model) -> tuple[ContextManager, str]:
    """(context manager, recorded precision) of evaluating ``model`` under ``eval.precision=choice``."""
    parameter = next(model.parameters(), None)
    device = parameter.device.type if parameter is not None else "cpu"
    weights = WEIGHT_NAMES.get(parameter.dtype, str(parameter.dtype)) if parameter is not None else "fp32"
    choice = str(choice)
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


__all__ = ["eval_autocast"]
