"""Step and token budgets instead of epochs, a learning rate per method for the later steps, progress lines
without a terminal, and no step that loops without batches."""

import logging
import math

import pytest
from accelerate import Accelerator

from evolve_train.errors import ConfigError
from evolve_train.training.examples import collate
from evolve_train.training.loop import train_time_step
from evolve_train.training.plan import StepPlan
from helpers import deadline
from helpers.methods import PAD, method, one_thread, tiny_gpt2, token_rows, trainer_cfg


def plan(examples, strategies=None, **settings):
    trainer = {k: settings.pop(k) for k in list(settings) if k in ("progress_every_s", "log_every", "grad_accum")}
    return StepPlan(
        step=1,
        trainer=trainer_cfg(**trainer),
        examples=examples,
        epochs=settings.pop("epochs", 2),
        strategies=strategies or method("full"),
        collate=lambda rows: collate(rows, PAD),
        seed=5,
        **settings,
    )


def test_a_step_without_rows_or_without_batches_stops_at_once_with_a_clear_error():
    class NoRows:
        reads_outputs = False

        def extra_loss(self, *args, **kwargs):
            return None

        def forward_parameters(self):
            return 0

        def epoch_rows(self, epoch, n_rows):
            return []  # selects nothing: every epoch would be empty

    empty = token_rows(64, 2, 20, seed=3).select([])
    with one_thread(), deadline(60):
        with pytest.raises(ConfigError, match="time step 1: no training rows"):
            train_time_step(plan(empty), tiny_gpt2(), Accelerator(cpu=True))
        with pytest.raises(RuntimeError, match="time step 1: epoch 0 has no batch"):
            train_time_step(plan(token_rows(64, 2, 20, seed=3), NoRows()), tiny_gpt2(), Accelerator(cpu=True))


def test_without_a_terminal_a_progress_line_follows_every_interval(caplog):
    examples = token_rows(64, 2, 20, seed=3)
    with one_thread(), deadline(120), caplog.at_level(logging.INFO, logger="evolve_train.progress"):
        result = train_time_step(
            plan(examples, progress_every_s=1e-9, n_time_steps=3, log_every=100), tiny_gpt2(), Accelerator(cpu=True)
        )
        lines = [r.getMessage() for r in caplog.records if r.name == "evolve_train.progress"]
        assert len(lines) == result.optimizer_steps == 8  # the interval passed before every update
        assert lines[-1].startswith("time step 1 (2/3): optimizer step 8/8, loss ")
        assert "tokens/s" in lines[-1] and "ETA 0:00:00" in lines[-1]
        losses = [float(line.split("loss ")[1].split(",")[0]) for line in lines]
        assert all(math.isfinite(x) for x in losses)  # the line reads the loss itself, logged or not (log_every)
        caplog.clear()
        train_time_step(plan(examples, progress_every_s=0), tiny_gpt2(), Accelerator(cpu=True))
        assert not [r for r in caplog.records if r.name == "evolve_train.progress"]
