"""A continual-learning method: its strategies (``methods/base.py``), looked up by name and applied in order.

Importing this module imports every built-in strategy module, so each has registered its name before a
method is built.
"""

from __future__ import annotations

from evolve_train.config import MethodConfig, TrainerConfig
from evolve_train.errors import ConfigError
from evolve_train.methods import freeze, full, generative, lora, lwf, oracle, regularizers, replay  # noqa: F401  (registers the strategies)
from evolve_train.methods.base import STRATEGIES, Strategy
from evolve_train.training.plan import StepPlan


class Method:
    """The strategies of a method, applied in order."""

    def __init__(self, cfg: MethodConfig):
        unknown = [s for s in cfg.strategies if s not in STRATEGIES]
        if unknown:
            raise ConfigError(
                f"method.strategies: unknown strategy '{unknown[0]}' (known: {', '.join(sorted(STRATEGIES))})"
            )
        if not cfg.strategies:
            raise ConfigError("method.strategies is empty; use [full] for plain fine-tuning")
        repeated = sorted({s for s in cfg.strategies if list(cfg.strategies).count(s) > 1})
        if repeated:
            raise ConfigError(f"method.strategies lists '{repeated[0]}' more than once")
        if "full" in cfg.strategies and "lora" in cfg.strategies:
            raise ConfigError(
                "method.strategies: 'full' (every weight trains) contradicts 'lora' (only adapters train); drop one"
            )
        self.cfg = cfg
        self.strategies = [STRATEGIES[name](cfg) for name in cfg.strategies]
        selecting = [s.name for s in self.strategies if type(s).epoch_rows is not Strategy.epoch_rows]
        if len(selecting) > 1:
            raise ConfigError(
                f"method.strategies: {' and '.join(selecting)} both select the rows of each epoch; keep one"
            )
        self._plain = None

    def add(self, strategy: Strategy) -> None:
        """A strategy the run config turns on outside ``method.strategies`` (the general mix: ``data.mix_files``),
        applied after the named ones; never at a plain step 0 (:meth:`at_step`)."""
        if any(type(s) is type(strategy) for s in self.strategies):
            raise ConfigError(f"method: strategy '{strategy.name}' is already part of the method")
        self.strategies.append(strategy)

    def check_config(self, cfg) -> None:
        """Every strategy's check of the whole run config (``Strategy.check_config``)."""
        for strategy in self.strategies:
            strategy.check_config(cfg)

    def plan(self, step: int, trainer: TrainerConfig, n_time_steps: int, seed: int) -> StepPlan:
        """Time step ``step``'s plan: the strategies of :meth:`at_step`, ``trainer.epochs_step0`` passes at step 0
        and ``trainer.epochs`` after (or their step/token budgets), ``trainer.lr`` (``method.lr`` after step 0), the
        step's own LR curve, data order from ``seed`` and the
        step; then each strategy's ``plan_step`` in order (the oracle retrains from the initial weights)."""
        active = self.at_step(step)
        initial = step == 0
        plan = StepPlan(
            step=step,
            trainer=trainer,
            epochs=trainer.epochs_step0 if initial else trainer.epochs,
            lr=trainer.lr if initial or self.cfg.lr is None else self.cfg.lr,
            max_steps=trainer.max_steps_step0 if initial else trainer.max_steps,
            max_tokens=trainer.tokens_per_step0 if initial else trainer.tokens_per_step,
            n_time_steps=n_time_steps,
            seed=seed + 1000 * step,
        )
        for strategy in active.strategies:
            plan = strategy.plan_step(plan)
        plan.strategies = active
        return plan

    def at_step(self, step: int) -> "Method":
        """The method that trains ``step``: step 0 is plain full training unless ``method.at_step0``.

        A model built from scratch must learn the world before adapters, replay or penalties mean
        anything; a method-independent step 0 is also what lets a sweep share one step-0 checkpoint.
        """
        if step > 0 or self.cfg.at_step0:
            return self
        if self._plain is None:
            from dataclasses import replace

            self._plain = Method(replace(self.cfg, strategies=["full"]))
        return self._plain

    def prepare_model(self, model, step):
        for strategy in self.strategies:
            model = strategy.prepare_model(model, step)
        return model

    def mix_examples(self, step, examples, history):
        for strategy in self.strategies:
            examples = strategy.mix_examples(step, examples, history)
        return examples

    @property
    def reads_outputs(self) -> bool:
        """Whether a strategy's ``batch_loss`` reads the loop's forward outputs (LwF's logits): the loop then
        runs the model's full head instead of the labelled positions only (training/loss.py)."""
        from evolve_train.methods.base import Strategy

        return any(type(s).batch_loss is not Strategy.batch_loss for s in self.strategies)

    def extra_loss(self, model, optimizer_step, batch=None, outputs=None):
        """The strategies' extra terms of a micro-batch (``batch``, ``outputs``: the loop's forward on it)."""
        terms = [t for s in self.strategies if (t := s.extra_loss(model, optimizer_step)) is not None]
        if batch is not None:
            terms += [
                t for s in self.strategies if (t := s.batch_loss(model, batch, outputs, optimizer_step)) is not None
            ]
        return sum(terms) if terms else None

    def forward_parameters(self) -> int:
        """Parameters of the strategies' extra forward passes per training token (``Strategy.forward_parameters``)."""
        return sum(strategy.forward_parameters() for strategy in self.strategies)

    def epoch_rows(self, epoch, n_rows):
        """The row selection for ``epoch`` of the one strategy that selects rows (``None``: every row)."""
        for strategy in self.strategies:
            rows = strategy.epoch_rows(epoch, n_rows)
            if rows is not None:
                return rows
        return None

    def after_step(self, model, step, examples):
        for strategy in self.strategies:
            model = strategy.after_step(model, step, examples)
        return model

    def save_extra(self, model, directory):
        for strategy in self.strategies:
            strategy.save_extra(model, directory)

    def saves_weights(self, step: int) -> bool:
        """Full weights in the checkpoint unless a strategy writes what rebuilds them instead."""
        return all(strategy.saves_weights(step) for strategy in self.strategies)

    def load_extra(self, model, directory):
        for strategy in self.strategies:
            strategy.load_extra(model, directory)

    def state_dict(self) -> dict:
        return {s.name: s.state_dict() for s in self.strategies}

    def load_state_dict(self, state: dict) -> None:
        for strategy in self.strategies:
            strategy.load_state_dict(state.get(strategy.name, {}))
