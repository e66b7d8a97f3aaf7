"""What every process of a multi-process run agrees on, and how long a collective may wait.

- :func:`agreed_signal`: the deferred signal (``training/signals.py``) as every process sees it: the largest
  signal number any process received (one integer gathered; a collective, so every process calls it at the
  same point). A single process reads its own.
- :func:`set_collective_timeout`: the process group's timeout. The run starts with ``trainer.dist_timeout_s``
  (long: set-up, checkpoints and evaluation may keep the main process busy while the others wait) and, from
  the first optimizer step of a time step on, trains with ``trainer.train_timeout_s`` (short: a rank that
  died or hangs inside a collective ends the job in that time instead of the long one, as torchtitan does);
  the long one comes back when the step's training ends and around each mid-step state save.
"""

from __future__ import annotations

import datetime
import logging
from typing import Optional

import torch

log = logging.getLogger(__name__)


def agreed_signal(received: Optional[int], accelerator) -> Optional[int]:
    """``received`` (this process's signal number or ``None``) as every process agrees on it."""
    mine = int(received or 0)
    if accelerator is None or accelerator.num_processes == 1:
        return mine or None
    everyone = accelerator.gather(torch.tensor([mine], device=accelerator.device))
    return int(everyone.max().item()) or None


def set_collective_timeout(seconds: float) -> None:
    """Collectives of the default process group wait at most ``seconds`` from now on (no-op without one, or
    for ``seconds <= 0``)."""
    if seconds <= 0 or not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return
    from torch.distributed.distributed_c10d import _set_pg_timeout

    _set_pg_timeout(datetime.timedelta(seconds=seconds))
