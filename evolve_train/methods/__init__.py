"""Continual-learning methods as strategies of the one training loop."""

from evolve_train.methods import freeze, full, lora, regularizers, replay  # noqa: F401  (register)
from evolve_train.methods.base import Method, Strategy, register_strategy
from evolve_train.methods.history import TokenizedHistory

__all__ = ["Method", "Strategy", "TokenizedHistory", "register_strategy"]
