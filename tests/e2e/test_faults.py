"""Kill the real command at named points, rerun the same command, and get the uninterrupted run's results.

Each case runs ``python train.py <tiny config> trainer.save_every_n_steps=4`` with
``EVOLVE_TRAIN_FAULT=<point>:<count>`` (evolve_train/training/faults.py; the command's process is forked from a
Python that has imported the libraries, ``helpers.forked.python``: its argv, environment, directory and exit
status are the command's), so the SIGKILL (or SIGINT) lands
at a deterministic place: inside a time step (the rerun resumes mid-step from a training state), while a
training state or a step checkpoint is being written, between a checkpoint and its record in state.json,
and during evaluation. The same command is then run again without the fault, and the run dir must equal
an uninterrupted reference run's (run without mid-step states, so saving them is shown not to perturb
training either), bitwise on CPU:

- every metrics row (timings aside) and every training-log row (losses, learning rates, token counts);
- every step checkpoint's weights (and the LoRA adapters);
- no file is truncated or left half-written: every .json/.jsonl parses, every .safetensors loads, no
  temporary (``.tmp-``) file or dir remains.

The uninterrupted references are trained in-process by ``train()`` on the same config (the command line is
what the killed and rerun runs test; the reference only supplies the numbers to match), once per method and
test process: full is conftest's ``reference`` fixture (``tiny_cfg`` with ``FAST``: the same overrides as
``COMMON`` with the default ``method=full``, shared with the other modules that compare with it), LoRA is
trained here on the first case that needs it. Both are read, never written.

Sizes (tiny config, each step's held-out slice out of training): step 0 trains 21 optimizer steps, steps 1 and
2 train 12 each; the loop counts ``optimizer_step`` arrivals across the whole process, so count 27 is step 1's
6th update.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import TINY, forked, train_tiny
from safetensors.torch import load_file
from helpers.faults import FAST, metrics, train_log
from helpers.runs import resume_check

COMMON = [*TINY, *FAST]  # eval.evaluators=[splits], one thread: the config of the references
STATES = ["trainer.save_every_n_steps=4"]

pytestmark = pytest.mark.slow


def command(run_dir: Path, method: str, *extra: str) -> list[str]:
    return [sys.executable, "train.py", *COMMON, f"method={method}", *extra, f"hydra.run.dir={run_dir}"]


def run(run_dir: Path, method: str, *extra: str, fault: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_MODE": "disabled", "PYTHONUNBUFFERED": "1"}
    env.pop("EVOLVE_TRAIN_FAULT", None)
    if fault:
        env["EVOLVE_TRAIN_FAULT"] = fault
    return forked.python(command(run_dir, method, *extra), env=env, timeout=600, merged=True)  # Hydra logs to stdout


def weights(path: Path) -> dict:
    return load_file(str(path))


def assert_identical(reference: Path, run_dir: Path) -> None:
    assert metrics(run_dir) == metrics(reference)
    assert train_log(run_dir) == train_log(reference)
    for expected in sorted(reference.glob("steps/*/**/*.safetensors")):
        got = weights(run_dir / expected.relative_to(reference))
        want = weights(expected)
        assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want), expected
    assert json.loads((run_dir / "state.json").read_text())["evaluated"] == [0, 1, 2]


def assert_nothing_truncated(run_dir: Path) -> None:
    checked = 0
    for path in run_dir.rglob("*"):
        assert ".tmp-" not in path.name, f"left-over temporary {path}"
        if not path.is_file():
            continue
        if path.suffix == ".json":
            json.loads(path.read_text())
        elif path.suffix == ".jsonl":
            for line in path.read_text().splitlines():
                json.loads(line)
        elif path.suffix == ".safetensors":
            load_file(str(path))
        else:
            continue
        checked += 1
    assert checked > 10
    assert not (run_dir / "train_state").exists() or not any((run_dir / "train_state").iterdir())


@pytest.fixture(scope="module")
def references(reference, tmp_path_factory):
    """The uninterrupted run of a method, trained once per test process; read, never written. A reference run
    that fails raises out of ``train()`` and fails the test, as its non-zero exit did when it was a command."""
    made: dict[str, Path] = {"full": reference}  # COMMON with method=full: conftest's reference config

    def get(method: str) -> Path:
        if method not in made:
            run_dir = tmp_path_factory.mktemp(f"reference_{method}")
            made[method] = train_tiny(run_dir, *FAST, f"method={method}")  # no mid-step states: they change nothing
        return made[method]

    return get


CASES = [
    # (method, fault, what the rerun must say in its log)
    ("full", "optimizer_step:27", "resuming time step 1 from the training state"),  # mid-step 1, from opt 4
    ("full", "checkpoint_write:2", "resuming time step 1 from the training state"),  # writing steps/1
    ("full", "optimizer_step:27:SIGINT", "resuming time step 1 from the training state"),  # Ctrl-C mid-step 1
    ("lora", "optimizer_step:40", "resuming time step 2 from the training state"),  # mid-step 2 (adapter)
    ("lora", "checkpoint_saved:2", "resuming time step 1 from the training state"),  # steps/1 not recorded
    ("lora", "evaluate:3", "step 2 is trained, its evaluation runs again"),  # evaluating ckpt 2: evaluated only
    ("full", "optimizer_step:39:SIGTERM", "resuming time step 2 from the training state"),  # preempted in step 2
]


@pytest.mark.parametrize("method, fault, resumed", CASES, ids=[f"{m}-{f}" for m, f, _ in CASES])
def test_killed_run_rerun_with_the_same_command_matches_the_uninterrupted_run(
    references, tmp_path, method, fault, resumed
):
    reference = references(method)
    run_dir = tmp_path / "run"
    killed = run(run_dir, method, *STATES, fault=fault)
    if fault.endswith("SIGINT"):
        assert killed.returncode == 130, killed.stdout[-3000:]
        assert "resumable state saved to" in killed.stdout and "step1-opt7" in killed.stdout
    elif fault.endswith("SIGTERM"):  # a scheduler's preemption: a state at the end of the update, exit 128 + 15
        assert killed.returncode == 143, killed.stdout[-3000:]
        assert "interrupted (SIGTERM)" in killed.stdout and "step2-opt7" in killed.stdout
    else:
        assert killed.returncode == -signal.SIGKILL, killed.stdout[-3000:]

    again = run(run_dir, method, *STATES)
    assert again.returncode == 0, again.stdout[-3000:]
    assert resumed in again.stdout, again.stdout[-3000:]
    assert_identical(reference, run_dir)
    assert_nothing_truncated(run_dir)
    host_load, ratio = resume_check.check_host_load(run_dir, 0.25)  # the resume's load line, as gpu_check reads it
    assert host_load.startswith("INFO host_load_vs_weights = ") and "on cpu" in host_load and ratio is not None


def test_a_kill_during_a_state_write_is_reported_and_the_previous_state_used(references, tmp_path):
    """The 5th state of step 0 (optimizer step 20) is killed while being written: the rerun names the
    incomplete dir it removes and resumes step 0 from optimizer step 16."""
    run_dir = tmp_path / "run"
    killed = run(run_dir, "full", *STATES, fault="train_state_write:5")
    assert killed.returncode == -signal.SIGKILL
    leftovers = [p.name for p in (run_dir / "train_state").iterdir()]
    assert any(name.startswith(".step0-opt20.tmp-") for name in leftovers), leftovers
    again = run(run_dir, "full", *STATES)
    assert again.returncode == 0, again.stdout[-3000:]
    assert ".step0-opt20.tmp-" in again.stdout
    assert "train_state/step0-opt16 (optimizer step 16" in again.stdout
    assert_identical(references("full"), run_dir)
