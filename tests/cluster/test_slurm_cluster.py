"""Jobs on a real SLURM scheduler: one node of this machine (``scripts/slurm/local_cluster.sh``, which ``.ci/run``
starts; these tests skip, saying so, where no SLURM node answers).

- ``scripts/slurm/multinode.sbatch`` (1 node x 2 gloo processes): the job's rows equal ``accelerate launch`` of the
  same config; ``scontrol requeue`` in the middle of a time step and the time limit's warning signal each stop
  every rank at one optimizer step with a state saved there, and the requeued job resumes to the same rows.
- ``python train.py -m hydra/launcher=submitit_slurm`` (and ``submitit_slurm_multi``, 2 tasks a point) goes through
  the real ``sbatch``; a preempted submitit job (SIGUSR2, as SLURM sends it) is requeued and resumes.
- ``submitit_slurm_multi`` with ``trainer.accelerate_config=accelerate_configs/fsdp.yaml``: each point is an FSDP2
  job of 2 processes whose rows equal ``accelerate launch --config_file accelerate_configs/fsdp.yaml`` of that point.

A rank is held at a known optimizer step by ``EVOLVE_TRAIN_FAULT=...:pause`` until the scheduler's signal
arrives, so the step where the ranks stop does not depend on timing. SLURM holds a requeued job for about two
minutes before it may start again (``Reason=BeginTime``); the tests move its start to now.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import TINY, losses, rows
from helpers.processes import CPU_ENV, ROOT, accelerate_launch
from helpers.processes import run as run_command

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


def seconds(slurm_time: str) -> int:
    """``[D-]HH:MM:SS`` or ``MM:SS`` as SLURM prints a run time, in seconds."""
    days, _, clock = slurm_time.rpartition("-")
    total = 0
    for part in clock.split(":"):
        total = total * 60 + int(part)
    return total + int(days or 0) * 86400


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
    """The template's own path: SLURM sends USR1 to the batch script (``--signal=B:USR1@N``, here 90 s before the
    limit), its trap sends SIGTERM to the run and requeues the job. The job starts with a 10-minute limit; once rank 0
    is held, the limit is cut to 75 s from now, so the warning comes at SLURM's next time check (about every 30 s)
    however long the start took. The requeued job gets a longer limit so that its second run is not cut short."""
    reference_dir, third_of_step1 = reference
    output, run_dir = tmp_path / "job.out", tmp_path / "run"
    fault = f"optimizer_step:{third_of_step1}:pause@0"
    job_id = sbatch(output, run_dir, "--time=10", "--signal=B:USR1@90", EVOLVE_TRAIN_FAULT=fault)
    wait_for("rank 0 to be held in time step 1", lambda: held(output))
    info = job(job_id)
    assert info["Restarts"] == "0", output.read_text()[-3000:]
    limit = seconds(info["RunTime"]) + 75
    subprocess.run(
        ["scontrol", "update", f"JobId={job_id}", f"TimeLimit={limit // 60}:{limit % 60:02d}"], check=True, timeout=30
    )
    wait_for("the requeue", lambda: job(job_id)["Restarts"] == "1", timeout=150)
    subprocess.run(["scontrol", "update", f"JobId={job_id}", "TimeLimit=10"], check=True, timeout=30)
    info = wait_ended(job_id)
    assert "USR1: the time limit is near" in output.read_text()
    assert_stopped_at_step1_opt4_and_resumed(output, run_dir, info)
    assert rows(run_dir) == rows(reference_dir)
    assert losses(run_dir) == losses(reference_dir)


# --- the submitit launchers through the real sbatch ------------------------------------------------------------

SUBMITIT = [
    "hydra.launcher.gpus_per_node=0",  # a CPU-only partition: no GPUs to ask for
    "hydra.launcher.cpus_per_task=1",
    "hydra.launcher.mem_gb=2",
    "hydra.launcher.timeout_min=10",
]


def sweep(sweep_dir: Path, launcher: str, *overrides: str, **env: str) -> subprocess.Popen:
    """``python train.py -m`` with a submitit launcher; it returns when every job has ended."""
    command = [sys.executable, "train.py", "-m", *TINY, "data.world.n_steps=2", "trainer.save_every_n_steps=2"]
    command += [f"hydra/launcher={launcher}", *SUBMITIT, *overrides, f"hydra.sweep.dir={sweep_dir}"]
    log = open(sweep_dir.parent / f"{sweep_dir.name}.log", "w")  # noqa: SIM115 (closed with the process)
    return subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, text=True, env=run_env(**env))


def finished(process: subprocess.Popen, sweep_dir: Path) -> list[Path]:
    """The sweep's run dirs, once its process has ended well."""
    try:
        process.wait(timeout=600)  # a loaded machine: the jobs queue on its one node
    finally:
        process.kill()
    output = (sweep_dir.parent / f"{sweep_dir.name}.log").read_text()
    assert process.returncode == 0, output[-4000:]
    return sorted(p.parent for p in sweep_dir.rglob("summary.json") if ".step0_cache" not in p.parts)


def what_it_says(run_dir: Path) -> list[dict]:
    flags = ("from_eval_cache", "from_step0_cache")
    return [{k: v for k, v in r.items() if k not in flags} for r in rows(run_dir)]


def test_a_submitit_slurm_sweep_runs_each_point_as_a_job(tmp_path):
    sweep_dir = tmp_path / "sweep"
    runs = finished(sweep(sweep_dir, "submitit_slurm", "method=full,lora"), sweep_dir)
    assert [run.relative_to(sweep_dir).parts[0] for run in runs] == ["full", "lora"]
    for run in runs:
        assert json.loads((run / "state.json").read_text())["evaluated"] == [0, 1]
    jobs = [d.name for d in (sweep_dir / ".submitit").iterdir() if d.is_dir() and "_" in d.name]
    assert len(jobs) == 2 and all(wait_ended(name)["JobState"] == "COMPLETED" for name in jobs)  # SLURM ran them


