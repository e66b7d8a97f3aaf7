"""The learning rate of every optimizer step: a pure function of (trainer settings, time step, optimizer step).

``lr = trainer.lr * peak(k) * shape(t)`` for optimizer update ``t`` (0-based) of time step ``k``, which plans
``total`` updates (``training/loop.py``: ``planned_steps_for_method``). The loop hands :func:`lr_factor` to a
``LambdaLR`` (update ``t`` runs at ``lr * factor(t)``); a resumed step restores the scheduler's position and so
continues on the same curve. Nothing depends on what happened before: the LR of a resumed run equals the
uninterrupted one's by construction.

``trainer.schedule`` (``shape``; ``w`` warmup updates: ``trainer.warmup_steps`` clamped to half the step's
planned updates, with a log line, ``m = trainer.min_lr_ratio``, ``p = (t - w) / (total - w)``,
``D = max(1, round(trainer.cooldown_fraction * total))`` cooldown updates starting at ``s = total - D``):

- ``linear`` (default): ``(t + 1) / w`` while ``t < w``, then ``max(m, 1 - (1 - m) p)``;
- ``cosine``: warmup, then ``m + (1 - m) (1 + cos(pi p)) / 2``;
- ``constant``: warmup, then ``1``;
- ``wsd`` (warmup-stable-decay): warmup, ``1`` until ``s``, then linear to ``m`` at the step's last update:
  ``1 - (1 - m) (t - s + 1) / D``;
- ``rsqrt``: warmup, then ``min(1, sqrt(max(1, W) / (t + 1)))`` with ``W = trainer.warmup_steps`` (the timescale,
  also when this step does not warm up), and from ``s`` a linear cooldown from the value ``v`` it would have at ``s``:
  ``v - (v - m) (t - s + 1) / D``;
- ``infinite`` (Ibrahim et al. 2024): warmup once (time step 0 only, whatever ``trainer.rewarm``); at step 0 a
  cosine from ``1`` to ``c = trainer.constant_lr_ratio`` over ``[w, s)``, at every later step the constant ``c``
  until ``s``; then a linear cooldown from ``c`` to ``m``. Each step's checkpoint is taken after its cooldown,
  and the next step starts again at ``c``.

``trainer.step0_schedule`` (default ``null``): the shape of step 0 alone (and of the oracle's steps, which run
step 0's curve), so that runs comparing ``schedule`` on the continual steps share one step 0.

``trainer.rewarm`` (which time steps warm up; step 0, the initial training, always does): ``all`` every step,
``first`` only step 1 (the first continual step), ``none`` no later step (its LR starts at the peak). With
``schedule=infinite``, which never re-warms, ``first`` would be ignored: the config refuses it (``ConfigError``
in ``TrainerConfig``; ``all``, the default, and ``none`` are accepted and give the same curve).

``trainer.peak_schedule``: ``constant`` (``peak(k) = 1``) or ``cosine_over_steps`` (TiC-LM's "AR meta-schedule":
step k's peak is one global cosine over the run's ``N`` time steps at the start of step k,
``peak(k) = m + (1 - m) (1 + cos(pi k / N)) / 2``, so ``peak(0) = 1``).
"""

from __future__ import annotations

import logging
import math
from typing import Callable

from evolve_train.config import REGISTERED_SCHEDULES, PeakSchedule, Rewarm, Schedule, TrainerConfig

log = logging.getLogger(__name__)


def schedule_of(cfg: TrainerConfig, time_step: int) -> Schedule:
    """The shape time step ``time_step`` runs: ``trainer.step0_schedule`` at step 0 where it is set, else
    ``trainer.schedule``."""
    if time_step == 0 and cfg.step0_schedule is not None:
        return cfg.step0_schedule
    return cfg.schedule


def warms_up(cfg: TrainerConfig, time_step: int) -> bool:
    """Whether time step ``time_step`` starts with ``trainer.warmup_steps`` of linear warmup."""
    if time_step == 0:
        return True
    if cfg.schedule == Schedule.infinite:
        return False
    return cfg.rewarm == Rewarm.all or (cfg.rewarm == Rewarm.first and time_step == 1)


def peak(cfg: TrainerConfig, time_step: int, n_time_steps: int) -> float:
    """The peak of time step ``time_step`` as a share of ``trainer.lr``."""
    if cfg.peak_schedule == PeakSchedule.constant:
        return 1.0
    m = cfg.min_lr_ratio
    return m + (1.0 - m) * 0.5 * (1.0 + math.cos(math.pi * time_step / max(1, n_time_steps)))


def cooldown_start(cfg: TrainerConfig, total: int) -> tuple[int, int]:
    """``(s, D)``: the first cooldown update and the number of cooldown updates (wsd, rsqrt, infinite)."""
    length = max(1, round(cfg.cooldown_fraction * total)) if cfg.cooldown_fraction > 0 else 0
    return total - length, length


def lr_lambda(warmup: int, total: int, min_ratio: float):
    """Linear warmup, then linear decay to ``min_ratio`` of the peak (``schedule=linear``, today's expressions)."""

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return max(min_ratio, 1.0 - (1.0 - min_ratio) * progress)

    return factor


def _cooled(value: float, t: int, start: int, length: int, m: float) -> float:
    """Linear from ``value`` (at update ``start``) to ``m`` at update ``start + length - 1``."""
    return value - (value - m) * (t - start + 1) / length


Shape = Callable[[TrainerConfig, int, int, int, int], float]
"""``shape(cfg, time_step, t, total, warmup)``: the factor of update ``t >= warmup`` of ``total`` (the linear
warmup before it is the same for every schedule)."""

