"""The oracle (``method=oracle``, ``experiment=oracle``): for each time step k, train from the initial weights on
the union of the corpora of steps 0..k, with the same settings, and evaluate it on the same sets.

What the regret aggregates of shared/METRICS.md §9 compare a continual run against, and a compute reference
(§11): each oracle step trains like step 0 (``trainer.epochs_step0`` passes, step 0's LR curve: its warmup and peak,
whatever ``trainer.rewarm`` / ``peak_schedule``) on a
corpus that grows with k, so its ``train_tokens`` and optimizer steps per step, in every metrics row, are what
"matches the oracle at x times less compute" divides by. Step 0 is the ordinary step 0 (shared through the
step-0 cache in a sweep). The initial weights are rebuilt exactly as the run built them before step 0
(the same seed; or the pretrained model loaded again): ``run.py``, ``ContinualRun._initial_weights``.
"""

from __future__ import annotations

import logging

from evolve_train.methods.base import Strategy, register_strategy

log = logging.getLogger(__name__)


@register_strategy("oracle")
class Oracle(Strategy):
    def from_initial(self, step: int) -> bool:
        return step > 0

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
