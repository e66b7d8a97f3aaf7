"""Replay (Mix-review): mix earlier steps' examples into each time step's training data.

At step k >= 1, ``round(ratio * n_k)`` examples drawn from earlier steps (``source=all``) or from
step 0 only (``source=initial``, Mix-review's pretraining corpus) are appended to the n_k examples of
step k. With ``decay < 1`` (CKL's schedule) epoch e trains on all n_k current examples plus a fresh
random ``round(ratio * decay**e * n_k)`` of the replayed pool, through the loop's ``epoch_rows`` hook.
Sampling is seeded by the run seed and the step, so a rerun replays the same examples. Each step's
examples are kept once seen (tokenizing every earlier step again at every step would cost minutes on
large releases); after a resume the earlier steps are tokenized once, from ``history``.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from typing import Optional

import torch

from evolve_train.methods.base import Strategy, register_strategy

log = logging.getLogger(__name__)


@dataclass
class ReplayPlan:
    n_current: int
    """Examples of the step itself (rows 0 .. n_current-1 of the mixed examples)."""
    n_replayed: int
    """Replayed examples appended after them (the pool epochs draw from)."""
    seed: int

    @property
    def n_rows(self) -> int:
        return self.n_current + self.n_replayed


def sample_indices(pool_size: int, count: int, rng: random.Random) -> list[int]:
    """``count`` indices into a pool: without replacement, cycling through the pool when count > pool."""
    indices: list[int] = []
    while len(indices) < count:
        indices.extend(rng.sample(range(pool_size), min(pool_size, count - len(indices))))
    return indices


@register_strategy("replay")
class Replay(Strategy):
    def __init__(self, cfg):
        super().__init__(cfg)
        c = cfg.replay  # ranges and choices: checked by the schema (config.py: ReplayConfig)
        if c.ratio == 0:
            log.warning("method.replay.ratio=0: the replay strategy replays nothing")
        self.plan: Optional[ReplayPlan] = None
        self._seen: dict[int, object] = {}  # step -> its tokenized examples

    def earlier(self, history, index: int):
        if index not in self._seen:
            self._seen[index] = history[index]
        return self._seen[index]

    def mix_examples(self, step, examples, history):
        from datasets import concatenate_datasets

        self.plan = None
        self._seen[step] = examples
        ratio = self.cfg.replay.ratio
        if step == 0 or len(history) == 0 or ratio == 0:
            return examples
        indices = [0] if self.cfg.replay.source == "initial" else range(len(history))
        sources = [self.earlier(history, i) for i in indices]
        columns = examples.column_names
        pool = concatenate_datasets([s.select_columns(columns) for s in sources])
        n_current, n_replayed = len(examples), round(ratio * len(examples))
        if len(pool) == 0 or n_replayed == 0:
            return examples
        seed = int(torch.randint(0, 2**31 - 1, ()).item())  # follows the run seed (set per step)
        replayed = pool.select(sample_indices(len(pool), n_replayed, random.Random(seed)))
        self.plan = ReplayPlan(n_current=n_current, n_replayed=n_replayed, seed=seed)
        log.info(
            "replay (step %d): %d current + %d replayed examples from %s earlier step(s)%s",
            step,
            n_current,
            n_replayed,
            len(sources),
            f", decaying x{self.cfg.replay.decay} per epoch" if self.cfg.replay.decay < 1 else "",
        )
        return concatenate_datasets([examples, replayed.cast(examples.features)])

    def replayed_in_epoch(self, epoch: int) -> int:
        """How many replayed examples epoch ``epoch`` trains on: round(ratio * decay**epoch * n_current)."""
        if self.plan is None:
            return 0
        wanted = round(self.cfg.replay.ratio * self.cfg.replay.decay**epoch * self.plan.n_current)
        return min(self.plan.n_replayed, wanted)

    def epoch_rows(self, epoch, n_rows):
        if self.plan is None or self.cfg.replay.decay == 1:
            return None
        if n_rows != self.plan.n_rows:
            raise RuntimeError(
                f"replay planned {self.plan.n_rows} rows but the loop has {n_rows}: a strategy "
                "listed after replay changed the examples; list replay last"
            )
        count = self.replayed_in_epoch(epoch)
        chosen = random.Random(f"{self.plan.seed}-{epoch}").sample(range(self.plan.n_replayed), count)
        return list(range(self.plan.n_current)) + sorted(self.plan.n_current + i for i in chosen)
