"""Kill-and-resume of a 2-process run (DDP, gloo on CPU): killed in time step 1, the same command resumes to the
metric rows and training-log losses of an uninterrupted 2-process run.

Two kills (``EVOLVE_TRAIN_FAULT``, training/faults.py, set for every rank, so each meets it at the same
optimizer step): SIGKILL of every process (the job killed; the run resumes from the newest mid-step state,
written by the main process, loaded by every rank) and SIGTERM to every rank (what a scheduler sends; the
ranks agree at the next optimizer step, save a state there, and each exits with 143).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import TINY, losses, rows

ROOT = Path(__file__).resolve().parents[1]
OVERRIDES = [*TINY, "method=full", "data.world.n_steps=2", "trainer.save_every_n_steps=2"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(run_dir: Path, fault: str | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2"]
    command += ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
    command += ["--main_process_port", str(free_port()), "train.py", *OVERRIDES, f"hydra.run.dir={run_dir}"]
    env = {**os.environ, "WANDB_MODE": "disabled", "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1"}
    env.pop("EVOLVE_TRAIN_FAULT", None)
    if fault:
        env["EVOLVE_TRAIN_FAULT"] = fault
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=400, env=env)


def log(run_dir: Path) -> str:
    return (run_dir / "train.log").read_text()  # Hydra's log of the run: every rank's lines


def states(run_dir: Path) -> list[str]:
    root = run_dir / "train_state"
    return sorted(p.name for p in root.iterdir() if p.name.startswith("step")) if root.is_dir() else []


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted 2-process run, and the arrival count of the third optimizer step of time step 1."""
    run_dir = tmp_path_factory.mktemp("reference") / "run"
    done = launch(run_dir)
    assert done.returncode == 0, done.stderr[-4000:]
    steps = {k: max(o for t, o, _ in losses(run_dir) if t == k) for k in (0, 1)}
    assert steps[1] >= 4, steps  # room for a state at 2 and a kill at 3 inside step 1
    return run_dir, steps[0] + 3


@pytest.mark.slow
def test_a_two_process_run_killed_in_step_1_resumes_to_the_same_rows(tmp_path, reference):
    reference_dir, third_of_step1 = reference
    run_dir = tmp_path / "run"
    crashed = launch(run_dir, f"optimizer_step:{third_of_step1}")  # SIGKILL, every rank at the same step
    assert crashed.returncode != 0
    assert json.loads((run_dir / "state.json").read_text())["trained"] == [0]
    assert states(run_dir) == ["step1-opt2"]  # what the rerun resumes from
    resumed = launch(run_dir)
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert "resuming time step 1 from the training state" in log(run_dir)  # inside step 1, not at its start
    assert rows(run_dir) == rows(reference_dir)
    assert losses(run_dir) == losses(reference_dir)


@pytest.mark.slow
def test_sigterm_to_every_rank_saves_a_state_at_the_next_step_and_resumes_to_the_same_rows(tmp_path, reference):
    reference_dir, third_of_step1 = reference
    run_dir = tmp_path / "run"
    stopped = launch(run_dir, f"optimizer_step:{third_of_step1}:SIGTERM")
    assert stopped.returncode != 0
    assert log(run_dir).count("interrupted (SIGTERM) in time step 1 after optimizer step 4") == 2  # both ranks
    assert states(run_dir)[-1] == "step1-opt4"  # saved at the step where the ranks agreed
    resumed = launch(run_dir)
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert f"resuming time step 1 from the training state {run_dir / 'train_state/step1-opt4'}" in log(run_dir)
    assert rows(run_dir) == rows(reference_dir)
    assert losses(run_dir) == losses(reference_dir)
