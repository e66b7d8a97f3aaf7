"""A rehearsal on CPU of scripts/gpu_check.sh's first run on a bare GPU machine: a fresh venv with only the GPU
image's packages (torch, transformers, accelerate, peft, safetensors, tokenizers, pyarrow, numpy, pandas, scipy,
matplotlib, xxhash, fsspec, psutil and what they pull in; the CPU build of torch stands in for the CUDA one), the
wheels of scripts/gpu_wheels.txt downloaded by scripts/gpu_wheels.sh, and gpu_check.sh (DRY=1, the memory part)
installing the missing ones through scripts/gpu_env.sh the way it does on the GPU machine (pip install --no-index
--no-deps --target). Then, with that folder on the path, ``train.py --cfg job`` and a one-step tiny run.

The GPU image runs CPython 3.12; here the wheels are downloaded for this interpreter's version (PY_VERSION of
scripts/gpu_wheels.sh; 3.12 by default), so the same code installs them. Needs the package index, or its files in
pip's cache (a few minutes). GPU_REHEARSAL_VENV=<dir> keeps the venv there and reuses it on the next run.

The image's venv is still made by pip from nothing but the image's set, only faster: ``--no-compile`` (pip would
byte-compile every module of torch, transformers, scipy, ... of which the rehearsal imports a fraction; the
image's python3 compiles what it imports, once, as any interpreter does where bytecode may be written), and the
wheels are downloaded while pip installs the image."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from helpers import read_jsonl

ROOT = Path(__file__).resolve().parents[2]
# the GPU image's package set, at the versions this environment tests (torch: the CPU build of its pin)
IMAGE = [
    "torch==2.13.0",
    *(
        f"{name}=={version(name)}"
        for name in (
            "transformers",
            "accelerate",
            "peft",
            "safetensors",
            "tokenizers",
            "pyarrow",
            "numpy",
            "pandas",
            "scipy",
            "matplotlib",
            "xxhash",
            "fsspec",
            "psutil",
        )
    ),
]
ONE_STEP = [
    "data.world.n_entities=12",
    "data.world.new_entities_per_step=4",
    "data.world.n_people=10",
    "data.world.n_cities=10",
    "data.world.n_steps=1",
    "trainer.max_steps_step0=1",
    "trainer.batch_size=16",
    "trainer.warmup_steps=1",
    "model.n_layer=1",
    "model.n_embd=32",
    "model.n_head=2",
    "model.vocab_size=300",
    "eval.max_new_tokens=4",
    "logger.backends=[disk]",
    "trainer.num_threads=1",
    "method.step0_cache=null",
]


def run(command, env, cwd=ROOT, timeout=900) -> subprocess.CompletedProcess:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{command}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done


def finished(started: subprocess.Popen, timeout=900) -> subprocess.CompletedProcess:
    """``run``'s check of a command started earlier with ``subprocess.Popen``."""
    stdout, stderr = started.communicate(timeout=timeout)
    done = subprocess.CompletedProcess(started.args, started.returncode, stdout, stderr)
    assert done.returncode == 0, f"{started.args}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done


def image_venv(path: Path) -> Path:
    if not (path / "bin" / "python3").exists():
        run([sys.executable, "-m", "venv", str(path)], os.environ)
        pip = [str(path / "bin" / "python3"), "-m", "pip", "install", "--disable-pip-version-check", "--no-compile"]
        run([*pip, *IMAGE], os.environ)
    return path / "bin"


@pytest.mark.slow
def test_gpu_check_installs_the_missing_packages_and_train_runs_on_the_image_set(tmp_path):
    py_version = f"{sys.version_info.major}.{sys.version_info.minor}"
    wheels, deps, out = tmp_path / "wheels", tmp_path / "deps", tmp_path / "out"
    wheels_env = {**os.environ, "PY_VERSION": py_version, "WHEELS": str(wheels)}
    # the wheels are downloaded while pip installs the image: two processes, each mostly on one core
    fetching = subprocess.Popen(
        ["bash", "scripts/gpu_wheels.sh"],
        cwd=ROOT,
        env=wheels_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        bin_dir = image_venv(Path(os.environ.get("GPU_REHEARSAL_VENV") or tmp_path / "venv"))
    except BaseException:
        fetching.kill()
        raise
    # bytecode may be written: the image's python3 compiles what it imports once (pip installed with --no-compile)
    dropped = ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "PYTHONDONTWRITEBYTECODE")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env["PATH"] = f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin"
    have = run(["python3", "-c", "import sys; print(sys.prefix)"], env).stdout.strip()
    assert Path(have) == bin_dir.parent  # python3 is the image's, nothing else on the path
    for module in ("hydra", "omegaconf", "datasets", "dill", "multiprocess"):
        missing = subprocess.run(["python3", "-c", f"import {module}"], env=env, capture_output=True)
        assert missing.returncode != 0, f"{module} should not be in the image's set"

    fetched = finished(fetching)
    size_kib = int(re.search(r"in \S+: (\d+) KiB", fetched.stdout).group(1))
    assert size_kib < 20_000, fetched.stdout

    # gpu_check.sh as on the GPU machine (dry sizes): its setup installs what python3 lacks, then a part runs
    check_env = {
        **env,
        "DRY": "1",
        "PARTS": "memory",
        "OUT": str(out),
        "GPU_WHEELS": str(wheels),
        "GPU_DEPS": str(deps),
    }
    checked = run(["bash", "scripts/gpu_check.sh"], check_env)
    status = (out / "status.txt").read_text()
    assert "gpu_env: installed 10 missing: " in status and "--target " + str(deps) in status, status
    assert "gpu_env: import check: 10 modules import (10 from" in status, status
    assert "memory rc=0" in status, status + (out / "memory.log").read_text()[-3000:]
    assert "PASS chunked_loss" in status, checked.stdout
    assert not list(deps.glob("yaml")) and not list(deps.glob("torch")), "only the missing packages are installed"

    # sourcing it again installs nothing: the folder of the first install counts
    source = f". scripts/gpu_env.sh && export PYTHONPATH={ROOT}:$PYTHONPATH && "
    env = {**env, "GPU_WHEELS": str(wheels), "GPU_DEPS": str(deps), "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1"}
    job = run(["bash", "-c", source + "python3 train.py --cfg job"], env)
    assert "gpu_env: nothing to install" in job.stderr and "PYTHONPATH += " + str(deps) in job.stderr, job.stderr
    assert "trainer:" in job.stdout and "model:" in job.stdout, job.stdout[-2000:]

    run_dir = tmp_path / "one_step"
    run(["bash", "-c", source + f'python3 train.py "hydra.run.dir={run_dir}" "$@"', "train", *ONE_STEP], env)
    steps = [row for row in read_jsonl(run_dir / "train_log.jsonl") if "optimizer_step" in row]
    assert [row["optimizer_step"] for row in steps] == [1], steps
    assert (run_dir / "summary.json").is_file() and read_jsonl(run_dir / "metrics.jsonl")
