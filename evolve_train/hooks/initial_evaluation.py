"""The initial model evaluated once per sweep: the runs that share step 0 (and the evaluation settings) copy the
rows and predictions of checkpoint ``initial`` from the sweep's cache (``evaluation/initial_cache.py``: key,
storage); the first run to score it stores them. With several processes the main process reads (the others
receive its rows) and stores."""

from __future__ import annotations

from typing import Optional

from evolve_train.evaluation.evaluators.matrix import INITIAL
from evolve_train.evaluation.initial_cache import InitialEvalCache
from evolve_train.training.hooks import Hook, register_hook


@register_hook("shared_initial_evaluation")
class SharedInitialEvaluation(Hook):
    def __init__(self, cfg):
        self.cache: Optional[InitialEvalCache] = None

    def stored_evaluation(self, evaluation, checkpoint: int):
        self.cache = None
        if checkpoint != INITIAL:
            return None
        accelerator = evaluation.accelerator
        processes = accelerator.num_processes
        self.cache = InitialEvalCache.for_run(evaluation.cfg, evaluation.tokenizer, evaluation.timeline, processes)
        return self.cache.load(evaluation.run_dir, accelerator) if self.cache is not None else None

    def on_scored(self, evaluation, checkpoint: int, rows, seconds: float, evaluated: dict) -> None:
        if self.cache is not None and checkpoint == INITIAL and evaluation.main:  # predictions: the main's
            self.cache.store(evaluation.run_dir, rows, seconds, evaluated)
        self.cache = None
