"""scripts/slurm/multinode.sbatch, run without SLURM: fake SLURM variables, and ``srun``/``scontrol``/``scancel``/``accelerate``
stubs on PATH that record their arguments (``srun`` runs its command once per fake node, as SLURM would on each
node). Checks the ``accelerate launch`` line every node would run, and that USR1 (the time-limit warning the
script asks for) stops the run with SIGTERM and requeues the job."""

from __future__ import annotations

import os
import shlex
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from helpers.processes import ROOT

SCRIPT = ROOT / "scripts/slurm/multinode.sbatch"

STUBS = {
    "scontrol": """#!/bin/bash
if [ "$1 $2" = "show hostnames" ]; then printf 'gpu07\\ngpu08\\n'; exit 0; fi
{ printf 'scontrol'; printf ' %q' "$@"; echo; } >> "$STUB_LOG"
""",
    "srun": """#!/bin/bash
{ printf 'srun'; printf ' %q' "$@"; echo; } >> "$STUB_LOG"
if [ -n "${STUB_HANG:-}" ]; then  # a run in progress: wait for a signal
  echo $$ > "$STUB_LOG.srun"
  sleep 60 & sleeper=$!
  trap 'echo "srun SIGTERM" >> "$STUB_LOG"; kill $sleeper; exit 143' TERM
  wait $sleeper
  exit 0
fi
while [ "$1" != bash ]; do shift; done
for node in $(seq 0 $((SLURM_NNODES - 1))); do SLURM_NODEID=$node "$@" || exit $?; done
""",
    "scancel": """#!/bin/bash
{ printf 'scancel'; printf ' %q' "$@"; echo; } >> "$STUB_LOG"
kill -TERM "$(cat "$STUB_LOG.srun")"  # the step's processes (here the stub run) get SIGTERM
""",
    "accelerate": """#!/bin/bash
{ printf 'accelerate'; printf ' %q' "$@"; echo; } >> "$STUB_LOG"
""",
}


def lines(log: Path) -> list[list[str]]:
    return [shlex.split(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.fixture
def fake_slurm(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in STUBS.items():
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    for key in ("MASTER_PORT", "ACCELERATE_CONFIG", "GPUS_PER_NODE", "SRUN_ARGS", "STUB_HANG"):
        env.pop(key, None)
    env.update(
        PATH=f"{bin_dir}:{env['PATH']}",
        STUB_LOG=str(tmp_path / "calls.log"),
        VENV="",  # the stubs, not the project's accelerate
        SLURM_JOB_ID="4242",
        SLURM_NNODES="2",
        SLURM_JOB_NODELIST="gpu[07-08]",
        SLURM_GPUS_ON_NODE="8",
        SLURM_SUBMIT_DIR=str(ROOT),
    )
    return env, tmp_path / "calls.log"


OVERRIDES = ["experiment=lora_vs_full", "method=lora", "data.root='my data/v1'"]


def test_the_template_is_valid_bash_and_asks_for_the_warning_and_requeue():
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    header = [line for line in SCRIPT.read_text().splitlines() if line.startswith("#SBATCH")]
    assert "#SBATCH --signal=B:USR1@300" in header and "#SBATCH --requeue" in header
    assert "#SBATCH --ntasks-per-node=1" in header  # one accelerate launch per node
    # torchrun's grace after SIGTERM, sized from a measured state save, fits inside the signal's lead time
    grace = re.search(r"TORCH_ELASTIC_SHUTDOWN_TIMEOUT:-(\d+)", SCRIPT.read_text())
    assert grace and 0 < int(grace.group(1)) + 30 <= 300, grace


def test_every_node_runs_one_accelerate_launch_of_the_whole_job(fake_slurm):
    env, log = fake_slurm
    done = subprocess.run(["bash", str(SCRIPT), *OVERRIDES], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    calls = lines(log)
    srun = [c for c in calls if c[0] == "srun"]
    assert len(srun) == 1 and "--ntasks-per-node=1" in srun[0] and "--kill-on-bad-exit=1" in srun[0]
    launches = [c[1:] for c in calls if c[0] == "accelerate"]
    assert len(launches) == 2
    for node, argv in enumerate(launches):
        assert argv == [
            "launch",
            "--config_file",
            "accelerate_configs/ddp.yaml",
            "--num_machines",
            "2",
            "--machine_rank",
            str(node),
            "--num_processes",
            "16",
            "--main_process_ip",
            "gpu07",
            "--main_process_port",
            str(20000 + 4242 % 40000),
            "train.py",
            *OVERRIDES,  # passed through whole: spaces and quotes intact
        ]
    assert "2 node(s) x 8 processes, master gpu07:24242" in done.stdout


def test_a_set_config_port_and_process_count_win(fake_slurm):
    env, log = fake_slurm
    env.update(ACCELERATE_CONFIG="accelerate_configs/fsdp.yaml", MASTER_PORT="29511", GPUS_PER_NODE="4")
    done = subprocess.run(["bash", str(SCRIPT), "method=full"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    argv = [c for c in lines(log) if c[0] == "accelerate"][0]
    assert argv[argv.index("--config_file") + 1] == "accelerate_configs/fsdp.yaml"
    assert argv[argv.index("--main_process_port") + 1] == "29511"
    assert argv[argv.index("--num_processes") + 1] == "8"


def test_the_time_limit_warning_stops_every_rank_and_requeues(fake_slurm):
    env, log = fake_slurm
    env["STUB_HANG"] = "1"
    job = subprocess.Popen(["bash", str(SCRIPT), "method=full"], env=env, stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not any(c[0] == "srun" for c in lines(log)):  # the run is in progress
        assert time.monotonic() < deadline and job.poll() is None
        time.sleep(0.1)
    job.send_signal(signal.SIGUSR1)  # what SLURM sends 300 s before the limit (--signal=B:USR1@300)
    out, _ = job.communicate(timeout=30)
    assert job.returncode == 0, out
    names = [" ".join(c) for c in lines(log)]
    # SIGTERM to the steps' processes (not to srun, which would end its step at once), then the requeue
    assert (
        names.index("scancel --signal=TERM 4242") < names.index("srun SIGTERM") < names.index("scontrol requeue 4242")
    )
    assert "requeueing job 4242" in out
