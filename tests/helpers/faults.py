"""Faults a test plants (an exception at a named point, a kill of a 2-process run) and the comparisons of a
run that survived one with the run that did not."""

from helpers import TINY
from helpers.processes import ROOT, free_port

import json
import os
import subprocess
import sys
from pathlib import Path
import torch
from safetensors.torch import load_file
from evolve_train.training import faults


OVERRIDES = [*TINY, "method=full", "data.world.n_steps=2", "trainer.save_every_n_steps=2"]


def launch_run(run_dir: Path, fault: str | None = None) -> subprocess.CompletedProcess:
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


FAST = ["eval.evaluators=[splits]", "trainer.num_threads=1"]  # 1 thread: 2 spin badly on a shared 2-core box


TIMING_KEYS = {"train_seconds", "eval_seconds", "seconds", "train_tokens_per_s"}


THROUGHPUT_KEYS = {"tokens_per_s", "peak_mem_gb", "mfu"}  # wall-clock figures of the training log


def metrics(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in rows if r.get("group") != "timing"]


def train_log(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "train_log.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in THROUGHPUT_KEYS} for r in rows]


def same_weights(a: Path, b: Path) -> bool:
    x, y = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


def assert_same_as(reference: Path, run_dir: Path) -> None:
    assert metrics(run_dir) == metrics(reference)
    assert train_log(run_dir) == train_log(reference)
    for step in range(3):
        assert same_weights(reference / "steps" / str(step), run_dir / "steps" / str(step)), step


class Boom(Exception):
    pass


def crash_at(monkeypatch, name: str, count: int) -> None:
    """Raise ``Boom`` at the ``count``-th arrival at fault point ``name`` (an in-process stand-in for a kill)."""
    seen = {"n": 0}

    def point(where):
        if where == name:
            seen["n"] += 1
            if seen["n"] == count:
                raise Boom(f"{name}:{count}")

    monkeypatch.setattr(faults, "point", point)
