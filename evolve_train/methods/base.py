"""The strategy interface: how a continual-learning method plugs into the one training loop.

A method is a list of strategies (``method.strategies``). Each strategy may wrap or freeze the
model before a time step, change the step's training examples, add a loss term, and act after the
step. Every hook has a do-nothing default, so a strategy implements only what it changes.

Order of the hooks at time step k (``run.py`` and ``training/loop.py``)::

    mix_examples(k, examples, history)    history: earlier steps' tokenized examples (methods/history.py)
    prepare_model(model, k)               the model entering step k holds step k-1's weights
    per epoch e:  epoch_rows(e, n_rows)   rows of the (mixed) examples used in epoch e (None = all)
    per micro-batch: extra_loss(model, optimizer_step)
    after_step(model, k, examples)        must return a plain transformers model (it is checkpointed)
    save_extra(model, <checkpoint dir>)   load_extra(model, <last checkpoint dir>) on resume

Step 0 is method-independent (plain full training) unless ``method.at_step0`` is set: see
:meth:`Method.at_step`.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch

from evolve_train.config import MethodConfig


class Strategy:
    name = "base"

    def __init__(self, cfg: MethodConfig):
        self.cfg = cfg

    def prepare_model(self, model: torch.nn.Module, step: int) -> torch.nn.Module:
        """Before training a time step: wrap (adapters) or freeze parts of the model."""
        return model

    def mix_examples(self, step: int, examples, history) -> object:
        """Change the step's tokenized training examples (e.g. mix in earlier steps' data).

        ``history[i]`` is step i's tokenized examples (tokenized on first access); ``history.steps`` the
        raw :class:`~evolve_train.data.timeline.TimeStep` objects.
        """
        return examples

    def extra_loss(self, model: torch.nn.Module, optimizer_step: int) -> Optional[torch.Tensor]:
        """A term added to the language-model loss at every micro-batch."""
        return None

    def epoch_rows(self, epoch: int, n_rows: int) -> Optional[list[int]]:
        """Indices of the step's examples trained on in ``epoch`` (``None``: all of them)."""
        return None

    def after_step(self, model: torch.nn.Module, step: int, examples) -> torch.nn.Module:
        """After a time step's training, before its checkpoint is saved."""
        return model

    def save_extra(self, model: torch.nn.Module, directory) -> None:
        """Write method-specific files (e.g. adapters) into the step's checkpoint directory."""

    def load_extra(self, model: torch.nn.Module, directory) -> None:
        """On resume: read back what :meth:`save_extra` wrote into the last complete checkpoint."""

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


STRATEGIES: dict[str, Callable[[MethodConfig], Strategy]] = {}


def register_strategy(name: str):
    def decorate(cls):
        STRATEGIES[name] = cls
        cls.name = name
        return cls
    return decorate


class Method:
    """The strategies of a method, applied in order."""

    def __init__(self, cfg: MethodConfig):
        from evolve_train.errors import ConfigError
        import evolve_train.methods  # noqa: F401  (registers the built-in strategies)

        unknown = [s for s in cfg.strategies if s not in STRATEGIES]
        if unknown:
            raise ConfigError(f"method.strategies: unknown strategy '{unknown[0]}' "
                              f"(known: {', '.join(sorted(STRATEGIES))})")
        if not cfg.strategies:
            raise ConfigError("method.strategies is empty; use [full] for plain fine-tuning")
        repeated = sorted({s for s in cfg.strategies if list(cfg.strategies).count(s) > 1})
        if repeated:
            raise ConfigError(f"method.strategies lists '{repeated[0]}' more than once")
        if "full" in cfg.strategies and "lora" in cfg.strategies:
            raise ConfigError("method.strategies: 'full' (every weight trains) contradicts 'lora' (only adapters "
                              "train); drop one")
        self.cfg = cfg
        self.strategies = [STRATEGIES[name](cfg) for name in cfg.strategies]
        self._plain = None

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

    def extra_loss(self, model, optimizer_step):
        terms = [t for s in self.strategies if (t := s.extra_loss(model, optimizer_step)) is not None]
        return sum(terms) if terms else None

    def epoch_rows(self, epoch, n_rows):
        """The first strategy's row selection for ``epoch`` (``None``: every row)."""
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

    def load_extra(self, model, directory):
        for strategy in self.strategies:
            strategy.load_extra(model, directory)

    def state_dict(self) -> dict:
        return {s.name: s.state_dict() for s in self.strategies}

    def load_state_dict(self, state: dict) -> None:
        for strategy in self.strategies:
            strategy.load_state_dict(state.get(strategy.name, {}))
