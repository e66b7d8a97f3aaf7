"""Reliability in process (fast): mid-step states, non-finite guard, Ctrl-C, disk checks, cluster configs.

The end-to-end kill tests (SIGKILL at named points, in subprocesses) are in test_faults.py.
Every resumed run here is compared with an uninterrupted reference run of the same config: metrics rows
(timings aside), training-log rows and the last checkpoint's weights must be *identical* (CPU).
"""

from __future__ import annotations

import errno
import json
import logging
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import GPT2LMHeadModel

from evolve_train.run import train
from evolve_train.training import faults
from evolve_train.training.nonfinite import NonFiniteLossError
from evolve_train.training.train_state import (
    MANIFEST,
    list_states,
)
from helpers import tiny_cfg
from helpers.faults import Boom, FAST, assert_same_as, crash_at, metrics, train_log


# tiny config: step 0 = 21 optimizer steps (7 batches x 3 epochs), steps 1 and 2 = 12 each (6 x 2); each step's
# held-out slice (data.heldout_share=0.05) is not trained on
STEP0_BATCHES = 21


@pytest.fixture(autouse=True)
def fresh_fault_counts(monkeypatch):
    monkeypatch.setattr(faults, "_arrivals", {})
    monkeypatch.delenv(faults.ENV, raising=False)
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)  # trainer.num_threads=1 must not leak into other tests


def test_crash_mid_step_resumes_from_the_newest_complete_state_and_matches(reference, tmp_path, monkeypatch, caplog):
    run_dir = tmp_path / "run"
    crash_at(monkeypatch, "optimizer_step", STEP0_BATCHES + 9)  # step 1, optimizer step 9
    with pytest.raises(Boom):
        train(tiny_cfg(run_dir, *FAST, "trainer.save_every_n_steps=2", "trainer.keep_last_states=2"))
    assert [(s, o) for s, o, _ in list_states(run_dir)] == [(1, 6), (1, 8)]  # the last 2 kept; step 0's pruned
    files = sorted(p.name for p in (run_dir / "train_state" / "step1-opt8").iterdir())
    assert files == ["model.safetensors", "tensors.safetensors", "train_state.json"]  # no pickle

    # plant unusable states that are newer: one without its manifest (written last), one of another plan,
    # and the temporary dir of an interrupted write
    root = run_dir / "train_state"
    shutil.copytree(root / "step1-opt8", root / "step1-opt10")
    (root / "step1-opt10" / MANIFEST).unlink()
    shutil.copytree(root / "step1-opt8", root / "step1-opt11")
    meta = json.loads((root / "step1-opt11" / MANIFEST).read_text())
    meta["fingerprint"]["batch_size"] = 99
    (root / "step1-opt11" / MANIFEST).write_text(json.dumps(meta))
    (root / ".step1-opt12.tmp-1234").mkdir()

    monkeypatch.undo()
    monkeypatch.setattr(faults, "_arrivals", {})
    caplog.set_level(logging.INFO)
    train(tiny_cfg(run_dir, *FAST, "trainer.save_every_n_steps=2", "trainer.keep_last_states=2"))
    log = caplog.text
    assert "step1-opt11" in log and "another plan" in log
    assert "step1-opt10" in log and "no train_state.json" in log
    assert ".step1-opt12.tmp-1234" in log
    assert "resuming time step 1 from the training state" in log and "step1-opt8" in log
    assert_same_as(reference, run_dir)
    assert list_states(run_dir) == []  # finished steps keep no states
    assert not (root / ".step1-opt12.tmp-1234").exists()


