"""Loud failures on a non-finite loss or gradient (``trainer.nonfinite``), without a host sync per step.

``stop`` (default): training stops with :class:`NonFiniteLossError` naming the time step, the epoch, the
batch index (in the epoch's deterministic order), the micro-batch and the last good checkpoint; nothing
trained after the bad batch is saved (the guard is read before every mid-step state and checkpoint).
``skip``: the optimizer update of a window holding a non-finite loss or gradient is dropped (parameters,
AdamW moments, step count and schedule as if the window had not been), the skipped micro-batches are counted
(``skipped_batches`` in the step's metrics rows and ``skipped`` in the training log) and the step trains on
until its planned number of updates; more than :data:`MAX_SKIP_SHARE` of the step's micro-batches skipped
stops it anyway (the model has diverged).

Cost: the flags stay on the device (a few scalar kernels per micro-batch) and are read with the loop's
logging read (:meth:`NonFiniteGuard.pending` joins the loss of the log row in one transfer: one host sync per
``trainer.log_every`` updates), before a mid-step state is saved and at the end of the step. With ``stop`` a
bad update may be applied before training stops (on every device alike), but it is never saved. With ``skip``
the window's flag is handed to the fused AdamW as its ``found_inf`` (:meth:`NonFiniteGuard.end_window`): the
kernel leaves the parameters and moments untouched on the device; the schedule steps on the host and is
wound back at the next read (an update between a skipped window and that read runs one schedule step ahead:
at most ``trainer.log_every`` updates). Where the optimizer is not torch's own (DeepSpeed, a loss scaler)
the loop reads the flag before every update instead (training/loop.py).
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
LOSS, GRADIENT = 1, 2
"""Kinds of a non-finite value."""


class NonFiniteLossError(EvolveTrainError, RuntimeError):
    """A non-finite loss or gradient stopped training (the message says where and what to resume from)."""


class NonFiniteGuard:
    """Device-side flags of the values seen since the last read: the first non-finite one (where, what
    kind, its value) and, per update window, whether the window holds one."""

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
        self.last_good = last_good
        self.limit = max(MIN_SKIP_LIMIT, math.ceil(MAX_SKIP_SHARE * planned_micro_batches))
        self.skipped = 0
        """Micro-batches skipped in this step, as of the last read."""
        self._positions: list[tuple[int, int, int]] = []  # (epoch, batch, micro) since the last read
        self._open = 0  # the position where the open window (micro-batches since the last update) starts
        self._windows: list[tuple[int, int]] = []  # (first, end) position of each closed window since the read
        self._window_flags: list[torch.Tensor] = []
        self._reset_flags()
        self._window_bad = torch.zeros((), dtype=torch.float32, device=device)

    def _reset_flags(self) -> None:
        self._bad_at = torch.full((), -1.0, dtype=torch.float64, device=self.device)
        self._bad_kind = torch.zeros((), dtype=torch.float64, device=self.device)
        self._bad_value = torch.zeros((), dtype=torch.float64, device=self.device)

    def _mark(self, value: torch.Tensor, kind: int) -> None:
        value = value.detach().reshape(()).to(torch.float64)
        bad = ~torch.isfinite(value)
        new = (self._bad_at < 0) & bad
        index = float(len(self._positions) - 1)
        self._bad_at = torch.where(new, torch.full_like(self._bad_at, index), self._bad_at)
        self._bad_kind = torch.where(new, torch.full_like(self._bad_kind, kind), self._bad_kind)
        self._bad_value = torch.where(new, value, self._bad_value)
        self._window_bad = torch.maximum(self._window_bad, bad.to(self._window_bad.dtype))

    def observe_loss(self, loss: torch.Tensor, epoch: int, batch: int, micro: int) -> None:
        """Every micro-batch, before backward."""
        self._positions.append((epoch, batch, micro))
        self._mark(loss, LOSS)

    def observe_gradients(self, norm: Optional[torch.Tensor], parameters) -> None:
        """At every optimizer step, after backward and clipping: ``norm`` is the clipping's total norm, or
        ``None`` (computed here)."""
        if norm is None:
            grads = [p.grad for p in parameters if p.grad is not None]
            if not grads:
                return
            norm = torch.nn.utils.get_total_norm(grads)
        if not isinstance(norm, torch.Tensor):
            norm = torch.tensor(float(norm), device=self.device)
        self._mark(norm, GRADIENT)

    def end_window(self) -> Optional[torch.Tensor]:
        """At every optimizer step, before the update: with ``skip`` the window's flag (a float32 scalar on the
        device, 1 when the window holds a non-finite value: the fused AdamW's ``found_inf``); ``None`` with
        ``stop``. Starts the next window."""
        first, self._open = self._open, len(self._positions)
        flag = self._window_bad
        self._window_bad = torch.zeros((), dtype=torch.float32, device=self.device)
        if self.mode != "skip":
            return None
        self._windows.append((first, len(self._positions)))
        self._window_flags.append(flag)
        return flag

    def pending(self) -> torch.Tensor:
        """What a read needs, as one float64 vector on the device: first bad position, its kind, its value, then
        one flag per window closed since the last read."""
        return torch.stack([self._bad_at, self._bad_kind, self._bad_value, *(f.double() for f in self._window_flags)])

    def read(self, values: list[float], optimizer_step: int) -> int:
        """Act on :meth:`pending`'s ``values`` (read to the host): ``stop`` raises on a non-finite value;
        ``skip`` counts and logs the skipped windows (raising past the limit). Returns the number of skipped
        windows (their updates were not applied); the flags start afresh."""
        bad, kind, value, flags = int(values[0]), int(values[1]), values[2], values[3:]
        if bad >= 0 and self.mode == "stop":
            self._raise(bad, kind, value, optimizer_step)
        windows = [w for w, flag in zip(self._windows, flags) if flag]
        if windows:
            micro = sum(end - first for first, end in windows)
            self.skipped += micro
            epoch, batch, _ = self._positions[bad]
            log.warning(
                "time step %d: skipped %d micro-batch(es) in %d update(s) with a non-finite value, the first a "
                "%s (%s) at epoch %d, batch %d (trainer.nonfinite=skip; %d skipped in this step so far)",
                self.step,
                micro,
                len(windows),
                _kind(kind),
                value,
                epoch,
                batch,
                self.skipped,
            )
            if self.skipped > self.limit:
                raise NonFiniteLossError(
                    f"time step {self.step}: {self.skipped} micro-batches skipped for non-finite losses or "
                    f"gradients (limit {self.limit}, {MAX_SKIP_SHARE:.0%} of the step); the model has likely "
                    f"diverged. Last good checkpoint: {self._last_good()}"
                )
        self._restart()
        return len(windows)

    def check(self, optimizer_step: int) -> int:
        """:meth:`read` on its own (one host sync)."""
        return self.read(self.pending().tolist(), optimizer_step)

    def _restart(self) -> None:
        """Forget what was read; the open window (micro-batches after the last update) stays open."""
        self._positions, self._open = self._positions[self._open :], 0
        self._windows, self._window_flags = [], []
        self._reset_flags()

    def _last_good(self) -> str:
        return self.last_good() if self.last_good is not None else "(not tracked for this training)"

    def _raise(self, bad: int, kind: int, value: float, optimizer_step: int) -> None:
        epoch, batch, micro = self._positions[bad]
        raise NonFiniteLossError(
            f"non-finite {_kind(kind)} ({value}) at time step {self.step}, epoch {epoch}, batch {batch} "
            f"of the epoch (micro-batch {micro} of the step, around optimizer step {optimizer_step}); training "
            f"stopped and nothing after the last good checkpoint was saved. Last good checkpoint: "
            f"{self._last_good()}. Rerunning resumes from it; consider a lower trainer.lr, trainer.grad_clip > 0, "
            "or trainer.nonfinite=skip to skip such batches."
        )


def _kind(kind: int) -> str:
    return "gradient norm" if kind == GRADIENT else "loss"
