"""Ctrl-C (SIGINT) and SIGTERM deferred to a safe point.

:class:`DeferredSignals` records the first such signal instead of acting on it; the caller checks
``received`` where it can stop cleanly (the training loop: at the end of the optimizer step in progress, after
saving a resumable state, ``training/train_state.py``). The first signal also puts the previous handlers
back, so a second one acts at once. Handlers can only be installed in the main thread; elsewhere
:meth:`DeferredSignals.install` does nothing.
"""

from __future__ import annotations

import signal
import threading
from typing import Any, Callable, Optional

DEFERRED_SIGNALS = (signal.SIGINT, signal.SIGTERM)
SIGNAL_NAMES = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}


class DeferredSignals:
    """SIGINT and SIGTERM recorded in ``received`` (the signal's number) between :meth:`install` and
    :meth:`restore`; ``notify(signum)`` is called when one arrives."""

    def __init__(self, notify: Optional[Callable[[int], None]] = None):
        self.received: Optional[int] = None
        self._notify = notify
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            for signum in DEFERRED_SIGNALS:
                self._previous[signum] = signal.getsignal(signum)
                signal.signal(signum, self._handle)

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def _handle(self, signum, frame) -> None:
        self.received = signum
        if self._notify is not None:
            self._notify(signum)
        self.restore()
