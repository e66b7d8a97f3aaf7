"""Each ``evolve-*`` (and ``lm_eval``) line of the README's code blocks runs as written, in order, on the outputs
of a small run in ``runs/demo``: not only parsed (tests/e2e/test_docs_commands.py) but executed. Lines that fetch
from the network (``evolve-data fetch-*``) are only parsed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from helpers import TINY, forked
from helpers.processes import ROOT
from helpers.docs import NETWORK, readme_lines


EXIT_OK = {"evolve-gate": {0, 1}}  # 1: the gate ran and a check failed (the demo's flip rate fails it)


@pytest.mark.slow
def test_every_readme_command_runs_on_a_small_run(tmp_path):
    env = {**os.environ, "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    if shutil.which("evolve-eval") is None:
        pytest.skip("the console scripts are not installed (pip install -e .)")
    train = [sys.executable, str(ROOT / "train.py"), *TINY, f"hydra.run.dir={tmp_path / 'runs' / 'demo'}"]
    done = forked.python(train, env=env, timeout=600)  # the commands' input (forked: helpers.forked.python)
    assert done.returncode == 0, done.stderr[-3000:]
    for line in readme_lines():
        if NETWORK.match(line):
            continue
        tool = line.split()[0]
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (its extra: see the README)")
        ran = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
        assert ran.returncode in EXIT_OK.get(tool, {0}), f"{line}\n{ran.stdout[-2000:]}\n{ran.stderr[-3000:]}"
    assert (tmp_path / "runs" / "demo" / "evaluations" / "full" / "metrics.jsonl").is_file()
    assert (tmp_path / "runs" / "base" / "metrics.jsonl").is_file()
    assert (tmp_path / "runs" / "demo" / "report" / "report.md").is_file()
