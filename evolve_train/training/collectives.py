"""What every process of a multi-process run agrees on, and how long a collective may wait.

- :func:`agreed_signal`: the deferred signal (``training/signals.py``) as every process sees it: the largest
  signal number any process received (one integer gathered; a collective, so every process calls it at the
  same point). A single process reads its own. :func:`agreed_signal_and_flag` adds, in the same gather, whether
  a mid-step state is due by the clock on any process (``trainer.save_every_minutes``).
- :func:`set_collective_timeout`: the process group's timeout. The run starts with ``trainer.dist_timeout_s``
  (long: set-up, checkpoints and evaluation may keep the main process busy while the others wait) and, from
  the first optimizer step of a time step on, trains with ``trainer.train_timeout_s`` (short: a rank that
  died or hangs inside a collective ends the job in that time instead of the long one, as torchtitan does);
  the long one comes back when the step's training ends and around each mid-step state save.
- :func:`flight_recorder_defaults`: NCCL's flight recorder on unless the launch says otherwise (the last
  collectives of each rank, dumped when one times out: what a hang was waiting for).
- :func:`end_process_group`: the process group's end. After a run every process ended the same way: a barrier
  and the orderly end (accelerate's ``end_training``, ``destroy_process_group``). After a failure: no barrier
  and no ``destroy_process_group``, which waits for pending collectives (pytorch#141510: "a hang is expected for
  a bad program"); the NCCL communicators are aborted where torch offers it, and the exception goes on up, as
  torchtitan does. docs/distributed.md.
"""

from __future__ import annotations

import datetime
import logging
import os
from typing import MutableMapping, Optional

import torch

log = logging.getLogger(__name__)


def agreed_signal(received: Optional[int], accelerator) -> Optional[int]:
    """``received`` (this process's signal number or ``None``) as every process agrees on it."""
    return agreed_signal_and_flag(received, False, accelerator)[0]


def agreed_signal_and_flag(received: Optional[int], flag: bool, accelerator) -> tuple[Optional[int], bool]:
    """:func:`agreed_signal` and whether ``flag`` is set on any process (a mid-step state due by the clock,
    ``trainer.save_every_minutes``), in the same one gather of two integers."""
    mine = int(received or 0)
    if accelerator is None or accelerator.num_processes == 1:
        return mine or None, bool(flag)
    everyone = accelerator.gather(torch.tensor([[mine, int(bool(flag))]], device=accelerator.device))
    top = everyone.reshape(-1, 2).max(dim=0).values.tolist()
    return int(top[0]) or None, bool(top[1])


def set_collective_timeout(seconds: float) -> None:
    """Collectives of the default process group wait at most ``seconds`` from now on (no-op without one, or
    for ``seconds <= 0``)."""
    if seconds <= 0 or not group_initialized():
        return
    from torch.distributed.distributed_c10d import _set_pg_timeout

    _set_pg_timeout(datetime.timedelta(seconds=seconds))


FLIGHT_RECORDER = {"TORCH_NCCL_TRACE_BUFFER_SIZE": "2000", "TORCH_NCCL_DUMP_ON_TIMEOUT": "1"}
"""NCCL's flight recorder: the last 2,000 collectives of each rank kept, and dumped (to
``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``, torch's default ``/tmp/nccl_trace_rank_<rank>``) when a collective times
out; read with ``python -m torch.distributed.flight_recorder.fr_trace``."""


def flight_recorder_defaults(environ: MutableMapping[str, str] = os.environ) -> dict[str, str]:
    """Set :data:`FLIGHT_RECORDER`'s variables the launch left unset (before the process group exists: NCCL
    reads them when it is created); returns those set."""
    added = {name: value for name, value in FLIGHT_RECORDER.items() if name not in environ}
    environ.update(added)
    return added


def group_initialized() -> bool:
    """A default process group exists (torch.distributed available and initialized)."""
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def abort_communicators() -> bool:
    """Abort the NCCL communicators of every process group at once, without waiting for their pending
    collectives (``_abort_process_group``); True when done. Gloo (CPU) has nothing of the kind and is left to
    the process's exit."""
    if not group_initialized() or "nccl" not in str(torch.distributed.get_backend()):
        return False
    abort = getattr(torch.distributed.distributed_c10d, "_abort_process_group", None)
    if abort is None:
        return False
    try:
        abort()
    except Exception as error:  # the exception that ended the run matters more than this one
        log.warning("aborting the NCCL communicators failed: %s", error)
        return False
    return True


def end_process_group(accelerator, agreed: bool) -> None:
    """End the run's process group: ``agreed`` (every process ended the same way): a barrier, accelerate's
    ``end_training`` (trackers finished, process group destroyed) and ``destroy_process_group``. Otherwise no
    collective at all: trackers finished, NCCL communicators aborted (:func:`abort_communicators`)."""
    if agreed:
        if accelerator is not None:
            accelerator.wait_for_everyone()
            accelerator.end_training()
        if group_initialized():
            torch.distributed.destroy_process_group()  # without it, multi-process runs may abort at exit
        return
    for tracker in getattr(accelerator, "trackers", None) or []:
        tracker.finish()
    if abort_communicators():
        log.warning("the run failed: NCCL communicators aborted, no barrier (the launcher ends the other processes)")
