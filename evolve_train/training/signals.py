"""Ctrl-C (SIGINT) and SIGTERM (and, in a submitit job, submitit's preemption signal) deferred to a safe point.

:class:`DeferredSignals` records the first such signal instead of acting on it; the caller checks
``received`` where it can stop cleanly (the training loop: at the end of the optimizer step in progress, after
saving a resumable state, ``training/train_state.py``). A second signal more than :data:`REPEAT_WINDOW_S`
after the first acts at once (the previous handler's action). One within that window is the same request
arriving twice, and is ignored: on a SLURM step every process gets the scheduler's SIGTERM and torchrun passes
its own copy on to each worker, and Ctrl-C at a terminal reaches the workers directly and through the launcher,
milliseconds apart. A process forked after :meth:`DeferredSignals.install` (a library's worker pool, which stops
its workers with SIGTERM) takes the signal's default action instead. Handlers can only be installed in the main thread; elsewhere :meth:`DeferredSignals.install`
does nothing.

submitit's handler of its preemption signal (SIGUSR2) checkpoints and requeues the job on global rank 0 only and
exits there at once, in the middle of whatever it was doing; the other ranks only log it. Deferred here instead,
every rank agrees on it at the next optimizer step, a mid-step state is saved, and only then is submitit's handler
called (``run.py``): rank 0 requeues the job, every rank exits.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any, Callable, Optional

DEFERRED_SIGNALS = (signal.SIGINT, signal.SIGTERM)
REPEAT_WINDOW_S = 2.0
"""A deferred signal within this many seconds of the first is the same request delivered twice."""
SIGNAL_NAMES = {
    signal.SIGINT: "Ctrl-C",
    signal.SIGTERM: "SIGTERM",
    signal.SIGUSR1: "SIGUSR1",
    signal.SIGUSR2: "SIGUSR2",
}


def submitit_signal() -> Optional[int]:
    """In a submitit job, the signal its preemption / time-limit handler listens to (``SIGUSR2`` unless
    ``SUBMITIT_PREEMPT_SIGNAL`` says otherwise); ``None`` elsewhere."""
    if not os.environ.get("SUBMITIT_EXECUTOR"):
        return None
    return int(getattr(signal, "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2")))


class DeferredSignals:
    """SIGINT and SIGTERM recorded in ``received`` (the signal's number) between :meth:`install` and
    :meth:`restore`; ``notify(signum)`` is called when one arrives."""

    def __init__(self, notify: Optional[Callable[[int], None]] = None, extra: tuple[int, ...] = ()):
        self.received: Optional[int] = None
        self._received_at = 0.0
        self._pid = os.getpid()
        self._notify = notify
        self._signals = DEFERRED_SIGNALS + tuple(extra)
        self._previous: dict[int, Any] = {}
        self.handlers: dict[int, Any] = {}
        """The handlers installed before :meth:`install` (kept after :meth:`restore`)."""

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            self._pid = os.getpid()
            for signum in self._signals:
                self._previous[signum] = signal.getsignal(signum)
                signal.signal(signum, self._handle)
            self.handlers = dict(self._previous)

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def _handle(self, signum, frame) -> None:
        if os.getpid() != self._pid:  # a forked child (a library's worker pool) inherited it: the default action
            signal.signal(signum, signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        now = time.monotonic()
        if self.received is None:
            self.received, self._received_at = signum, now
            if self._notify is not None:
                self._notify(signum)
        elif now - self._received_at > REPEAT_WINDOW_S:
            self.restore()  # a second request: the previous handler acts on it now
            os.kill(os.getpid(), signum)
