"""The evaluators by name: each module of ``evaluation/evaluators`` registers its own with ``register_evaluator``
when imported (``evaluation/evaluator.py`` imports them all, so every name is known before a config is checked)."""

from __future__ import annotations

from typing import Callable

from evolve_train.evaluation.context import EvalContext

Evaluator = Callable[[EvalContext], list[dict]]
EVALUATORS: dict[str, Evaluator] = {}


QA_ITEMS = "qa_items"
"""Need: the timeline's QA items (``data.eval_files``, or a data source with questions)."""
SLICES = "slices"
"""Need: a held-out slice of some step's corpus (``data.heldout_share`` > 0 and a step of two or more examples)."""
HELDOUT_TEXT = "heldout_text"
"""Need: a held-out text to score (``eval.heldout_text``)."""
LM_EVAL_TASKS = "lm_eval_tasks"
"""Need: lm-evaluation-harness tasks (``eval.lm_eval.tasks``)."""
NEEDS: dict[str, tuple[str, ...]] = {}
"""Evaluator name -> what it needs of the data and the config (``evaluation/needs.py`` picks the evaluators whose
needs are met)."""

PREFLIGHTS: dict[str, Callable] = {}
"""Evaluator name -> ``fn(cfg, timeline)``: checks of its inputs (files it will read), run before any training
when the evaluator is listed; a bad input raises ``ConfigError``/``DataError`` naming the file and field."""


def register_evaluator(name: str, preflight: Callable | None = None, needs: tuple[str, ...] = (QA_ITEMS,)):
    """Decorator: ``fn(ctx) -> rows`` becomes the evaluator listed as ``name`` in ``eval.evaluators``;
    ``preflight(cfg, timeline)``, if given, checks its inputs before training; ``needs`` (of :data:`QA_ITEMS`,
    :data:`SLICES`, :data:`HELDOUT_TEXT`, :data:`LM_EVAL_TASKS`) is what it cannot run without."""

    def decorate(fn: Evaluator) -> Evaluator:
        EVALUATORS[name] = fn
        NEEDS[name] = tuple(needs)
        if preflight is not None:
            PREFLIGHTS[name] = preflight
        return fn

    return decorate
