"""Continual-learning methods as strategies of the one training loop."""

from evolve_train.methods import full  # noqa: F401
from evolve_train.methods.base import Method, Strategy, register_strategy

__all__ = ["Method", "Strategy", "register_strategy"]
