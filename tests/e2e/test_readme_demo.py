"""The README's demo block is what ``make demo`` prints: ``scripts/demo_run.sh`` (the demo after setup) is run and
the block must be the tail of its output, line for line, with only the numbers free (they change with the
machine's kernels and wall clock; the labels, the sets, the order and every line must match)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from helpers.processes import ROOT
from helpers.docs import readme_demo_block, shape


@pytest.mark.slow
def test_the_readme_demo_block_is_the_tail_of_a_demo_run(tmp_path):
    if shutil.which("evolve-report") is None:
        pytest.skip("evolve-report is not installed (pip install -e .)")
    run_dir = tmp_path / "runs" / "demo"
    env = {**os.environ, "RUN_DIR": str(run_dir), "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run(
        ["bash", "scripts/demo_run.sh"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800
    )
    assert done.returncode == 0, done.stderr[-3000:]
    printed = done.stdout.replace(str(run_dir), "runs/demo").rstrip("\n").splitlines()
    block = readme_demo_block()
    tail = printed[-len(block) :]
    mismatches = [(shown, got) for shown, got in zip(block, tail) if shape(shown) != shape(got)]
    assert not mismatches, "README demo block vs the demo's output:\n" + "\n".join(
        f"README: {shown}\nprinted: {got}" for shown, got in mismatches
    )