def test_a_submitit_slurm_multi_sweep_runs_each_point_as_one_job_of_two_processes(tmp_path):
    sweep_dir = tmp_path / "sweep"
    process = sweep(sweep_dir, "submitit_slurm_multi", "method=full,lora", "hydra.launcher.tasks_per_node=2")
    runs = finished(process, sweep_dir)
    assert [run.relative_to(sweep_dir).parts[0] for run in runs] == ["full", "lora"]
    for run in runs:
        assert json.loads((run / "state.json").read_text())["evaluated"] == [0, 1]
        assert {r["num_processes"] for r in rows(run)} == {2}
    jobs = [d for d in (sweep_dir / ".submitit").iterdir() if d.is_dir() and "_" in d.name]
    assert len(jobs) == 2 and all(len(list(d.glob("*_result.pkl"))) == 2 for d in jobs)  # 2 jobs x 2 tasks
    assert all(wait_ended(d.name)["JobState"] == "COMPLETED" for d in jobs)


def test_a_preempted_submitit_job_of_two_processes_is_requeued_and_resumes_to_the_same_rows(tmp_path, reference):
    """SIGUSR2 to every task (``scancel --signal=USR2``, what SLURM sends before a preemption or the time limit
    under submitit): the ranks agree at the next optimizer step, save a state, task 0's submitit handler requeues
    the job, and the requeued job resumes there, to the rows of the same point never interrupted."""
    _, third_of_step1 = reference
    multi = ("submitit_slurm_multi", "method=full", "hydra.launcher.tasks_per_node=2")
    plain_dir, preempted_dir = tmp_path / "plain", tmp_path / "preempted"
    (plain,) = finished(sweep(plain_dir, *multi), plain_dir)
    process = sweep(preempted_dir, *multi, EVOLVE_TRAIN_FAULT=f"optimizer_step:{third_of_step1}:pause@0")
    try:

        def held_task():
            for err in (preempted_dir / ".submitit").glob("*/*_log.err"):
                if "EVOLVE_TRAIN_FAULT: pausing at optimizer_step" in err.read_text():
                    return err.parent.name
            return None

        job_id = wait_for("rank 0 to be held in time step 1", held_task)
        subprocess.run(["scancel", "--signal=USR2", job_id], check=True, timeout=30)
        wait_for("the requeue", lambda: job(job_id)["Restarts"] == "1", timeout=120)
        wait_ended(job_id)
    finally:
        (preempted,) = finished(process, preempted_dir)
    logs = "".join(p.read_text() for p in (preempted_dir / ".submitit").glob("*/*_log.*"))
    saved = f"resumable state saved to {preempted / 'train_state/step1-opt4'}"
    assert logs.count(saved) == 2, logs[-4000:]  # both tasks stopped at the same optimizer step
    assert f"resuming time step 1 from the training state {preempted / 'train_state/step1-opt4'}" in logs
    assert what_it_says(preempted) == what_it_says(plain)
    assert losses(preempted) == losses(plain)  # no optimizer update trained twice


def test_a_submitit_slurm_multi_sweep_with_the_fsdp_config_runs_each_point_as_accelerate_launch_does(tmp_path):
    """``trainer.accelerate_config=accelerate_configs/fsdp.yaml``: each task exports what ``accelerate launch
    --config_file`` sets (training/submitit_env.py), so each point is an FSDP2 run of 2 gloo processes. The
    references are ``accelerate launch --config_file accelerate_configs/fsdp.yaml --num_processes 2 --mixed_precision
    no`` of each point, the launch the setting stands for, run by accelerate's own launcher rather than through the
    same export (a one-point submitit job would share any fault of that export); they share one step-0 cache, as the
    sweep's points do, so step 0 is trained once on each side."""
    methods, fsdp = ("full", "lora"), "trainer.accelerate_config=accelerate_configs/fsdp.yaml"
    sweep_dir = tmp_path / "sweep"
    process = sweep(sweep_dir, "submitit_slurm_multi", "method=full,lora", "hydra.launcher.tasks_per_node=2", fsdp)
    common = [*TINY, "data.world.n_steps=2", "trainer.save_every_n_steps=2", f"method.step0_cache={tmp_path / 'cache'}"]
    for method in methods:
        command = [*accelerate_launch(2, "fsdp"), "train.py", *common, f"method={method}"]
        run_command([*command, f"hydra.run.dir={tmp_path / method}"], CPU_ENV)
    runs = finished(process, sweep_dir)
    assert [run.relative_to(sweep_dir).parts[0] for run in runs] == list(methods)
    for method, point in zip(methods, runs):
        assert what_it_says(point) == what_it_says(tmp_path / method), method
        assert losses(point) == losses(tmp_path / method), method
        assert {r["num_processes"] for r in rows(point)} == {2}
        log = (point / "train.log").read_text()
        assert "FSDP2 on CPU: 2 gloo processes" in log and "fsdp.yaml: FSDP2, 2 processes" in log, log[-3000:]
        held = re.findall(r"FSDP2: processes held \[(\d+), (\d+)\] of (\d+) parameter values", log)
        assert held and all(max(int(a), int(b)) < int(total) for a, b, total in held), held  # each held a shard
    jobs = [d for d in (sweep_dir / ".submitit").iterdir() if d.is_dir() and "_" in d.name]
    assert len(jobs) == 2 and all(len(list(d.glob("*_result.pkl"))) == 2 for d in jobs)  # 2 jobs x 2 tasks
    assert all(wait_ended(d.name)["JobState"] == "COMPLETED" for d in jobs)