def poison_forward(monkeypatch, at_call: int, kind: str = "loss") -> None:
    """The ``at_call``-th training forward returns a NaN loss (``loss``) or a finite loss whose gradient is
    NaN (``gradient``)."""
    original = GPT2LMHeadModel.forward
    calls = {"n": 0}

    def forward(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        if self.training and kwargs.get("labels") is not None:
            calls["n"] += 1
            if calls["n"] == at_call:
                if kind == "loss":
                    out.loss = out.loss * float("nan")
                else:
                    out.loss.register_hook(lambda grad: grad * float("nan"))
        return out

    monkeypatch.setattr(GPT2LMHeadModel, "forward", forward)


@pytest.mark.parametrize("kind, named", [("loss", "non-finite loss (nan)"), ("gradient", "non-finite gradient norm")])
def test_nonfinite_stops_naming_step_batch_and_last_good_checkpoint(reference, tmp_path, monkeypatch, kind, named):
    run_dir = tmp_path / "run"
    poison_forward(monkeypatch, STEP0_BATCHES + 4, kind)  # step 1, epoch 0, batch index 3
    with pytest.raises(NonFiniteLossError) as error:
        train(tiny_cfg(run_dir, *FAST, "trainer.save_every_n_steps=2"))
    message = str(error.value)
    assert named in message
    assert "time step 1, epoch 0, batch 3 of the epoch" in message
    assert str(run_dir / "train_state" / "step1-opt2") in message and str(run_dir / "steps" / "0") in message
    assert json.loads((run_dir / "state.json").read_text())["trained"] == [0]
    assert not (run_dir / "steps" / "1").exists()
    assert [(s, o) for s, o, _ in list_states(run_dir)] == [(1, 2)]  # nothing saved after the bad batch

    monkeypatch.undo()  # the rerun resumes from the last good state and ends as if nothing happened
    train(tiny_cfg(run_dir, *FAST, "trainer.save_every_n_steps=2"))
    assert_same_as(reference, run_dir)


def test_nonfinite_skip_drops_the_update_counts_it_and_trains_on(tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    poison_forward(monkeypatch, STEP0_BATCHES + 4)
    train(tiny_cfg(run_dir, *FAST, "trainer.nonfinite=skip"))
    rows = metrics(run_dir)
    assert {r["checkpoint"]: r["skipped_batches"] for r in rows} == {0: 0, 1: 1, 2: 0}
    step1 = [r for r in train_log(run_dir) if r["time_step"] == 1]
    assert step1[-1]["optimizer_step"] == 12 and step1[-1]["skipped"] == 1  # still the planned 12 updates
    weights = load_file(str(run_dir / "steps" / "2" / "model.safetensors"))
    assert all(torch.isfinite(w).all() for w in weights.values())


def test_ctrl_c_mid_step_saves_a_state_exits_130_and_the_rerun_matches(reference, tmp_path, monkeypatch, caplog):
    run_dir = tmp_path / "run"
    monkeypatch.setenv(faults.ENV, f"optimizer_step:{STEP0_BATCHES + 6}:SIGINT")  # a real SIGINT to this process
    try:
        with pytest.raises(SystemExit) as exit_info:
            train(tiny_cfg(run_dir, *FAST))  # save_every_n_steps=0: Ctrl-C saves a state anyway
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C was not deferred to the end of the optimizer step")
    assert exit_info.value.code == 130
    assert [(s, o) for s, o, _ in list_states(run_dir)] == [(1, 7)]
    assert "resumable state saved to" in caplog.text

    monkeypatch.delenv(faults.ENV)
    caplog.set_level(logging.INFO)
    train(tiny_cfg(run_dir, *FAST))
    assert "step1-opt7" in caplog.text
    assert_same_as(reference, run_dir)


def test_a_full_disk_during_a_checkpoint_leaves_no_half_checkpoint_and_resumes(reference, tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    original = GPT2LMHeadModel.save_pretrained
    calls = {"n": 0}

    def save_pretrained(self, directory, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:  # step 1's checkpoint: half a file, then the disk is full
            (Path(directory) / "model.safetensors").write_bytes(b"\0" * 100)
            raise OSError(errno.ENOSPC, "No space left on device")
        return original(self, directory, *args, **kwargs)

    monkeypatch.setattr(GPT2LMHeadModel, "save_pretrained", save_pretrained)
    with pytest.raises(OSError, match="disk is full"):
        train(tiny_cfg(run_dir, *FAST))
    assert sorted(p.name for p in (run_dir / "steps").iterdir()) == ["0"]  # no steps/1, no .1.tmp-*
    assert json.loads((run_dir / "state.json").read_text())["trained"] == [0]

    monkeypatch.undo()
    train(tiny_cfg(run_dir, *FAST))
    assert_same_as(reference, run_dir)
