"""The built-in run hooks (``training/hooks.py``), each a concern that owns its state; importing this package
registers them, in the order they are called:

- ``step0_cache`` (``hooks/step0_cache.py``): a sweep's runs that share step 0 train it once;
- ``shared_initial_evaluation`` (``hooks/initial_evaluation.py``): and evaluate the initial model once;
- ``optimizer_carry`` (``hooks/optimizer_carry.py``): ``trainer.optimizer_state=keep``, AdamW's state across steps;
- ``weight_average`` (``hooks/weight_average.py``): ``method.average``, each checkpoint an average of the steps;
- ``within_step_probe`` (``hooks/within_step.py``): ``eval.within_step_every``, a probe inside each step;
- ``mixing`` (``hooks/mixing.py``): ``data.mix_files`` and ``generative_replay``, rows from outside the timeline.
"""

from evolve_train.hooks import (  # noqa: F401  (registers the hooks, in this order)
    step0_cache,
    initial_evaluation,
    optimizer_carry,
    weight_average,
    within_step,
    mixing,
)
from evolve_train.training.hooks import build_hooks

__all__ = ["build_hooks"]
