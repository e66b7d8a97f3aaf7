"""Deterministic fault injection for the reliability tests: kill (or interrupt) the process at a named point.

``EVOLVE_TRAIN_FAULT=<point>:<count>[:<action>][@<rank>][,...]`` makes the ``count``-th arrival at
``point`` in this process do ``action``: send a signal to the process itself (a signal's name; default
``SIGKILL``; ``SIGINT`` behaves as a Ctrl-C), ``raise`` (a ``RuntimeError``, as an out-of-memory or a data
error would) or ``pause`` (wait there until a signal handler has run: a rank held at a known point until a
scheduler's signal arrives, as in the SLURM tests). ``@<rank>`` limits the fault to the process of that global rank (``RANK``, set by torchrun and
submitit's multi-task jobs; 0 in a single process). Unset (always, outside tests), :func:`point` is one
dictionary lookup.

Points (where they are called):

- ``optimizer_step``     after every optimizer step of the training loop (after a due mid-step state save)
- ``train_state_write``  inside a mid-step state save, after its files are written, before the rename
- ``train_state_async``  after a mid-step state's background write began (FSDP2, ``trainer.async_save``),
                         while it is in flight: the state is renamed complete later
- ``checkpoint_write``   inside a step checkpoint save, after the weights are written, before the rename
- ``checkpoint_saved``   after the checkpoint's rename, before ``state.json`` records it
- ``evaluate``           after a checkpoint's evaluation (predictions written), before its metrics rows
- ``sample``             after a generative-replay method sampled the replay texts of a time step
"""

from __future__ import annotations

import os
import signal
import sys

ENV = "EVOLVE_TRAIN_FAULT"
POINTS = (
    "optimizer_step",
    "train_state_write",
    "train_state_async",
    "checkpoint_write",
    "checkpoint_saved",
    "evaluate",
    "sample",
)
RAISE = -1
"""The action ``raise``: a ``RuntimeError`` instead of a signal."""
PAUSE = -2
"""The action ``pause``: ``signal.pause()``, which returns once a Python signal handler has run."""
ACTIONS = {"raise": RAISE, "pause": PAUSE}
_arrivals: dict[str, int] = {}


def parse(spec: str) -> list[tuple[str, int, int, int | None]]:
    """``"evaluate:2,optimizer_step:7:raise@1"`` -> ``[("evaluate", 2, SIGKILL, None), ("optimizer_step", 7,
    RAISE, 1)]`` (point, count, signal, :data:`RAISE` or :data:`PAUSE`, rank or ``None`` for every rank)."""
    faults = []
    for part in filter(None, (p.strip() for p in spec.split(","))):
        part_, _, rank = part.partition("@")
        fields = part_.split(":")
        action = fields[2] if len(fields) == 3 else "SIGKILL"
        if (
            len(fields) not in (2, 3)
            or fields[0] not in POINTS
            or not fields[1].isdigit()
            or int(fields[1]) < 1
            or (action not in ACTIONS and not isinstance(getattr(signal, action, None), signal.Signals))
            or (rank and not rank.isdigit())
        ):
            raise ValueError(
                f"{ENV}: bad fault {part!r}; expected <point>:<count>[:<signal>|raise|pause][@<rank>] with point "
                f"one of {', '.join(POINTS)} and count >= 1"
            )
        signum = ACTIONS[action] if action in ACTIONS else int(getattr(signal, action))
        faults.append((fields[0], int(fields[1]), signum, int(rank) if rank else None))
    return faults


def point(name: str) -> None:
    """Mark arrival at ``name``; deliver the configured signal (or raise) if this is the planned arrival."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    _arrivals[name] = _arrivals.get(name, 0) + 1
    rank = int(os.environ.get("RANK", "0") or 0)
    for where, count, signum, only in parse(spec):
        if where == name and count == _arrivals[name] and only in (None, rank):
            if signum == RAISE:
                raise RuntimeError(f"fault injected by {ENV} at {name} #{count} in the process of rank {rank}")
            if signum == PAUSE:
                print(f"{ENV}: pausing at {name} #{count} in the process of rank {rank}", file=sys.stderr, flush=True)
                signal.pause()
                continue
            os.kill(os.getpid(), signum)
