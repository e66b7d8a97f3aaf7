"""Progress of a time step where no terminal shows the tqdm bar (a SLURM log, ``python train.py > log``): a log
line every ``trainer.progress_every_s`` seconds, through ``logging`` (so also in the run's ``train.log``)."""

from __future__ import annotations

import logging
import math
import sys
import time

log = logging.getLogger("evolve_train.progress")


def has_terminal() -> bool:
    """Whether the tqdm bar is shown (tqdm's ``disable=None``: only where stderr is a terminal)."""
    return bool(getattr(sys.stderr, "isatty", lambda: False)())


def duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class ProgressLines:
    """``update(...)`` after every optimizer step logs a line once ``every_s`` seconds have passed since the last."""

    def __init__(self, every_s: float, step: int, n_time_steps: int, total: int, done: int, enabled: bool):
        self.every_s, self.step, self.n_time_steps, self.total = every_s, step, n_time_steps, total
        self.enabled = enabled and every_s > 0
        self.start = self.last = time.monotonic()
        self.done_at_start = done

    def update(self, optimizer_steps: int, loss, tokens: int) -> None:
        """``tokens``: real tokens of every process trained by this attempt so far; ``loss``: the last loss, or a
        callable giving it (read only when a line is due: one device sync per line, not per step)."""
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.last < self.every_s and optimizer_steps < self.total:
            return
        self.last, elapsed = now, now - self.start
        done = optimizer_steps - self.done_at_start
        eta = elapsed / done * (self.total - optimizer_steps) if done > 0 else float("nan")
        loss = loss() if callable(loss) else loss
        log.info(
            "time step %d (%d/%d): optimizer step %d/%d, loss %.4f, %.0f tokens/s, elapsed %s, ETA %s",
            self.step,
            self.step + 1,
            self.n_time_steps,
            optimizer_steps,
            self.total,
            loss,
            tokens / max(elapsed, 1e-9),
            duration(elapsed),
            duration(eta),
        )
