"""Evaluation shards run as threads in one process (a stand-in for ranks without a process group)."""

import functools
import threading
from dataclasses import dataclass
from evolve_train.config import EvalConfig
from evolve_train.data.timeline import Timeline
from evolve_train.evaluation.context import EvalContext, Shards


BATCH = 4


class World:
    """Threads standing in for processes: ``gather`` exchanges values through shared slots."""

    def __init__(self, count: int):
        self.slots: list = [None] * count
        self.barrier = threading.Barrier(count, timeout=120)
        self.model_lock = threading.Lock()  # one forward at a time, as in a process of its own


@dataclass
class ThreadShards(Shards):
    world: World = None

    def gather(self, value) -> list:
        self.world.slots[self.index] = value
        self.world.barrier.wait()
        parts = list(self.world.slots)
        self.world.barrier.wait()  # nobody writes the next value before everyone has read this one
        return parts


class Locked:
    """``adapter`` whose model calls take ``lock``."""

    def __init__(self, text_format, lock):
        self._text_format, self._lock = text_format, lock

    def __getattr__(self, name):
        value = getattr(self._text_format, name)
        if name not in ("generate", "score_options", "token_nll"):
            return value

        @functools.wraps(value)
        def locked(*args, **kwargs):
            with self._lock:
                return value(*args, **kwargs)

        return locked


def context(text_format, model, shards: Shards) -> EvalContext:
    return EvalContext(
        model=model,
        text_format=text_format,
        timeline=Timeline(steps=[], eval_sets=[]),
        checkpoint=0,
        cfg=EvalConfig(batch_size=BATCH, max_new_tokens=4),
        shards=shards,
        writes=False,
    )
