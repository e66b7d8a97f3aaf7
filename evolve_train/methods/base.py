"""The strategy interface: how a continual-learning method plugs into the one training loop.

A method is a list of strategies (``method.strategies``). Each strategy may wrap or freeze the
model before a time step, change the step's training examples, add a loss term, and act after the
step. Every hook has a do-nothing default, so a strategy implements only what it changes.
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

    def mix_examples(self, step: int, examples, history: list) -> object:
        """Change the step's tokenized training examples (e.g. mix in earlier steps' data)."""
        return examples

    def extra_loss(self, model: torch.nn.Module, optimizer_step: int) -> Optional[torch.Tensor]:
        """A term added to the language-model loss at every micro-batch."""
        return None

    def after_step(self, model: torch.nn.Module, step: int, examples) -> torch.nn.Module:
        """After a time step's training, before its checkpoint is saved."""
        return model

    def save_extra(self, model: torch.nn.Module, directory) -> None:
        """Write method-specific files (e.g. adapters) into the step's checkpoint directory."""

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
        self.cfg = cfg
        self.strategies = [STRATEGIES[name](cfg) for name in cfg.strategies]

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

    def after_step(self, model, step, examples):
        for strategy in self.strategies:
            model = strategy.after_step(model, step, examples)
        return model

    def save_extra(self, model, directory):
        for strategy in self.strategies:
            strategy.save_extra(model, directory)

    def state_dict(self) -> dict:
        return {s.name: s.state_dict() for s in self.strategies}

    def load_state_dict(self, state: dict) -> None:
        for strategy in self.strategies:
            strategy.load_state_dict(state.get(strategy.name, {}))
