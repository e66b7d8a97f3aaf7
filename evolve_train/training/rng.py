"""The random number generators' states (Python, NumPy, torch CPU and CUDA): captured into a mid-step training
state and restored from it (``training/train_state.py``), so a resumed step draws what an uninterrupted one
would. The values hold tensors and tuples: store them through ``training/tensor_json.py``."""

from __future__ import annotations

import random

import torch


def rng_state() -> dict:
    """``{"python", "numpy", "torch"}`` states, and ``"cuda"`` (every device) once CUDA is initialised."""
    import numpy as np

    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    """Restore :func:`rng_state`'s ``state`` (lists read back from JSON are accepted for tuples)."""
    import numpy as np

    def tuples(value):
        return tuple(tuples(v) for v in value) if isinstance(value, (list, tuple)) else value

    random.setstate(tuples(state["python"]))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
