"""Evaluation of a checkpoint: the evaluators listed in ``eval.evaluators``, run in order on one
:class:`~evolve_train.evaluation.context.EvalContext`.

Each evaluator takes the context and returns metric rows for ``metrics.jsonl``. Rows carry ``checkpoint``,
``set``, ``set_step`` and a ``group`` naming the evaluator, so readers filter on those keys. The evaluators
live in :mod:`evolve_train.evaluation.evaluators` (one module per group, each registering itself in
:mod:`evolve_train.evaluation.registry`); importing this module imports them all, so every name is known
before a config is checked.
"""

from __future__ import annotations

import time

from evolve_train.config import EvalConfig
from evolve_train.errors import ConfigError
from evolve_train.evaluation import evaluators  # noqa: F401  (registers every evaluator by name)
from evolve_train.evaluation.context import EvalContext
from evolve_train.evaluation.registry import EVALUATORS


def check_evaluators(names: list[str]) -> None:
    unknown = [n for n in names if n not in EVALUATORS]
    if unknown:
        raise ConfigError(f"eval.evaluators: unknown evaluator '{unknown[0]}' (known: {', '.join(sorted(EVALUATORS))})")


def check_eval_config(cfg: EvalConfig) -> None:
    """Checks of ``eval.*`` beyond the schema's own (choices and ranges: ``config.py``): evaluator names and
    time slices, before any training; ConfigError names the key."""
    from evolve_train.data.timestamps import parse_timestamp

    check_evaluators(list(cfg.evaluators))
    for name, bounds in cfg.time_slices.items():
        if len(bounds) != 2:
            raise ConfigError(f"eval.time_slices.{name}: expected [start, end] (null = unbounded), got {list(bounds)}")
        for bound in bounds:
            if bound is not None:
                try:
                    parse_timestamp(str(bound))
                except ValueError as err:
                    raise ConfigError(f"eval.time_slices.{name}: {err}") from None


def evaluate_checkpoint(ctx: EvalContext) -> list[dict]:
    """Run the evaluators in order; the rows, then one ``timing`` row (seconds per evaluator: generation
    shared with an earlier evaluator is counted there; with several processes also ``prompts_per_process``,
    the prompts and options each process answered or scored)."""
    names = list(ctx.cfg.evaluators)
    check_evaluators(names)
    seconds = {}
    for name in names:
        start = time.perf_counter()
        ctx.rows.extend(EVALUATORS[name](ctx))
        seconds[name] = round(time.perf_counter() - start, 3)
    timing = {"group": "timing", "checkpoint": ctx.checkpoint, "set": None, "set_step": None, "seconds": seconds}
    if ctx.shards.count > 1:
        timing["prompts_per_process"] = ctx.shards.done_per_process()
    return ctx.rows + [timing]
