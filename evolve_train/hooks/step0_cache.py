"""Step 0 trained once per sweep: the runs that share step 0's settings load it from the sweep's step-0 cache
(``training/step0_cache.py``: key, storage) instead of training it; the first run to train it stores it, with its
training rows. With ``trainer.optimizer_state=keep`` step 0 always trains here (the cache holds no optimizer
state), and is still stored for the others."""

from __future__ import annotations

from typing import Optional

from evolve_train.training.hooks import Hook, register_hook
from evolve_train.training.step0_cache import Step0Cache


@register_hook("step0_cache")
class Step0CacheHook(Hook):
    def __init__(self, cfg):
        self.loads = cfg.trainer.optimizer_state != "keep"
        self.cache: Optional[Step0Cache] = None

    def load_step(self, run, plan):
        self.cache = None
        if plan.step != 0:
            return None
        steps0 = run.timeline.steps[0]
        self.cache = Step0Cache.for_run(run.cfg, run.tokenizer, run.accelerator.num_processes, steps0)
        if self.cache is None or not self.loads:
            return None
        return self.cache.load(run.cfg.model, run.accelerator, run.logger.log_train) or None

    def wrap_train_log(self, run, plan, log_fn):
        return self.cache.recording(log_fn) if self.cache is not None and plan.step == 0 else log_fn

    def on_step_trained(self, run, plan, result) -> None:
        if self.cache is not None and plan.step == 0 and run.main:
            self.cache.store(run.model, run.tokenizer, result, trained_by=str(run.run_dir))
