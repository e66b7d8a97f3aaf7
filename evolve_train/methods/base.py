"""The strategy interface: how a continual-learning method plugs into the one training loop.

A method is a list of strategies (``method.strategies``). Each strategy may wrap or freeze the
model before a time step, change the step's training examples, add a loss term, and act after the
step. Every hook has a do-nothing default, so a strategy implements only what it changes.

Order of the hooks at time step k (``run.py`` and ``training/loop.py``)::

    plan_step(plan)                       change the step's plan (``training/plan.py``: epochs, LR, where the
                                          weights start; the oracle: from the initial weights, step 0's curve)
    mix_examples(k, examples, history)    history: earlier steps' tokenized examples (methods/history.py)
    prepare_model(model, k)               the model entering step k holds step k-1's weights
    per epoch e:  epoch_rows(e, n_rows)   rows of the (mixed) examples used in epoch e (None = all)
    per micro-batch: extra_loss(model, optimizer_step), batch_loss(model, batch, outputs, optimizer_step)
    after_step(model, k, examples)        must return a plain transformers model (it is checkpointed)
    saves_weights(k)                      whether the checkpoint holds the full weights
    save_extra(model, <checkpoint dir>)   load_extra(model, <last checkpoint dir>) on resume

Step 0 is method-independent (plain full training) unless ``method.at_step0`` is set: see
``Method.at_step`` (``methods/method.py``, which applies a method's strategies in order).
"""

from __future__ import annotations

from typing import Callable, Optional

import torch

from evolve_train.config import MethodConfig
from evolve_train.training.plan import StepPlan


class Strategy:
    name = "base"

    def __init__(self, cfg: MethodConfig):
        self.cfg = cfg

    @classmethod
    def check_config(cls, cfg) -> None:
        """Refuse, with a ``ConfigError`` naming the keys, a run config (``evolve_train.config.Config``) this
        strategy cannot train under; called before anything is written."""

    def plan_step(self, plan: StepPlan) -> StepPlan:
        """The step's plan as this strategy changes it (``dataclasses.replace``); the default keeps it."""
        return plan

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

    def batch_loss(self, model: torch.nn.Module, batch: dict, outputs, optimizer_step: int) -> Optional[torch.Tensor]:
        """A term added at every micro-batch that reads the batch and the model's outputs on it (``outputs.logits``,
        computed once by the loop's forward), e.g. distillation (``lwf``)."""
        return None

    def forward_parameters(self) -> int:
        """Parameters of the extra forward pass this strategy runs on every training token (LwF's teacher):
        ``2 ·`` this per token is added to the step's training FLOPs (docs/metrics.md#11-compute)."""
        return 0

    def epoch_rows(self, epoch: int, n_rows: int) -> Optional[list[int]]:
        """Indices of the step's examples trained on in ``epoch`` (``None``: all of them)."""
        return None

    def after_step(self, model: torch.nn.Module, step: int, examples) -> torch.nn.Module:
        """After a time step's training, before its checkpoint is saved."""
        return model

    def save_extra(self, model: torch.nn.Module, directory) -> None:
        """Write method-specific files (e.g. adapters) into the step's checkpoint directory."""

    def saves_weights(self, step: int) -> bool:
        """Whether ``steps/<step>`` holds the model's full weights (``False``: :meth:`save_extra` writes what
        rebuilds them, e.g. a LoRA adapter). The same answer on every process."""
        return True

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
