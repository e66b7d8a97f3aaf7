"""The evaluators by name: each module of ``evaluation/evaluators`` registers its own with ``register_evaluator``
when imported (``evaluation/evaluator.py`` imports them all, so every name is known before a config is checked)."""

from __future__ import annotations

from typing import Callable

from evolve_train.evaluation.context import EvalContext

Evaluator = Callable[[EvalContext], list[dict]]
EVALUATORS: dict[str, Evaluator] = {}


def register_evaluator(name: str):
    """Decorator: ``fn(ctx) -> rows`` becomes the evaluator listed as ``name`` in ``eval.evaluators``."""

    def decorate(fn: Evaluator) -> Evaluator:
        EVALUATORS[name] = fn
        return fn

    return decorate
