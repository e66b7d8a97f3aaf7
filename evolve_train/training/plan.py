"""What one time step trains: the :class:`StepPlan` a method makes (``methods/method.py``: ``Method.plan``) and
the one loop reads (``training/loop.py``), and the :class:`StepResult` the loop returns.

A plan says *what* the step trains on and how hard: its tokenized rows (mixed by the method), the passes over
them, the learning rate and whose LR curve it runs, where the weights start (the previous checkpoint, or the
run's initial weights for a retrain), and the method's strategies, which add losses and may select rows per
epoch (:class:`StepStrategies`). How the loop trains (batching, accumulation, clipping) is the trainer config the
plan carries; what happens *around* the step (caches, carried state, probes, averaging) is a run hook
(``training/hooks.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Protocol

import torch

from evolve_train.config import TrainerConfig


class StepStrategies(Protocol):
    """What the loop asks of a method's strategies (``methods.Method`` implements it)."""

    reads_outputs: bool
    """Whether an extra loss reads the loop's forward outputs (the full head is then computed)."""

    def extra_loss(self, model, optimizer_step: int, batch=None, outputs=None) -> Optional[torch.Tensor]: ...

    def forward_parameters(self) -> int: ...

    def epoch_rows(self, epoch: int, n_rows: int) -> Optional[list[int]]: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


class PlainStrategies:
    """No strategy: plain training on every row (the default of a plan built by hand)."""

    reads_outputs = False

    def extra_loss(self, model, optimizer_step, batch=None, outputs=None):
        return None

    def forward_parameters(self) -> int:
        return 0

    def epoch_rows(self, epoch, n_rows):
        return None

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


@dataclass
class StepPlan:
    """One time step's training, as the method plans it."""

    step: int
    trainer: TrainerConfig
    """How the loop trains: batching, accumulation, clipping, warmup, logging (``trainer.*``)."""
    examples: Any = None
    """The step's tokenized rows after the method's mixing (set by the run before training)."""
    epochs: float = 1.0
    """Passes over ``examples`` (unless a budget below is set)."""
    max_steps: int = 0
    """A budget of optimizer steps instead of ``epochs`` (0: off)."""
    max_tokens: int = 0
    """A budget of training tokens (real tokens of all processes) instead of ``epochs`` (0: off); with
    ``max_steps`` too, the smaller plan wins."""
    lr: Optional[float] = None
    """Peak learning rate of the step (``None``: ``trainer.lr``)."""
    schedule_step: Optional[int] = None
    """Whose LR curve the step runs (``training/schedule.py``; ``None``: ``step``; a retrain runs step 0's)."""
    n_time_steps: int = 1
    seed: int = 0
    """Seed of the step's data order."""
    from_initial: bool = False
    """Whether the step starts from the run's initial weights instead of the previous checkpoint."""
    strategies: StepStrategies = None  # type: ignore[assignment]
    """The method's strategies at this step: extra losses, rows per epoch (``None``: plain training)."""
    collate: Optional[Callable[[list], dict]] = None
    """Rows -> a padded batch (the text format's; set by the run)."""

    def __post_init__(self):
        if self.strategies is None:
            self.strategies = PlainStrategies()
        if self.lr is None:
            self.lr = self.trainer.lr
        if self.schedule_step is None:
            self.schedule_step = self.step


@dataclass
class StepResult:
    optimizer_steps: int
    tokens: int
    final_loss: float
    seconds: float
    skipped_batches: int = 0
    tokens_per_s: float = 0.0
    """Real (non-padding) tokens of all processes trained by this attempt at the step, per second of it."""
    loss_tokens: int = 0
    """Of ``tokens``, the positions with a label (docs/metrics.md#11-compute)."""
    flops: float = 0.0
    """Training FLOPs estimate of the step (``telemetry.training_flops``)."""
    extra: dict = field(default_factory=dict)
    """Fields a hook adds to the checkpoint's metric rows (the general mix's and generative replay's counts)."""


BUDGET_KEYS = ("max_steps_step0", "max_steps", "tokens_per_step0", "tokens_per_step")


def training_budget(trainer) -> dict:
    """The step and token budgets that replace epochs (``trainer.max_steps*``, ``trainer.tokens_per_step*``), where
    set; ``{}`` when every step trains its epochs."""
    return {key: getattr(trainer, key) for key in BUDGET_KEYS if getattr(trainer, key, 0)}
