"""Mid-step states of 2 FSDP2 processes (gloo on CPU) through ``torch.distributed.checkpoint`` (training/dcp_state.py).

* The model and optimizer of a state are one ``.distcp`` file per rank plus DCP's ``.metadata`` (``dcp/``); a run
  killed mid-step resumes on 2 processes to the training-log losses and metric rows of the uninterrupted run.
* On 1 process with the same global batch (``trainer.batch_size=16`` for 2 x 8) the state continues (DCP reshards
  it) instead of restarting the step: the resumed run ends each step with the uninterrupted 2-process run's
  weights up to float rounding (the gradient sums run in another order: relative difference < 1e-5) and its
  later losses are the whole global batch's where the 2-process log has process 0's half (so within 3 %).
* States are written in the background (``trainer.async_save``): SIGTERM while one is in flight stops the run
  with 143 after that one is complete and another is saved at the step where the ranks agree; SIGKILL while one
  is in flight leaves it unrenamed, and the rerun resumes from the one before. Both end with the reference's
  rows.

Every rank, and the 1-process run, is a process forked from a Python that has already imported the libraries
(tests/helpers/forked.py: the environment ``accelerate launch`` gives it, ``train.py`` as ``__main__``; the kills and
SIGTERM come from the fault points inside each rank, not from a launcher). The launch command itself is
tests/distributed/test_ddp.py's and tests/distributed/test_multiprocess_faults.py's.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import losses, rows
from helpers.faults import log, states
from helpers.forked import FSDP2, ONE, run_forked, run_forked_killed
from helpers.processes import CPU_ENV as ENV, SMALL, relative_difference
from safetensors.torch import load_file

pytestmark = pytest.mark.slow

OVERRIDES = [
    *SMALL,
    "method=full",
    "data.world.n_steps=2",
    "eval.evaluators=[splits]",
    "trainer.batch_size=8",
    "trainer.save_every_n_steps=2",
]
ROUNDING = 1e-5
"""Weights of one process vs two on the same global batches: the same sums in another order (measured 5e-7 and 1e-6)."""
HALF_BATCH = 0.03
"""The logged losses of 2 processes (process 0's half of each global batch) vs 1 (the whole batch): measured at
most 1.3 % apart on this data, while the loss falls by 20 % over the steps compared."""


def two(run_dir: Path) -> list[str]:
    """The command each of the 2 FSDP2 ranks runs."""
    return ["train.py", *OVERRIDES, f"hydra.run.dir={run_dir}"]


def weights(run_dir: Path, step: int) -> dict:
    return load_file(run_dir / f"steps/{step}/model.safetensors")


def rerun_resumes_to_the_reference(run_dir: Path, state: str, reference: Path) -> None:
    """The same 2-process command again resumes time step 0 from ``state`` and ends with the reference's rows."""
    run_forked(FSDP2, two(run_dir), ENV)
    assert f"resuming time step 0 from the training state {run_dir / 'train_state' / state}" in log(run_dir)
    assert losses(run_dir) == losses(reference)
    assert rows(run_dir) == rows(reference)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("reference") / "run"
    output = run_forked(FSDP2, two(run_dir), ENV)
    assert "FSDP2 on CPU: 2 gloo processes" in output and "in the background" in output
    return run_dir


def test_a_killed_fsdp2_run_resumes_from_its_dcp_state_on_2_processes(tmp_path, reference):
    run_dir = tmp_path / "run"
    run_forked_killed(FSDP2, two(run_dir), ENV, "optimizer_step:7")  # SIGKILL, both ranks, time step 0
    saved = states(run_dir)
    assert saved and saved[-1] in ("step0-opt4", "step0-opt6"), saved  # opt6 if its write ended before the kill
    files = sorted(p.name for p in (run_dir / "train_state" / saved[-1] / "dcp").iterdir())
    assert files == [".metadata", "__0_0.distcp", "__1_0.distcp"]  # one file per rank
    assert not (run_dir / "train_state" / saved[-1] / "model.safetensors").exists()  # nothing gathered
    rerun_resumes_to_the_reference(run_dir, saved[-1], reference)


def test_a_2_process_state_continues_on_1_process_with_the_same_global_batch(tmp_path, reference):
    run_dir = tmp_path / "run"
    run_forked_killed(FSDP2, two(run_dir), ENV, "optimizer_step:7")
    resumed_from = states(run_dir)[-1]
    run_forked(ONE, ["train.py", *OVERRIDES, "trainer.batch_size=16", f"hydra.run.dir={run_dir}"], ENV)
    text = log(run_dir)
    assert "was saved by 2 processes and this run has 1: it continues here" in text, text[-3000:]
    assert f"resuming time step 0 from the training state {run_dir / 'train_state' / resumed_from}" in text
    assert "restarts from" not in text
    for k in range(2):
        difference = relative_difference(weights(reference, k), weights(run_dir, k))
        print(f"step {k}: 1 process resumed vs 2 processes, relative weight difference {difference:.2e}")
        assert difference < ROUNDING, (k, difference)
    mine, theirs = losses(run_dir), losses(reference)
    assert [r[:2] for r in mine] == [r[:2] for r in theirs]
    state_at = int(resumed_from.rsplit("opt", 1)[1])
    before = [(a, b) for a, b in zip(mine, theirs) if a[0] == 0 and a[1] <= state_at]
    assert before and all(a == b for a, b in before)  # the state's own rows, logged again
    after = [(a[2], b[2]) for a, b in zip(mine, theirs) if not (a[0] == 0 and a[1] <= state_at)]
    assert after and all(abs(a - b) <= HALF_BATCH * b for a, b in after), after


def test_sigterm_while_a_state_is_written_in_the_background_stops_with_143_and_resumes(tmp_path, reference):
    run_dir = tmp_path / "run"
    stopped = run_forked_killed(
        FSDP2, two(run_dir), ENV, "train_state_async:2:SIGTERM"
    )  # both ranks, the save of opt 4 in flight
    output = stopped.stdout + stopped.stderr
    assert stopped.returncode == 143 or "exitcode  : 143" in output or "exit code 143" in output, output[-3000:]
    assert log(run_dir).count("interrupted (SIGTERM) in time step 0 after optimizer step") == 2  # both ranks
    saved = states(run_dir)
    assert "step0-opt4" in saved and len(saved) == 2, saved  # the one in flight completed, then the stop's own
    rerun_resumes_to_the_reference(run_dir, saved[-1], reference)


def test_a_kill_while_a_state_is_written_in_the_background_resumes_from_the_one_before(tmp_path, reference):
    run_dir = tmp_path / "run"
    run_forked_killed(FSDP2, two(run_dir), ENV, "train_state_async:2")  # SIGKILL with the save of opt 4 in flight
    assert states(run_dir) == ["step0-opt2"]  # opt 4 was never renamed complete
    rerun_resumes_to_the_reference(run_dir, "step0-opt2", reference)
