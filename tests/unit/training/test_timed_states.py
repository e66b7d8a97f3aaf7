"""``trainer.save_every_minutes``: a mid-step state once the time passed, read where the processes agree anyway
(training/train_state.py: ``StepStates.after_optimizer_step``), with a fake clock and no training."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from evolve_train.training.train_state import StepStates


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class TwoProcesses:
    """An accelerator of 2 processes whose ``gather`` returns this process's values and the other's."""

    num_processes, device = 2, torch.device("cpu")

    def __init__(self) -> None:
        self.other = torch.zeros(1, 2, dtype=torch.long)
        self.gathers = 0

    def gather(self, tensor: torch.Tensor) -> torch.Tensor:
        self.gathers += 1
        return torch.cat([tensor, self.other])


def states(tmp_path, accelerator, clock: Clock, minutes: float = 1.0, every: int = 0) -> tuple[StepStates, list]:
    saved: list[int] = []
    steps = StepStates(tmp_path, 0, every, 2, accelerator, every_minutes=minutes, clock=clock)
    steps.save = lambda progress, *args, **kwargs: saved.append(progress.optimizer_steps)
    return steps, saved


def step(steps: StepStates, n: int, agree: bool = True) -> None:
    steps.after_optimizer_step(n, 1000, lambda: SimpleNamespace(optimizer_steps=n), None, None, None, agree=agree)


def test_one_process_saves_once_the_minutes_passed_since_the_last_state(tmp_path):
    clock = Clock()
    steps, saved = states(tmp_path, SimpleNamespace(num_processes=1), clock)
    for n, now in enumerate([10, 59, 61, 100, 120, 125, 250], start=1):
        clock.now = now
        step(steps, n)
    assert saved == [3, 6, 7]  # at 61 s, then 61 + 64 s, then 125 + 125 s


def test_several_processes_read_the_clock_only_where_they_agree_anyway(tmp_path):
    clock, accelerator = Clock(), TwoProcesses()
    steps, saved = states(tmp_path, accelerator, clock)
    clock.now = 90
    step(steps, 1, agree=False)  # between logging steps: no gather, no save although the time passed
    assert saved == [] and accelerator.gathers == 0
    step(steps, 2, agree=True)
    assert saved == [2] and accelerator.gathers == 1  # the signal's gather carries the clock's flag
    clock.now = 100
    accelerator.other = torch.tensor([[0, 1]])  # the other process's clock says due, this one's not yet
    step(steps, 3, agree=True)
    assert saved == [2, 3] and accelerator.gathers == 2


def test_off_by_default_and_beside_save_every_n_steps(tmp_path):
    clock = Clock()
    steps, saved = states(tmp_path, SimpleNamespace(num_processes=1), clock, minutes=0, every=4)
    for n in range(1, 9):
        clock.now = 1000.0 * n
        step(steps, n)
    assert saved == [4, 8]
