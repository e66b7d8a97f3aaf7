"""The evaluators by name: each module of ``evaluation/evaluators`` registers its own with ``register_evaluator``
when imported (``evaluation/evaluator.py`` imports them all, so every name is known before a config is checked)."""

from __future__ import annotations

from typing import Callable

from evolve_train.evaluation.context import EvalContext

Evaluator = Callable[[EvalContext], list[dict]]
EVALUATORS: dict[str, Evaluator] = {}


PREFLIGHTS: dict[str, Callable] = {}
"""Evaluator name -> ``fn(cfg, timeline)``: checks of its inputs (files it will read), run before any training
when the evaluator is listed; a bad input raises ``ConfigError``/``DataError`` naming the file and field."""


def register_evaluator(name: str, preflight: Callable | None = None):
    """Decorator: ``fn(ctx) -> rows`` becomes the evaluator listed as ``name`` in ``eval.evaluators``;
    ``preflight(cfg, timeline)``, if given, checks its inputs before training."""

    def decorate(fn: Evaluator) -> Evaluator:
        EVALUATORS[name] = fn
        if preflight is not None:
            PREFLIGHTS[name] = preflight
        return fn

    return decorate
