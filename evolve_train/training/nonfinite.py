"""Loud failures on a non-finite loss or gradient (``trainer.nonfinite``).

``stop`` (default): training stops with :class:`NonFiniteLossError` naming the time step, the epoch, the
batch index (in the epoch's deterministic order), the micro-batch and the last good checkpoint; nothing
trained after the bad batch is saved (the guard is checked before every mid-step state and checkpoint).
``skip``: the optimizer update of a window holding a non-finite loss or gradient is dropped (its
gradients zeroed, optimizer and schedule untouched), the skipped micro-batches are counted
(``skipped_batches`` in the step's metrics rows and ``skipped`` in the training log) and the step trains
on until its planned number of updates; more than :data:`MAX_SKIP_SHARE` of the step's micro-batches
skipped stops it anyway (the model has diverged).

Cost: on CPU every value is read as it comes (a CPU scalar costs nothing to read; ~40 us per optimizer
step in all) and a bad update is never applied. On an accelerator the flags stay on the device (a few
scalar kernels per micro-batch, no host sync); with ``skip`` they are read before every update (one sync
per optimizer step: ``skip`` must decide before the update); with ``stop`` they are read at the loop's
logging points, before any state is saved and at the end of the step: a bad update may then be applied
before training stops, but it is never saved.
"""

from __future__ import annotations

import logging
import math
from typing import Callable, Optional

import torch

from evolve_train.errors import EvolveTrainError

log = logging.getLogger(__name__)
MODES = ("stop", "skip")
MAX_SKIP_SHARE = 0.1
MIN_SKIP_LIMIT = 10


class NonFiniteLossError(EvolveTrainError, RuntimeError):
    """A non-finite loss or gradient stopped training (the message says where and what to resume from)."""


class NonFiniteGuard:
    def __init__(
        self,
        mode: str,
        step: int,
        device: torch.device,
        planned_micro_batches: int,
        last_good: Optional[Callable[[], str]] = None,
    ):
        if mode not in MODES:
            raise ValueError(f"trainer.nonfinite must be stop or skip, got {mode!r}")
        self.mode, self.step, self.device = mode, step, device
        self.eager = mode == "skip" or device.type == "cpu"
        self.host = device.type == "cpu"  # reading a CPU scalar costs nothing: keep the flags in Python
        self.last_good = last_good
        self.limit = max(MIN_SKIP_LIMIT, math.ceil(MAX_SKIP_SHARE * planned_micro_batches))
        self.skipped = 0
        self._reset()

    def _reset(self) -> None:
        self._positions: list[tuple[int, int, int]] = []  # (epoch, batch, micro) since the last read
        self._host_bad: tuple[int, int, float] | None = None  # (index, kind, value) on CPU
        self._bad_at = torch.full((), -1, dtype=torch.long, device=self.device)
        self._bad_kind = torch.zeros((), dtype=torch.long, device=self.device)  # 1 loss, 2 gradient
        self._bad_value = torch.zeros((), dtype=torch.float32, device=self.device)

    def _mark(self, value: torch.Tensor, kind: int) -> None:
        value = value.detach().float().reshape(())
        if self.host:
            number = value.item()
            if self._host_bad is None and not math.isfinite(number):
                self._host_bad = (len(self._positions) - 1, kind, number)
            return
        new = (self._bad_at < 0) & ~torch.isfinite(value)
        index = len(self._positions) - 1
        self._bad_at = torch.where(new, torch.full_like(self._bad_at, index), self._bad_at)
        self._bad_kind = torch.where(new, torch.full_like(self._bad_kind, kind), self._bad_kind)
        self._bad_value = torch.where(new, value, self._bad_value)

    def observe_loss(self, loss: torch.Tensor, epoch: int, batch: int, micro: int) -> None:
        """Every micro-batch, before backward."""
        self._positions.append((epoch, batch, micro))
        self._mark(loss, 1)

    def observe_gradients(self, norm: Optional[torch.Tensor], parameters) -> None:
        """At every optimizer step, after backward and clipping: ``norm`` is the clipping's total norm, or
        ``None`` (computed here)."""
        if norm is None:
            grads = [p.grad for p in parameters if p.grad is not None]
            if not grads:
                return
            norm = torch.nn.utils.get_total_norm(grads)
        if isinstance(norm, torch.Tensor):
            self._mark(norm, 2)
        elif not math.isfinite(float(norm)):
            self._mark(torch.tensor(float(norm), device=self.device), 2)

    def _first_bad(self) -> int:
        if self.host:
            return self._host_bad[0] if self._host_bad is not None else -1
        return int(self._bad_at.item())

    def before_update(self, optimizer_step: int) -> bool:
        """At an optimizer step, before the update: ``True`` when this window must be skipped (``skip``).
        With ``stop`` on CPU, raises before a bad update is applied."""
        if not self.eager:
            return False
        bad = self._first_bad()
        if bad < 0:
            self._reset()
            return False
        if self.mode == "stop":
            self._raise(bad, optimizer_step)
        epoch, batch, micro = self._positions[bad]
        window = len(self._positions)
        self.skipped += window
        log.warning(
            "time step %d: skipped %d micro-batch(es) with a non-finite %s (%s) at epoch %d, batch %d "
            "(trainer.nonfinite=skip; %d skipped in this step so far)",
            self.step,
            window,
            self._kind(),
            self._value(),
            epoch,
            batch,
            self.skipped,
        )
        if self.skipped > self.limit:
            raise NonFiniteLossError(
                f"time step {self.step}: {self.skipped} micro-batches skipped for non-finite losses or gradients "
                f"(limit {self.limit}, {MAX_SKIP_SHARE:.0%} of the step); the model has likely diverged. "
                f"Last good checkpoint: {self._last_good()}"
            )
        self._reset()
        return True

    def check(self, optimizer_step: int) -> None:
        """Raise if a non-finite value was seen since the last read (``stop``); the window is cleared."""
        bad = self._first_bad()
        if bad >= 0 and self.mode == "stop":
            self._raise(bad, optimizer_step)
        if bad < 0:
            self._reset()

    def _kind(self) -> str:
        kind = self._host_bad[1] if self.host and self._host_bad else int(self._bad_kind.item())
        return "gradient norm" if kind == 2 else "loss"

    def _value(self) -> str:
        return str(self._host_bad[2] if self.host and self._host_bad else float(self._bad_value.item()))

    def _last_good(self) -> str:
        return self.last_good() if self.last_good is not None else "(not tracked for this training)"

    def _raise(self, bad: int, optimizer_step: int) -> None:
        epoch, batch, micro = self._positions[bad]
        raise NonFiniteLossError(
            f"non-finite {self._kind()} ({self._value()}) at time step {self.step}, epoch {epoch}, batch {batch} "
            f"of the epoch (micro-batch {micro} of the step, around optimizer step {optimizer_step}); training "
            f"stopped and nothing after the last good checkpoint was saved. Last good checkpoint: "
            f"{self._last_good()}. Rerunning resumes from it; consider a lower trainer.lr, trainer.grad_clip > 0, "
            "or trainer.nonfinite=skip to skip such batches."
        )
