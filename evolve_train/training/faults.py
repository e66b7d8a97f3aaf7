"""Deterministic fault injection for the reliability tests: kill (or interrupt) the process at a named point.

``EVOLVE_TRAIN_FAULT=<point>:<count>[:<signal>][,<point>:<count>...]`` makes the ``count``-th arrival at
``point`` in this process send ``signal`` (default ``SIGKILL``; ``SIGINT`` behaves as a Ctrl-C) to the
process itself. Unset (always, outside tests), :func:`point` is one dictionary lookup.

Points (where they are called):

- ``optimizer_step``     after every optimizer step of the training loop (after a due mid-step state save)
- ``train_state_write``  inside a mid-step state save, after its files are written, before the rename
- ``checkpoint_write``   inside a step checkpoint save, after the weights are written, before the rename
- ``checkpoint_saved``   after the checkpoint's rename, before ``state.json`` records it
- ``evaluate``           after a checkpoint's evaluation (predictions written), before its metrics rows
"""

from __future__ import annotations

import os
import signal

ENV = "EVOLVE_TRAIN_FAULT"
POINTS = ("optimizer_step", "train_state_write", "checkpoint_write", "checkpoint_saved", "evaluate")
_arrivals: dict[str, int] = {}


def parse(spec: str) -> list[tuple[str, int, int]]:
    """``"evaluate:2,optimizer_step:7:SIGINT"`` -> ``[("evaluate", 2, SIGKILL), ("optimizer_step", 7, SIGINT)]``."""
    faults = []
    for part in filter(None, (p.strip() for p in spec.split(","))):
        fields = part.split(":")
        if len(fields) not in (2, 3) or fields[0] not in POINTS or not fields[1].isdigit() or int(fields[1]) < 1:
            raise ValueError(
                f"{ENV}: bad fault {part!r}; expected <point>:<count>[:<signal>] with point one of "
                f"{', '.join(POINTS)} and count >= 1"
            )
        signum = getattr(signal, fields[2]) if len(fields) == 3 else signal.SIGKILL
        faults.append((fields[0], int(fields[1]), int(signum)))
    return faults


def point(name: str) -> None:
    """Mark arrival at ``name``; deliver the configured signal if this is the planned arrival."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    _arrivals[name] = _arrivals.get(name, 0) + 1
    for where, count, signum in parse(spec):
        if where == name and count == _arrivals[name]:
            os.kill(os.getpid(), signum)
