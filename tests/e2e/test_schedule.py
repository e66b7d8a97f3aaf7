"""LR schedules across time steps (training/schedule.py): closed forms at chosen updates, the loop's use of them,
and kill-and-resume mid-step for ``wsd`` and ``infinite``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers.faults import Boom, crash_at
from helpers import tiny_cfg
from safetensors.torch import load_file

from evolve_train.config import TrainerConfig
from evolve_train.run import train
from evolve_train.training import faults
from evolve_train.training.schedule import lr_at
from evolve_train.training.train_state import list_states


FAST = ["eval.evaluators=[splits]", "trainer.num_threads=1"]


STEP0_UPDATES = 21  # tiny config: step 0 trains 21 optimizer steps (5 % of its corpus held out as the slice)


def rows(path: Path) -> list[dict]:
    drop = {"train_seconds", "eval_seconds", "seconds", "train_tokens_per_s", "tokens_per_s", "peak_mem_gb", "mfu"}
    return [{k: v for k, v in json.loads(line).items() if k not in drop} for line in path.read_text().splitlines()]


@pytest.mark.parametrize("schedule", ["wsd", "infinite"])
def test_kill_and_resume_mid_step_is_bitwise_identical(tmp_path, monkeypatch, schedule):
    threads = torch.get_num_threads()
    monkeypatch.setattr(faults, "_arrivals", {})
    settings = [
        *FAST,
        f"trainer.schedule={schedule}",
        "trainer.cooldown_fraction=0.5",
        "trainer.warmup_steps=4",
        "trainer.constant_lr_ratio=0.5",
        "trainer.log_every=1",
    ]
    reference = tmp_path / "reference"
    train(tiny_cfg(reference, *settings))
    run_dir = tmp_path / "run"
    crash_at(monkeypatch, "optimizer_step", STEP0_UPDATES + 7)  # step 1, update 7: inside the cooldown
    with pytest.raises(Boom):
        train(tiny_cfg(run_dir, *settings, "trainer.save_every_n_steps=3"))
    assert [(s, o) for s, o, _ in list_states(run_dir)] == [(1, 3), (1, 6)]  # it resumes from update 6 of step 1
    monkeypatch.undo()
    monkeypatch.setattr(faults, "_arrivals", {})
    train(tiny_cfg(run_dir, *settings, "trainer.save_every_n_steps=3"))
    torch.set_num_threads(threads)
    assert rows(run_dir / "train_log.jsonl") == rows(reference / "train_log.jsonl")
    assert [r for r in rows(run_dir / "metrics.jsonl") if r.get("group") != "timing"] == [
        r for r in rows(reference / "metrics.jsonl") if r.get("group") != "timing"
    ]
    for step in range(3):
        a = load_file(str(reference / "steps" / str(step) / "model.safetensors"))
        b = load_file(str(run_dir / "steps" / str(step) / "model.safetensors"))
        assert all(torch.equal(a[k], b[k]) for k in a), step
    # the logged LR (after update n: the LR of update n, 0-based) is the schedule's closed form
    cfg = TrainerConfig(
        lr=2e-3, warmup_steps=4, min_lr_ratio=0.1, schedule=schedule, cooldown_fraction=0.5, constant_lr_ratio=0.5
    )
    log = rows(run_dir / "train_log.jsonl")
    for row in log:
        total = STEP0_UPDATES if row["time_step"] == 0 else 12
        assert row["lr"] == pytest.approx(lr_at(cfg, row["time_step"], row["optimizer_step"], total, 3), rel=1e-9)
    second = next(r["lr"] for r in log if r["time_step"] == 1 and r["optimizer_step"] == 2)
    assert second == pytest.approx(2e-3 * (3 / 4 if schedule == "wsd" else 0.5))  # wsd re-warms, infinite not
