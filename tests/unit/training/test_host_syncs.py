"""Host syncs of the training loop: the project's own code reads device values back at most once per
``trainer.log_every`` optimizer steps, plus a bounded number per time step (docs/training.md, "Host syncs").

A read is any call of a tensor conversion (``item``, ``tolist``, ``cpu``, ``numpy``, ``bool()``, ``float()``,
``int()``, ``__index__``, ``__format__``, ``__array__``) made from a frame inside the ``evolve_train`` package
while a time step trains; torch's and transformers' own internals are not counted. On a GPU every one of them
waits for the device. The loop has no CPU-only branch that reads where a GPU would not, so the CPU run counts
what a GPU run makes.
"""

from __future__ import annotations

import math
import sys
from collections import defaultdict
from pathlib import Path

import pytest
import torch

import evolve_train
from evolve_train.run import train
from evolve_train.training import loop
from evolve_train.training.loss import global_mean_scale, loss_token_count
from helpers import read_jsonl, tiny_cfg

PACKAGE = str(Path(evolve_train.__file__).resolve().parent)
CONVERSIONS = (
    "item",
    "tolist",
    "cpu",
    "numpy",
    "__bool__",
    "__float__",
    "__int__",
    "__index__",
    "__format__",
    "__array__",
)
LOG_EVERY = 4
PER_TIME_STEP = 2
"""Reads a time step may make besides one per log row (the end-of-step read and a due state's)."""


class SyncCounter:
    """Records the conversions the project's code makes, per time step, while the step trains."""

    def __init__(self) -> None:
        self.step: int | None = None
        self.calls: dict[int, list[str]] = defaultdict(list)
        self.updates: dict[int, int] = {}

    def install(self, monkeypatch) -> None:
        for name in CONVERSIONS:
            monkeypatch.setattr(torch.Tensor, name, self._counted(name, getattr(torch.Tensor, name)))
        run = loop.StepTrainer.run

        def counted_run(trainer) -> None:
            self.step = trainer.step
            try:
                run(trainer)
            finally:
                self.step = None
            self.updates[trainer.step] = trainer.progress.optimizer_steps

        monkeypatch.setattr(loop.StepTrainer, "run", counted_run)

    def _counted(self, name: str, original):
        def conversion(tensor, *args, **kwargs):
            if self.step is not None:
                caller = sys._getframe(1)
                if caller.f_code.co_filename.startswith(PACKAGE):
                    where = caller.f_code.co_filename[len(PACKAGE) + 1 :]
                    self.calls[self.step].append(f"{name} in {where}:{caller.f_lineno}")
            return original(tensor, *args, **kwargs)

        return conversion


@pytest.mark.parametrize("mode", ["stop", "skip"])
def test_a_tiny_run_reads_the_device_once_per_log_row_and_a_few_times_per_time_step(tmp_path, monkeypatch, mode):
    counter = SyncCounter()
    counter.install(monkeypatch)
    run_dir = tmp_path / "run"
    train(
        tiny_cfg(
            run_dir,
            "eval.evaluators=[splits]",
            f"trainer.log_every={LOG_EVERY}",
            f"trainer.nonfinite={mode}",
            "trainer.save_every_n_steps=0",
        )
    )
    assert set(counter.updates) == {0, 1, 2}
    rows = read_jsonl(run_dir / "train_log.jsonl")
    for step, updates in counter.updates.items():
        allowed = math.ceil(updates / LOG_EVERY) + PER_TIME_STEP
        calls = counter.calls[step]
        assert len(calls) <= allowed, f"time step {step}: {len(calls)} reads for {updates} updates: {calls}"
        assert len([r for r in rows if r["time_step"] == step]) == math.ceil(updates / LOG_EVERY)
    assert all(math.isfinite(r["loss"]) for r in rows)  # the rows still carry the loss read at their step


def test_the_global_token_mean_scale_stays_on_the_device_and_is_exact(monkeypatch):
    counter = SyncCounter()
    counter.install(monkeypatch)
    counter.step = 0

    class TwoRanks:  # this rank holds 3 loss tokens, the other 5
        num_processes = 2

        def reduce(self, tensor, reduction):
            assert reduction == "sum"
            return tensor + 5

    labels = torch.tensor([[-100, 1, 2, -100, 3]])
    local = loss_token_count({"labels": labels}, encoder_decoder=False)
    scale = global_mean_scale(local, TwoRanks())
    assert counter.calls[0] == []
    counter.step = None
    assert isinstance(scale, torch.Tensor) and scale.dtype == torch.float64
    assert scale.item() == 3 * 2 / 8
