"""docs/outputs.md's table of what every run writes is what a run dir holds: a small run of the default
configuration (``python train.py`` with the test suite's tiny overrides) writes exactly the files it lists as
"every run", and each of them."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from helpers import forked
from helpers import TINY
from helpers.processes import ROOT
from helpers.docs import documented_every_run, pattern


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("outputs") / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1"}
    done = forked.python([sys.executable, "train.py", *TINY, f"hydra.run.dir={run_dir}"], env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return run_dir


def test_a_run_dir_holds_exactly_the_files_the_page_lists(tiny_run):
    files = sorted(p.relative_to(tiny_run).as_posix() for p in tiny_run.rglob("*") if p.is_file())
    patterns = {path: pattern(path) for path in documented_every_run()}
    undocumented = [f for f in files if not any(p.match(f) for p in patterns.values())]
    absent = [path for path, p in patterns.items() if not any(p.match(f) for f in files)]
    assert not undocumented, f"files docs/outputs.md does not list: {undocumented}"
    assert not absent, f"docs/outputs.md lists files a run did not write: {absent}"
