"""The README's demo block is what ``make demo`` prints: ``scripts/demo_run.sh`` (the demo after setup) is run and
the block must be the tail of its output, line for line, with only the numbers free (they change with the
machine's kernels and wall clock; the labels, the sets, the order and every line must match)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest
from helpers.processes import ROOT

NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[+-]?\d+)?")


def readme_demo_block() -> list[str]:
    """The fenced block under "## The demo's output"."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## The demo's output", 1)[1]
    return section.split("```\n", 2)[1].rstrip("\n").splitlines()


def shape(line: str) -> str:
    return NUMBER.sub("#", line.rstrip())


def test_the_block_is_found_and_shapes_ignore_only_numbers():
    block = readme_demo_block()
    assert block[0].startswith("EM by checkpoint") and block[-1].startswith("demo check:")
    assert shape("a=0.512 [0.1, 2e+13] took 222 s") == shape("a=0.600 [0.3, 1e+12] took 9 s")
    assert shape("update_adoption=0.0") != shape("confusion_index=0.0")


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
