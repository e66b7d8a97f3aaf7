"""Jobs on a real SLURM scheduler: one node of this machine (``scripts/slurm/local_cluster.sh``, which ``.ci/run``
starts; these tests skip, saying so, where no SLURM node answers).

- ``scripts/slurm/multinode.sbatch`` (1 node x 2 gloo processes): the job's rows equal ``accelerate launch`` of the
  same config; ``scontrol requeue`` in the middle of a time step and the time limit's warning signal each stop
  every rank at one optimizer step with a state saved there, and the requeued job resumes to the same rows.
- ``python train.py -m hydra/launcher=submitit_slurm`` (and ``submitit_slurm_multi``, 2 tasks a point) goes through
  the real ``sbatch``; a preempted submitit job (SIGUSR2, as SLURM sends it) is requeued and resumes.

A rank is held at a known optimizer step by ``EVOLVE_TRAIN_FAULT=...:pause`` until the scheduler's signal
arrives, so the step where the ranks stop does not depend on timing. SLURM holds a requeued job for about two
minutes before it may start again (``Reason=BeginTime``); the tests move its start to now.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import TINY, wall_clock

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "scripts" / "slurm" / "multinode.sbatch"
OVERRIDES = [*TINY, "method=full", "data.world.n_steps=2", "trainer.save_every_n_steps=2"]
ENV = {
    "ACCELERATE_USE_CPU": "1",
    "GPUS_PER_NODE": "2",
    "OMP_NUM_THREADS": "1",
    "WANDB_MODE": "disabled",
    "VENV": "",  # the environment of this Python (first on PATH below), not the clone's .venv
    "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
}
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE")

pytestmark = pytest.mark.slow


def _node_ready() -> bool:
    if not shutil.which("sinfo") or not shutil.which("sbatch"):
        return False
    out = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=30)
    return out.returncode == 0 and any(s in out.stdout for s in ("idle", "mix", "alloc"))


@pytest.fixture(scope="module", autouse=True)
def cluster():
    if not _node_ready():
        pytest.skip("no SLURM node answers here (start one as root: bash scripts/slurm/local_cluster.sh)")


def run_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "EVOLVE_TRAIN_FAULT"))}
    return {**env, **ENV, **extra}


def sbatch(output: Path, run_dir: Path, *sbatch_args: str, **env: str) -> str:
    command = ["sbatch", "--parsable", "--nodes=1", "--gpus-per-node=0", f"--cpus-per-task={os.cpu_count()}"]
    command += [f"--output={output}", f"--chdir={ROOT}", *sbatch_args, str(TEMPLATE), *OVERRIDES]
    command.append(f"hydra.run.dir={run_dir}")
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, env=run_env(**env))
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


def job(job_id: str) -> dict[str, str]:
    out = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return dict(re.findall(r"(\w+)=(\S*)", out.stdout))


def wait_for(what: str, predicate, timeout: float = 240):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def wait_ended(job_id: str, timeout: float = 300) -> dict[str, str]:
    """Wait for the job to end; a requeued job held for its begin time is released at once."""

    def ended():
        info = job(job_id)
        if info["JobState"] == "PENDING" and info.get("Reason") == "BeginTime":
            subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], timeout=30)
        return info if info["JobState"] in ENDED else None

    return wait_for(f"job {job_id} to end", ended, timeout)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def rows(run_dir: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if not wall_clock(k)} for r in read_jsonl(run_dir / "metrics.jsonl")]


def losses(run_dir: Path) -> list[tuple]:
    return [(r["time_step"], r["optimizer_step"], r.get("loss")) for r in read_jsonl(run_dir / "train_log.jsonl")]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """``accelerate launch`` of the template's config (ddp.yaml, 2 processes), and the arrival count of the third
    optimizer step of time step 1 (where a rank is held)."""
    run_dir = tmp_path_factory.mktemp("reference") / "run"
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", "accelerate_configs/ddp.yaml"]
    command += ["--num_processes", "2", "--num_machines", "1", "--main_process_port", "29731", "train.py"]
    command += [*OVERRIDES, f"hydra.run.dir={run_dir}"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=400, env=run_env())
    assert done.returncode == 0, done.stderr[-4000:]
    steps = {k: max(o for t, o, _ in losses(run_dir) if t == k) for k in (0, 1)}
    assert steps[1] >= 5, steps
    return run_dir, steps[0] + 3


def held(output: Path) -> bool:
    return output.exists() and "EVOLVE_TRAIN_FAULT: pausing at optimizer_step" in output.read_text()


def assert_stopped_at_step1_opt4_and_resumed(output: Path, run_dir: Path, info: dict) -> None:
    text = output.read_text()
    assert info["JobState"] == "COMPLETED" and info["Restarts"] == "1", info
    assert "restart 0" in text and "restart 1" in text, text[-3000:]
    saved = f"resumable state saved to {run_dir / 'train_state/step1-opt4'}"
    assert text.count(saved) == 2, text[-3000:]  # both ranks stopped at the same optimizer step
    assert f"resuming time step 1 from the training state {run_dir / 'train_state/step1-opt4'}" in text


def test_sbatch_template_runs_two_processes_to_the_rows_of_accelerate_launch(tmp_path, reference):
    reference_dir, _ = reference
    output, run_dir = tmp_path / "job.out", tmp_path / "run"
    job_id = sbatch(output, run_dir)
    info = wait_ended(job_id)
    text = output.read_text()
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", (info, text[-3000:])
    assert f"job {job_id} (restart 0): 1 node(s) x 2 processes" in text
    assert rows(run_dir) == rows(reference_dir)
    assert losses(run_dir) == losses(reference_dir)
    saved = re.findall(r"\[INFO\] - saved training state (\S+)", text)
    assert saved and len(saved) == len(set(saved)), saved  # INFO lines from one rank only


def test_scontrol_requeue_in_a_step_stops_every_rank_at_one_step_and_resumes_to_the_same_rows(tmp_path, reference):
    reference_dir, third_of_step1 = reference
    output, run_dir = tmp_path / "job.out", tmp_path / "run"
    job_id = sbatch(output, run_dir, EVOLVE_TRAIN_FAULT=f"optimizer_step:{third_of_step1}:pause@0")
    wait_for("rank 0 to be held in time step 1", lambda: held(output))
    subprocess.run(["scontrol", "requeue", job_id], check=True, timeout=30)
    info = wait_ended(job_id)
    assert_stopped_at_step1_opt4_and_resumed(output, run_dir, info)
    assert rows(run_dir) == rows(reference_dir)
    assert losses(run_dir) == losses(reference_dir)  # no optimizer update trained twice


def test_the_time_limit_warning_stops_every_rank_saves_requeues_and_resumes_to_the_same_rows(tmp_path, reference):
    """The template's own path: SLURM sends USR1 to the batch script (``--signal=B:USR1@N``, here 45 s before a
    1-minute limit), its trap sends SIGTERM to the run and requeues the job. The requeued job gets a longer limit
    so that its second run is not cut short in turn."""
    reference_dir, third_of_step1 = reference
    output, run_dir = tmp_path / "job.out", tmp_path / "run"
    fault = f"optimizer_step:{third_of_step1}:pause@0"
    job_id = sbatch(output, run_dir, "--time=1", "--signal=B:USR1@45", EVOLVE_TRAIN_FAULT=fault)
    wait_for("rank 0 to be held in time step 1", lambda: held(output))
    wait_for("the requeue", lambda: job(job_id)["Restarts"] == "1", timeout=120)
    subprocess.run(["scontrol", "update", f"JobId={job_id}", "TimeLimit=10"], check=True, timeout=30)
    info = wait_ended(job_id)
    assert "USR1: the time limit is near" in output.read_text()
    assert_stopped_at_step1_opt4_and_resumed(output, run_dir, info)
    assert rows(run_dir) == rows(reference_dir)
    assert losses(run_dir) == losses(reference_dir)
