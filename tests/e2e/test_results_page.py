"""``scripts/demo_run.sh`` saves what it prints as ``demo_output.txt`` in its run dir, and
``python -m evolve_train.reporting.results_page RUN_DIR --readme`` makes the README's demo block from that run dir:
the printed tail, line for line; a results page region from the same run checks, and no longer can once the run
dir is gone. A tiny world (a few seconds of training), so the script's band check is skipped."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from helpers import TINY
from helpers.processes import ROOT

from evolve_train.reporting.results_page import ABSENT, BEGIN, END


@pytest.mark.slow
def test_the_demo_saves_its_output_and_the_readme_block_is_made_from_its_run_dir(tmp_path):
    if shutil.which("evolve-report") is None:
        pytest.skip("evolve-report is not installed (pip install -e .)")
    run_dir = tmp_path / "runs" / "demo"
    env = {**os.environ, "RUN_DIR": str(run_dir), "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run(
        ["bash", "scripts/demo_run.sh", *TINY], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (run_dir / "demo_output.txt").read_text(encoding="utf-8") == done.stdout

    command = "python -m evolve_train.reporting.results_page runs/demo --readme"
    readme = tmp_path / "README.md"
    readme.write_text(
        f"## The demo's output\n\nIt ended with:\n{BEGIN.format(command=command)}\n```\nold\n```\n{END}\nNo figure.\n"
    )

    def page(*args: str) -> subprocess.CompletedProcess:
        module = [sys.executable, "-m", "evolve_train.reporting.results_page"]
        return subprocess.run([*module, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)

    assert page("runs/demo", "--readme").returncode == 0
    printed = done.stdout.replace(str(run_dir), "runs/demo").rstrip("\n").splitlines()
    block = readme.read_text(encoding="utf-8").split("```\n")[1].rstrip("\n").splitlines()
    assert block[0].startswith("EM by checkpoint") and block == printed[-len(block) :]
    assert page("runs/demo", "--readme", "--check").returncode == 0

    (tmp_path / "page.md").write_text("# Results\n")
    assert page("runs/demo", "--page", "page.md").returncode == 0
    assert "Run `runs/demo`, finished" in (tmp_path / "page.md").read_text()
    assert page("--page", "page.md", "--check").returncode == 0
    run_dir.rename(tmp_path / "moved")
    gone = page("--page", "page.md", "--check")
    assert gone.returncode == 0 and ABSENT in gone.stdout
