"""Nested Python data holding tensors as JSON plus a flat ``{key: tensor}`` dict, without pickle.

:func:`split_tensors` turns a state dict (an optimizer's, a scheduler's, a method's, the RNG states) into
JSON-able data whose tensors are replaced by ``{"__tensor__": key}`` and collected for a safetensors file;
tuples, dicts with non-string keys and non-finite floats get markers of their own, NumPy values become
lists. :func:`join_tensors` rebuilds the original from the two. Used by the mid-step training states
(``training/train_state.py``).
"""

from __future__ import annotations

import math
from typing import Any

import torch


def split_tensors(value: Any, tensors: dict[str, torch.Tensor], prefix: str) -> Any:
    """``value`` as JSON-able data, its tensors moved into ``tensors`` (replaced by ``{"__tensor__": key}``)."""
    if isinstance(value, torch.Tensor):
        tensors[prefix] = value.detach().cpu().contiguous().clone()
        return {"__tensor__": prefix}
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            return {k: split_tensors(v, tensors, f"{prefix}/{k}") for k, v in value.items()}
        return {"__items__": [[k, split_tensors(v, tensors, f"{prefix}/{k}")] for k, v in value.items()]}
    if isinstance(value, tuple):
        return {"__tuple__": [split_tensors(v, tensors, f"{prefix}/{i}") for i, v in enumerate(value)]}
    if isinstance(value, list):
        return [split_tensors(v, tensors, f"{prefix}/{i}") for i, v in enumerate(value)]
    if isinstance(value, float) and not math.isfinite(value):
        return {"__float__": repr(value)}
    if hasattr(value, "tolist") and type(value).__module__ == "numpy":  # numpy arrays and scalars
        return split_tensors(value.tolist(), tensors, prefix)
    return value


def join_tensors(value: Any, tensors: dict[str, torch.Tensor]) -> Any:
    """The inverse of :func:`split_tensors`."""
    if isinstance(value, dict):
        if "__tensor__" in value:
            return tensors[value["__tensor__"]]
        if "__items__" in value:
            return {k: join_tensors(v, tensors) for k, v in value["__items__"]}
        if "__tuple__" in value:
            return tuple(join_tensors(v, tensors) for v in value["__tuple__"])
        if "__float__" in value:
            return float(value["__float__"])
        return {k: join_tensors(v, tensors) for k, v in value.items()}
    if isinstance(value, list):
        return [join_tensors(v, tensors) for v in value]
    return value
