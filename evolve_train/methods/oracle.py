"""The oracle (``method=oracle``, ``experiment=oracle``): for each time step k, train from the initial weights on
the union of the corpora of steps 0..k, with the same settings, and evaluate it on the same sets.

What the regret aggregates of docs/metrics.md#9-time-sliced-perplexity compare a continual run against, and a compute reference
(§11): each oracle step trains like step 0 (``trainer.epochs_step0`` passes, step 0's LR curve: its warmup and peak,
whatever ``trainer.rewarm`` / ``peak_schedule``) on a
corpus that grows with k, so its ``train_tokens`` and optimizer steps per step, in every metrics row, are what
"matches the oracle at x times less compute" divides by. Step 0 is the ordinary step 0 (shared through the
step-0 cache in a sweep). The initial weights are rebuilt exactly as the run built them before step 0
(the same seed; or the pretrained model loaded again): ``run.py``, ``ContinualRun.initial_weights``. All of that
is the oracle's step plan (:meth:`Oracle.plan_step`); the run and the loop only follow plans.
"""

from __future__ import annotations

import dataclasses
import logging

from evolve_train.errors import ConfigError
from evolve_train.methods.base import Strategy, register_strategy

log = logging.getLogger(__name__)


@register_strategy("oracle")
class Oracle(Strategy):
    @classmethod
    def check_config(cls, cfg) -> None:
        if cfg.data.keep_history:
            raise ConfigError(
                "method.strategies: 'oracle' trains on the union of the corpora of steps 0..k itself; "
                "with data.keep_history=true every earlier corpus would count twice (set it false)"
            )

    def plan_step(self, plan):
        """Step k >= 1: retrain from the initial weights, with step 0's epochs (or budgets), LR and LR curve."""
        if plan.step == 0:
            return plan
        trainer = plan.trainer
        return dataclasses.replace(
            plan,
            from_initial=True,
            epochs=trainer.epochs_step0,
            max_steps=trainer.max_steps_step0,
            max_tokens=trainer.tokens_per_step0,
            lr=trainer.lr,
            schedule_step=0,
        )

    def mix_examples(self, step, examples, history):
        if step == 0 or len(history) == 0:
            return examples
        from datasets import concatenate_datasets

        columns = examples.column_names
        earlier = [history[i].select_columns(columns).cast(examples.features) for i in range(len(history))]
        union = concatenate_datasets([*earlier, examples])
        log.info(
            "oracle (step %d): training from the initial weights on the union of steps 0..%d (%d examples)",
            step,
            step,
            len(union),
        )
        return union
