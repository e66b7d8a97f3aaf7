"""``eval.within_step_every=N``: the stability gap inside a time step. A small fixed probe
(``evaluation/within_step.py``) is scored before the step's first update and every N optimizer steps; its rows
go with the training rows (so a resumed step keeps them)."""

from __future__ import annotations

from evolve_train.evaluation.within_step import WithinStepProbe
from evolve_train.training.hooks import Hook, register_hook


@register_hook("within_step_probe")
def within_step_probe(cfg):
    return WithinStepHook() if cfg.eval.within_step_every > 0 else None


class WithinStepHook(Hook):
    def on_run_start(self, run) -> None:
        self.probe = WithinStepProbe(run.timeline, run.text_format, run.cfg.eval)

    def on_train_start(self, trainer) -> None:
        if trainer.progress.optimizer_steps == 0:  # before the first update: the start of the within-step curve
            self._probe(trainer)

    def on_optimizer_step(self, trainer) -> None:
        if trainer.progress.optimizer_steps % self.probe.every == 0:
            self._probe(trainer)

    def _probe(self, trainer) -> None:
        row = self.probe(trainer.unwrapped, trainer.step, trainer.progress.optimizer_steps)
        trainer.model.train()
        trainer.log(row)
