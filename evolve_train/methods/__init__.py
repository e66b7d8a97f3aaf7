"""Continual-learning methods as strategies of the one training loop."""

from evolve_train.methods.base import Strategy, register_strategy
from evolve_train.methods.history import TokenizedHistory
from evolve_train.methods.method import Method

__all__ = ["Method", "Strategy", "TokenizedHistory", "register_strategy"]