SHAPES: dict[str, Shape] = {}


def register_schedule(name: str):
    """Decorator: ``shape(cfg, time_step, t, total, warmup)`` becomes the schedule ``trainer.schedule=name``
    (also ``trainer.step0_schedule``); the config accepts the name from then on."""

    def decorate(fn: Shape) -> Shape:
        SHAPES[name] = fn
        if name not in {m.value for m in Schedule}:
            REGISTERED_SCHEDULES.add(name)
        return fn

    return decorate


@register_schedule(Schedule.linear.value)
def _linear(cfg, time_step, t, total, warmup):
    return lr_lambda(warmup, total, cfg.min_lr_ratio)(t)


@register_schedule(Schedule.cosine.value)
def _cosine(cfg, time_step, t, total, warmup):
    m = cfg.min_lr_ratio
    progress = min(1.0, (t - warmup) / max(1, total - warmup))
    return m + (1.0 - m) * 0.5 * (1.0 + math.cos(math.pi * progress))


@register_schedule(Schedule.constant.value)
def _constant(cfg, time_step, t, total, warmup):
    return 1.0


@register_schedule(Schedule.wsd.value)
def _wsd(cfg, time_step, t, total, warmup):
    start, length = cooldown_start(cfg, total)
    return 1.0 if t < start else _cooled(1.0, t, start, length, cfg.min_lr_ratio)


@register_schedule(Schedule.rsqrt.value)
def _rsqrt(cfg, time_step, t, total, warmup):
    def rsqrt(i: int) -> float:
        return min(1.0, math.sqrt(max(1, cfg.warmup_steps) / (i + 1)))

    start, length = cooldown_start(cfg, total)
    return rsqrt(t) if t < start else _cooled(rsqrt(start), t, start, length, cfg.min_lr_ratio)


@register_schedule(Schedule.infinite.value)
def _infinite(cfg, time_step, t, total, warmup):
    start, length = cooldown_start(cfg, total)
    c = cfg.constant_lr_ratio
    if time_step == 0 and t < start:  # the one decay from the peak to the constant, after the one warmup
        progress = (t - warmup) / max(1, start - warmup)
        return c + (1.0 - c) * 0.5 * (1.0 + math.cos(math.pi * progress))
    return c if t < start else _cooled(c, t, start, length, cfg.min_lr_ratio)


WARMUP_MAX_SHARE = 0.5
"""The warmup of a time step spans at most this share of its planned updates (``trainer=gpu`` plans ~4 updates
per later step on 8 GPUs against ``warmup_steps=100``: unclamped, the LR would peak at 4 % of ``lr``)."""
SHORT_BUDGET = 0.1
"""A token budget under this share of one pass over the step's rows gets a warning."""


def warmup_updates(cfg: TrainerConfig, time_step: int, total: int) -> int:
    """The warmup updates of time step ``time_step`` of ``total`` planned updates: ``trainer.warmup_steps`` (where
    the step warms up), clamped to :data:`WARMUP_MAX_SHARE` of ``total`` (at least one)."""
    if not warms_up(cfg, time_step):
        return 0
    return min(cfg.warmup_steps, max(1, int(WARMUP_MAX_SHARE * total)))


def log_warmup(cfg: TrainerConfig, time_step: int, total: int) -> None:
    """The log line of a clamped warmup."""
    warmup = warmup_updates(cfg, time_step, total)
    if warms_up(cfg, time_step) and warmup < cfg.warmup_steps:
        log.info(
            "time step %d: warmup clamped to %d updates (trainer.warmup_steps=%d; %d planned updates, at most "
            "%.0f%% of them warm up)",
            time_step,
            warmup,
            cfg.warmup_steps,
            total,
            100 * WARMUP_MAX_SHARE,
        )


def warn_short_budget(time_step: int, budget: int, corpus_tokens: int) -> None:
    """Warn when a token budget covers far less than one pass over the step's rows."""
    if corpus_tokens and budget < SHORT_BUDGET * corpus_tokens:
        log.warning(
            "time step %d: the token budget (%d tokens) covers %.1f%% of one pass over the step's %d tokens; "
            "most of its rows are never trained on",
            time_step,
            budget,
            100 * budget / corpus_tokens,
            corpus_tokens,
        )


def shape(cfg: TrainerConfig, time_step: int, t: int, total: int) -> float:
    """The factor of update ``t`` of ``total`` within time step ``time_step`` (before the peak)."""
    kind = str(schedule_of(cfg, time_step))
    warmup = warmup_updates(cfg, time_step, total)
    if kind not in SHAPES:
        raise ValueError(f"unknown trainer.schedule {kind!r}")
    if t < warmup:
        return (t + 1) / warmup
    return SHAPES[kind](cfg, time_step, t, total, warmup)


def lr_factor(cfg: TrainerConfig, time_step: int, total: int, n_time_steps: int) -> Callable[[int], float]:
    """``t -> lr(t) / trainer.lr`` for the ``total`` updates of time step ``time_step`` of ``n_time_steps``
    (for ``torch.optim.lr_scheduler.LambdaLR``)."""
    top = peak(cfg, time_step, n_time_steps)
    log_warmup(cfg, time_step, total)

    def factor(t: int) -> float:
        value = shape(cfg, time_step, t, total)
        return value if top == 1.0 else top * value

    return factor


def lr_at(cfg: TrainerConfig, time_step: int, optimizer_step: int, total: int, n_time_steps: int) -> float:
    """The learning rate of update ``optimizer_step`` (0-based) of time step ``time_step``."""
    return cfg.lr * lr_factor(cfg, time_step, total, n_time_steps)(optimizer_step)
