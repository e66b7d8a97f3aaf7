"""``trainer.optimizer_state=keep``: AdamW's moments carry from step k-1 into step k and survive a resume."""

from __future__ import annotations

import pytest
import torch
from helpers import tiny_cfg
from safetensors.torch import load_file

from evolve_train.run import train
from evolve_train.training import carry, faults
from evolve_train.training.loop import StepTrainer

FAST = ["eval.evaluators=[splits]", "trainer.num_threads=1"]


class Boom(Exception):
    pass


def moments(trainer) -> dict[str, torch.Tensor]:
    """The optimizer's state by parameter name, read straight from ``torch.optim.AdamW.state``."""
    optimizer = getattr(trainer.optimizer, "optimizer", trainer.optimizer)
    return {
        f"{name}/{key}": value.detach().clone()
        for name, p in trainer.unwrapped.named_parameters()
        for key, value in optimizer.state.get(p, {}).items()
    }


@pytest.fixture
def recorded(monkeypatch):
    """``{"start": {step: moments}, "end": {step: moments}}`` of every time step the loop trains."""
    seen = {"start": {}, "end": {}}
    begin, run = StepTrainer.begin, StepTrainer.run

    def recording_begin(self, *args, **kwargs):
        begin(self, *args, **kwargs)
        seen["start"][self.step] = moments(self)

    def recording_run(self):
        run(self)
        seen["end"][self.step] = moments(self)

    monkeypatch.setattr(StepTrainer, "begin", recording_begin)
    monkeypatch.setattr(StepTrainer, "run", recording_run)
    monkeypatch.setattr(faults, "_arrivals", {})
    threads = torch.get_num_threads()
    yield seen
    torch.set_num_threads(threads)


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_keep_starts_each_step_with_the_moments_the_previous_step_ended_with(tmp_path, recorded):
    train(tiny_cfg(tmp_path / "keep", *FAST, "trainer.optimizer_state=keep"))
    start, end = recorded["start"], recorded["end"]
    assert start[0] == {}  # step 0: a fresh AdamW
    for step in (1, 2):
        assert start[step] and same(start[step], end[step - 1]), step
        assert not same(end[step], end[step - 1])  # and it trained on from there
    assert start[1]["transformer.wte.weight/step"].item() == 21  # step 0's 21 updates: bias correction goes on
    # between steps the state lives in train_state/carry/<k>/; once step 2 is evaluated only its own is left
    assert sorted(p.name for p in (tmp_path / "keep" / "train_state" / "carry").iterdir()) == ["2"]


def test_reset_starts_every_step_with_a_fresh_optimizer(tmp_path, recorded):
    train(tiny_cfg(tmp_path / "reset", *FAST))
    assert recorded["start"] == {0: {}, 1: {}, 2: {}}
    assert not (tmp_path / "reset" / "train_state" / "carry").exists()


def test_the_carried_moments_survive_a_resume_between_steps(tmp_path, recorded, monkeypatch):
    settings = [*FAST, "trainer.optimizer_state=keep"]
    reference = tmp_path / "reference"
    train(tiny_cfg(reference, *settings))
    run_dir = tmp_path / "run"
    calls = {"n": 0}

    def point(where):
        if where == "evaluate":
            calls["n"] += 1
            if calls["n"] == 2:  # step 1's evaluation: the rerun evaluates step 1 and trains step 2 from carry/1
                raise Boom(where)

    monkeypatch.setattr(faults, "point", point)
    with pytest.raises(Boom):
        train(tiny_cfg(run_dir, *settings))
    end_of_step1 = recorded["end"][1]
    on_disk = load_file(str(carry.carry_dir(run_dir, 1) / carry.OPTIMIZER_FILE))
    assert same(on_disk, end_of_step1)
    monkeypatch.setattr(faults, "point", lambda where: None)
    recorded["start"].clear()
    train(tiny_cfg(run_dir, *settings))
    assert list(recorded["start"]) == [2]  # a new process would read the same files: step 1 is not trained again
    assert same(recorded["start"][2], end_of_step1)
    for step in range(3):  # and the resumed run ends where the uninterrupted one did
        a = load_file(str(reference / "steps" / str(step) / "model.safetensors"))
        b = load_file(str(run_dir / "steps" / str(step) / "model.safetensors"))
        assert all(torch.equal(a[k], b[k]) for k in a), step


def test_optimizer_state_is_part_of_the_run_identity(tmp_path):
    from omegaconf import OmegaConf

    from evolve_train.training.identity import result_config, run_tag

    keep = result_config(OmegaConf.to_object(tiny_cfg(tmp_path, "trainer.optimizer_state=keep")))
    assert keep["trainer.optimizer_state"] == "keep"
    assert run_tag(["trainer.optimizer_state=keep"]) != ""  # a run dir of its own
