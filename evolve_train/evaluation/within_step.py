"""Within-step evaluation (``eval.within_step_every=N``): the stability gap inside a time step.

Continual learning of LLMs shows a *stability gap* (De Lange et al. 2023; arXiv 2406.14833): accuracy on
old knowledge dips early in a new phase and partly recovers, which an evaluation after each step cannot see.
:class:`WithinStepProbe` evaluates a small fixed probe — ``eval.within_step_items`` items of every split set
the step's checkpoint is evaluated on (the seeded sample of ``eval.max_items_per_set``), greedy EM as the
``splits`` evaluator computes it — before the step's first update and every N optimizer steps.

Each probe is one row of ``train_log.jsonl`` (``group=within_step``, ``time_step``, ``optimizer_step``,
``em``/``n`` per set name): logged through the training log, it is part of the step's resumable state, so a
run killed mid-step and resumed has exactly the rows of an uninterrupted one (no duplicates, none missing).
Greedy generation draws no random numbers and the model goes back to training mode, so the training itself
is the same with or without the probe. In a multi-process run every process evaluates the probe.
"""

from __future__ import annotations

import dataclasses

from evolve_train.config import EvalConfig
from evolve_train.data.timeline import Timeline
from evolve_train.evaluation.context import EvalContext
from evolve_train.evaluation.evaluators.splits import splits_evaluator
from evolve_train.models.text_format import TextFormat

GROUP = "within_step"


class WithinStepProbe:
    """``probe(model, time_step, optimizer_step)`` -> the row; ``every``: optimizer steps between probes."""

    def __init__(self, timeline: Timeline, text_format: TextFormat, cfg: EvalConfig):
        self.timeline, self.text_format, self.every = timeline, text_format, cfg.within_step_every
        self.cfg = dataclasses.replace(cfg, max_items_per_set=cfg.within_step_items, save_predictions=False)

    def __call__(self, model, time_step: int, optimizer_step: int) -> dict:
        ctx = EvalContext(
            timeline=self.timeline,
            checkpoint=time_step,
            cfg=self.cfg,
            model=model,
            text_format=self.text_format,
            writes=False,
        )
        rows = splits_evaluator(ctx)
        return {
            "group": GROUP,
            "time_step": time_step,
            "optimizer_step": optimizer_step,
            "em": {r["set_name"]: r["em"] for r in rows},
            "n": {r["set_name"]: r["n"] for r in rows},
        }
