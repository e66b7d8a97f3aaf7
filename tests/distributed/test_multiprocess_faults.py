"""Kill-and-resume of a 2-process run (DDP, gloo on CPU): killed in time step 1, the same command resumes to the
metric rows and training-log losses of an uninterrupted 2-process run.

Two kills (``EVOLVE_TRAIN_FAULT``, training/faults.py, set for every rank, so each meets it at the same
optimizer step): SIGKILL of every process (the job killed; the run resumes from the newest mid-step state,
written by the main process, loaded by every rank) and SIGTERM to every rank (what a scheduler sends; the
ranks agree at the next optimizer step, save a state there, and each exits with 143).

These runs are ``accelerate launch`` itself (helpers.faults.launch_run), not the forked ranks of
tests/helpers/forked.py that the FSDP2 kill-and-resume tests use: here a killed or SIGTERMed worker meets torchrun's
own reaction (the other workers stopped, the launcher's exit), which the forked ranks only imitate.
"""

from __future__ import annotations

import json

import pytest
from helpers import losses, rows
from helpers.faults import launch_run, log, states


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted 2-process run, and the arrival count of the third optimizer step of time step 1."""
    run_dir = tmp_path_factory.mktemp("reference") / "run"
    done = launch_run(run_dir)
    assert done.returncode == 0, done.stderr[-4000:]
    steps = {k: max(o for t, o, _ in losses(run_dir) if t == k) for k in (0, 1)}
    assert steps[1] >= 4, steps  # room for a state at 2 and a kill at 3 inside step 1
    return run_dir, steps[0] + 3


@pytest.mark.slow
def test_a_two_process_run_killed_in_step_1_resumes_to_the_same_rows(tmp_path, reference):
    reference_dir, third_of_step1 = reference
    run_dir = tmp_path / "run"
    crashed = launch_run(run_dir, f"optimizer_step:{third_of_step1}")  # SIGKILL, every rank at the same step
    assert crashed.returncode != 0
    assert json.loads((run_dir / "state.json").read_text())["trained"] == [0]
    assert states(run_dir) == ["step1-opt2"]  # what the rerun resumes from
    resumed = launch_run(run_dir)
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert "resuming time step 1 from the training state" in log(run_dir)  # inside step 1, not at its start
    assert rows(run_dir) == rows(reference_dir)
    assert losses(run_dir) == losses(reference_dir)


@pytest.mark.slow
def test_sigterm_to_every_rank_saves_a_state_at_the_next_step_and_resumes_to_the_same_rows(tmp_path, reference):
    reference_dir, third_of_step1 = reference
    run_dir = tmp_path / "run"
    stopped = launch_run(run_dir, f"optimizer_step:{third_of_step1}:SIGTERM")
    assert stopped.returncode != 0
    assert log(run_dir).count("interrupted (SIGTERM) in time step 1 after optimizer step 4") == 2  # both ranks
    assert states(run_dir)[-1] == "step1-opt4"  # saved at the step where the ranks agreed
    resumed = launch_run(run_dir)
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert f"resuming time step 1 from the training state {run_dir / 'train_state/step1-opt4'}" in log(run_dir)
    assert rows(run_dir) == rows(reference_dir)
    assert losses(run_dir) == losses(reference_dir)
