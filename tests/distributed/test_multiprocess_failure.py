"""A failing process ends a 2-process run (DDP, gloo on CPU) instead of hanging it, and a mid-step state saved by 2
processes is continued by 1 only with the same global batch (``trainer.batch_size=32`` for 2 x 16); with another
the step restarts from its previous checkpoint, with a warning naming both numbers and why (FSDP2 states:
tests/distributed/test_fsdp_states.py).

Faults come from ``EVOLVE_TRAIN_FAULT`` (training/faults.py): ``optimizer_step:<n>:raise@1`` raises in rank 1 only,
at its n-th optimizer step, while rank 0 goes on into the next gradient all-reduce.

Both tests launch with ``accelerate launch`` itself, not the forked ranks of tests/helpers/forked.py: what ends a run
whose rank raised (the first test, which also kills the launcher's process group if it hangs) or whose ranks all
stopped on SIGTERM (the second) is torchrun stopping the other workers and exiting, which the forked ranks only
imitate.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers.faults import OVERRIDES, launch_run, log, states
from helpers.processes import ROOT, free_port

pytestmark = pytest.mark.slow


def start(run_dir: Path, fault: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2"]
    command += ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
    command += ["--main_process_port", str(free_port()), "train.py", *OVERRIDES, f"hydra.run.dir={run_dir}"]
    env = {**os.environ, "WANDB_MODE": "disabled", "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1"}
    env["EVOLVE_TRAIN_FAULT"] = fault
    return subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True
    )


def test_a_rank_that_raises_ends_every_process_within_60_s_with_its_error_in_the_output(tmp_path):
    run_dir = tmp_path / "run"
    process = start(run_dir, "optimizer_step:5:raise@1")
    lines: list[str] = []
    raised = threading.Event()

    def read() -> None:
        for line in process.stdout:
            lines.append(line)
            if "fault injected by EVOLVE_TRAIN_FAULT" in line:
                raised.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert raised.wait(timeout=400), "rank 1 never reached its fault:\n" + "".join(lines[-60:])
        began = time.monotonic()
        code = process.wait(timeout=60)  # the test's own deadline: a hang fails it here
        assert time.monotonic() - began < 60
    finally:
        if process.poll() is None:
            os.killpg(process.pid, 9)
            process.wait()
    reader.join(timeout=10)
    output = "".join(lines)
    assert code != 0
    assert "the run failed in process 1: fault injected by EVOLVE_TRAIN_FAULT at optimizer_step #5" in output
    # only the main process logs INFO: each INFO line of the run once in train.log
    assert log(run_dir).count("private-leak check:") == 1, log(run_dir)


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory) -> Path:
    """The 2-process run stopped by SIGTERM in step 0, made once: each global batch continues its own copy."""
    run_dir = tmp_path_factory.mktemp("stopped") / "run"
    stopped = launch_run(run_dir, "optimizer_step:3:SIGTERM")  # step 0, optimizer step 3: a state saved there
    assert stopped.returncode != 0
    assert states(run_dir)[-1] == "step0-opt4"  # the ranks agreed at the next optimizer step
    return run_dir


@pytest.mark.parametrize("batch_size", [16, 32])
def test_a_ddp_state_of_2_processes_continues_on_1_only_with_the_same_global_batch(tmp_path, stopped_run, batch_size):
    run_dir = tmp_path / "run"
    shutil.copytree(stopped_run, run_dir)
    assert states(run_dir)[-1] == "step0-opt4"
    command = [sys.executable, "train.py", *OVERRIDES, f"trainer.batch_size={batch_size}", f"hydra.run.dir={run_dir}"]
    env = {k: v for k, v in os.environ.items() if k != "EVOLVE_TRAIN_FAULT"}
    alone = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=400, env={**env, "OMP_NUM_THREADS": "1"}
    )
    assert alone.returncode == 0, alone.stderr[-4000:]
    text = log(run_dir)
    if batch_size == 16:  # 2 x 16 rows then, 1 x 16 now: another global batch
        assert "was saved by 2 processes and this run has 1: it cannot continue here (the global batch differs" in text
        assert "time step 0 restarts from none (step 0 starts from scratch)" in text
    else:  # 1 x 32: the same global batch; the whole (DDP) state continues
        assert "was saved by 2 processes and this run has 1: it continues here" in text
        assert f"resuming time step 0 from the training state {run_dir / 'train_state/step0-opt4'}" in text
    rows = [json.loads(line) for line in (run_dir / "train_log.jsonl").read_text().splitlines()]
    assert {r["time_step"] for r in rows} == {0, 1}
