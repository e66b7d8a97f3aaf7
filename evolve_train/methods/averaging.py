"""Weight averaging across time steps (``method.average``): the checkpoint of step k is an average of the
steps' trained weights, a simple merging baseline.

- ``uniform``: ``avg_k = mean(raw_0, ..., raw_k)``, kept as the running mean ``avg_(k-1) + (raw_k - avg_(k-1)) / (k+1)``;
- ``ema``: ``avg_k = d * avg_(k-1) + (1 - d) * raw_k`` with ``d = method.ema_decay``, ``avg_0 = raw_0``.

``raw_k`` is what step k's training ended with (after the method's ``after_step``: LoRA merged). Floating
tensors are averaged in float32 and stored in the weights' dtype; other entries are the raw ones. Where the
weights live (``run.py``): ``steps/<k>/`` holds ``avg_k`` (full weights, also for LoRA: an average is not an
adapter), and it is what is evaluated; step k+1 trains from ``raw_k`` (``method.average_continue=raw``, kept in
``train_state/carry/<k>/raw.safetensors`` between steps so a resume continues from it) or from ``avg_k``
(``average``). On resume ``avg_(k-1)`` is read back from ``steps/<k-1>/``.
"""

from __future__ import annotations

from typing import Optional

import torch

from evolve_train.config import MethodConfig


def cpu_state(model) -> dict[str, torch.Tensor]:
    """A CPU copy of ``model``'s state dict."""
    return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}


class WeightAverage:
    """The running average of the steps' trained weights."""

    def __init__(self, cfg: MethodConfig):
        self.kind, self.decay = str(cfg.average), cfg.ema_decay
        self.average: Optional[dict[str, torch.Tensor]] = None
        """``avg_k`` of the last step averaged (CPU tensors), ``None`` before step 0."""

    @property
    def enabled(self) -> bool:
        return self.kind != "none"

    def update(self, raw: dict[str, torch.Tensor], step: int) -> dict[str, torch.Tensor]:
        """``avg_step`` from ``avg_(step-1)`` and ``raw`` (step ``step``'s trained weights); kept and returned."""
        previous = self.average
        if previous is None or step == 0:
            self.average = {k: v.clone() for k, v in raw.items()}
            return self.average
        weight = 1.0 / (step + 1) if self.kind == "uniform" else 1.0 - self.decay  # of raw_k
        averaged = {}
        for key, value in raw.items():
            old = previous.get(key)
            if old is None or not value.is_floating_point() or old.shape != value.shape:
                averaged[key] = value.clone()
                continue
            mixed = old.float() + (value.float() - old.float()) * weight
            averaged[key] = mixed.to(value.dtype)
        self.average = averaged
        return averaged
