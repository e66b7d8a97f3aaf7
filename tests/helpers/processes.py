"""Commands run as a user runs them: from the repository root, in a subprocess, several processes where asked."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from helpers import TINY, read_jsonl

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A TCP port nothing listens on now (for a process group's rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def from_root(command: list[str], env: dict, timeout: int) -> subprocess.CompletedProcess:
    """``command`` run from the repo root with W&B off and ``env`` over this process's environment."""
    env = {**os.environ, "WANDB_MODE": "disabled", **env}
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)


def run(command: list[str], env: dict | None = None, timeout: int = 500) -> str:
    """Run ``command`` from the repo root (W&B off, one thread per process unless ``env`` says otherwise); its
    stdout + stderr. Fails the test on a non-zero exit, showing the output's tail."""
    done = from_root(command, {"OMP_NUM_THREADS": "1", **(env or {})}, timeout)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-4000:])
    return done.stdout + done.stderr


def accelerate_launch(processes: int = 2, config: str | None = None, port: int | None = None) -> list[str]:
    """``accelerate launch`` of ``processes`` CPU processes (gloo): plain data parallel, or an accelerate config
    file of ``accelerate_configs/`` (``fsdp``...)."""
    extra = ["--config_file", f"accelerate_configs/{config}.yaml"] if config else ["--multi_gpu", "--num_machines", "1"]
    command = [sys.executable, "-m", "accelerate.commands.launch", *extra, "--num_processes", str(processes)]
    command += ["--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(port or free_port())]
    return command


def relative_difference(a: dict, b: dict) -> float:
    """``|a - b| / |a|`` over every tensor of two state dicts."""
    diff = sum(((a[k] - b[k]) ** 2).sum() for k in a) ** 0.5
    return float(diff / sum((a[k] ** 2).sum() for k in a) ** 0.5)


CPU_ENV = {"ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1"}  # accelerate on CPU processes, one thread each


def launch(config: str = "fsdp") -> list[str]:
    """2 CPU processes under an accelerate config (``fsdp``: FSDP2), or plain data parallel (``config=""``)."""
    return accelerate_launch(2, config or None)


SMALL = [*TINY, "model.n_layer=2"]  # two transformer blocks: fully_shard per block, then the root


def em_rows(run_dir: Path) -> list[tuple]:
    return [
        (r["checkpoint"], r["group"], r.get("set"), r["em"]) for r in read_jsonl(run_dir / "metrics.jsonl") if "em" in r
    ]


def run_killed(command: list[str], env: dict, fault: str, timeout: int = 500) -> subprocess.CompletedProcess:
    """Run ``command`` from the repo root with the fault point ``fault`` planted (``EVOLVE_TRAIN_FAULT``); fails the
    test unless the run died of it."""
    done = from_root(command, {**env, "EVOLVE_TRAIN_FAULT": fault}, timeout)
    assert done.returncode != 0, done.stdout[-2000:]
    return done


def bench_part(part: str, *options: str, timeout: int = 600) -> tuple[subprocess.CompletedProcess, dict]:
    """``scripts/bench.py --part PART OPTIONS`` from the repository root: the finished process (exit 0 asserted)
    and the figures of its last line's JSON object under ``part``."""
    result = subprocess.run(
        [sys.executable, "scripts/bench.py", "--part", part, *options],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result, json.loads(result.stdout.strip().splitlines()[-1])[part]
