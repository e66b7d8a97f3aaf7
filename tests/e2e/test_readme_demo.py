"""The README's demo block is what ``make demo`` prints: ``scripts/demo_run.sh`` (the demo after setup) runs once
for this module, and

- the block must be the tail of its output, line for line, with only the numbers free (they change with the
  machine's kernels and wall clock; the labels, the sets, the order and every line must match);
- the script saves what it printed as ``demo_output.txt`` in its run dir, and ``python -m
  evolve_train.reporting.results_page RUN_DIR --readme`` makes the block from that run dir (the printed tail,
  line for line); a results page region from the same run checks, and no longer can once the run dir is gone."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from helpers.processes import ROOT
from helpers.docs import readme_demo_block, shape

from evolve_train.reporting.results_page import ABSENT, BEGIN, END

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """``(folder holding runs/demo, the environment, what the demo printed)``."""
    if shutil.which("evolve-report") is None:
        pytest.skip("evolve-report is not installed (pip install -e .)")
    where = tmp_path_factory.mktemp("demo")
    run_dir = where / "runs" / "demo"
    env = {**os.environ, "RUN_DIR": str(run_dir), "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run(
        ["bash", "scripts/demo_run.sh"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return where, env, done.stdout


def test_the_readme_demo_block_is_the_tail_of_a_demo_run(demo):
    where, _, stdout = demo
    printed = stdout.replace(str(where / "runs" / "demo"), "runs/demo").rstrip("\n").splitlines()
    block = readme_demo_block()
    tail = printed[-len(block) :]
    mismatches = [(shown, got) for shown, got in zip(block, tail) if shape(shown) != shape(got)]
    assert not mismatches, "README demo block vs the demo's output:\n" + "\n".join(
        f"README: {shown}\nprinted: {got}" for shown, got in mismatches
    )


def test_the_demo_saves_its_output_and_the_readme_block_is_made_from_its_run_dir(demo):
    where, env, stdout = demo
    run_dir = where / "runs" / "demo"
    assert (run_dir / "demo_output.txt").read_text(encoding="utf-8") == stdout

    command = "python -m evolve_train.reporting.results_page runs/demo --readme"
    readme = where / "README.md"
    readme.write_text(
        f"## The demo's output\n\nIt ended with:\n{BEGIN.format(command=command)}\n```\nold\n```\n{END}\nNo figure.\n"
    )

    def page(*args: str) -> subprocess.CompletedProcess:
        module = [sys.executable, "-m", "evolve_train.reporting.results_page"]
        return subprocess.run([*module, *args], cwd=where, env=env, capture_output=True, text=True, timeout=120)

    assert page("runs/demo", "--readme").returncode == 0
    printed = stdout.replace(str(run_dir), "runs/demo").rstrip("\n").splitlines()
    block = readme.read_text(encoding="utf-8").split("```\n")[1].rstrip("\n").splitlines()
    assert block[0].startswith("EM by checkpoint") and block == printed[-len(block) :]
    assert page("runs/demo", "--readme", "--check").returncode == 0

    (where / "page.md").write_text("# Results\n")
    assert page("runs/demo", "--page", "page.md").returncode == 0
    assert "Run `runs/demo`, finished" in (where / "page.md").read_text()
    assert page("--page", "page.md", "--check").returncode == 0
    run_dir.rename(where / "moved")
    gone = page("--page", "page.md", "--check")
    assert gone.returncode == 0 and ABSENT in gone.stdout
