"""Run hooks: what happens *around* the steps of a run, each concern in one object that owns its state.

A hook overrides the calls it needs; every call has a do-nothing default. ``run`` is the
:class:`~evolve_train.run.ContinualRun` (its ``cfg``, ``model``, ``tokenizer``, ``timeline``, ``run_dir``,
``accelerator``, ``start``, ``main``), ``trainer`` the loop's :class:`~evolve_train.training.loop.StepTrainer`
(``model``, ``optimizer``, ``unwrapped``, ``progress``, ``step``, ``log(row)``), ``evaluation`` the run's
:class:`~evolve_train.evaluation.checkpoints.CheckpointEvaluation`. In the order they are called::

    on_run_start(run)                          after set-up (a resumed run: the model of the last complete step)
    per time step k:
      load_step(run, plan) -> (model, result)  a trained step from elsewhere instead of training (first wins)
      wrap_train_log(run, plan, log_fn)        the step's training rows pass through it
      in the loop: on_optimizer_built(trainer), on_train_start(trainer),
                   on_optimizer_step(trainer) after every update, on_train_end(trainer)
      on_step_trained(run, plan, result)       after training (not after load_step)
      full_weights(run, k) -> bool             the checkpoint must hold full weights (any hook)
      before_save(run, k)                      the weights steps/<k> gets are on the model now
      carried(run, k) -> {file: tensors}       what step k hands to step k+1 besides its checkpoint
    per checkpoint c (-1: the initial model):
      stored_evaluation(evaluation, c)         rows scored elsewhere (first wins), else the evaluators run
      on_scored(evaluation, c, rows, seconds, evaluated)
      after_evaluate(run, c, model)
    state_dict() / load_state_dict(state)      kept in state.json with each checkpoint

Register a hook factory with :func:`register_hook`: it is called with the run's config and returns the hook,
or ``None`` where the config leaves it off. The built-in hooks (``evolve_train/hooks/``) register on import.
"""

from __future__ import annotations

from typing import Callable, Optional


class Hook:
    name = "hook"

    def on_run_start(self, run) -> None:
        pass

    def load_step(self, run, plan):
        return None

    def wrap_train_log(self, run, plan, log_fn: Optional[Callable]) -> Optional[Callable]:
        return log_fn

    def on_optimizer_built(self, trainer) -> None:
        pass

    def on_train_start(self, trainer) -> None:
        pass

    def on_optimizer_step(self, trainer) -> None:
        pass

    def on_train_end(self, trainer) -> None:
        pass

    def on_step_trained(self, run, plan, result) -> None:
        pass

    def full_weights(self, run, step: int) -> bool:
        return False

    def before_save(self, run, step: int) -> None:
        pass

    def carried(self, run, step: int) -> dict:
        return {}

    def stored_evaluation(self, evaluation, checkpoint: int) -> Optional[dict]:
        return None

    def on_scored(self, evaluation, checkpoint: int, rows: list, seconds: float, evaluated: dict) -> None:
        pass

    def after_evaluate(self, run, checkpoint: int, model) -> None:
        pass

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


class Hooks:
    """The hooks of a run, called in registration order."""

    def __init__(self, hooks=()):
        self.hooks: list[Hook] = list(hooks)

    def __iter__(self):
        return iter(self.hooks)

    def call(self, name: str, *args) -> None:
        for hook in self.hooks:
            getattr(hook, name)(*args)

    def first(self, name: str, *args):
        """The first hook's non-``None`` answer to ``name`` (``None`` if every hook declines)."""
        for hook in self.hooks:
            answer = getattr(hook, name)(*args)
            if answer is not None:
                return answer
        return None

    def wrap_train_log(self, run, plan, log_fn):
        for hook in self.hooks:
            log_fn = hook.wrap_train_log(run, plan, log_fn)
        return log_fn

    def full_weights(self, run, step: int) -> bool:
        return any(hook.full_weights(run, step) for hook in self.hooks)

    def carried(self, run, step: int) -> dict:
        files: dict = {}
        for hook in self.hooks:
            files.update(hook.carried(run, step))
        return files

    def state_dict(self) -> dict:
        return {hook.name: state for hook in self.hooks if (state := hook.state_dict())}

    def load_state_dict(self, state: dict) -> None:
        for hook in self.hooks:
            hook.load_state_dict(state.get(hook.name, {}))


HOOKS: dict[str, Callable] = {}
"""name -> factory ``(cfg) -> Hook | None``, in registration order."""


def register_hook(name: str):
    """Register a hook factory (a function of the run's config, or a :class:`Hook` subclass taking it)."""

    def decorate(factory):
        HOOKS[name] = factory
        if isinstance(factory, type):
            factory.name = name
        return factory

    return decorate


def build_hooks(cfg) -> Hooks:
    """The hooks the config turns on, in registration order."""
    hooks = []
    for name, factory in HOOKS.items():
        hook = factory(cfg)
        if hook is not None:
            hook.name = name
            hooks.append(hook)
    return Hooks(hooks)
