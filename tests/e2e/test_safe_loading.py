"""Safe loading and secrets: safetensors only (pickle refused unless allowed), no remote code unless asked,
and no planted secret anywhere in a run dir."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from evolve_train.training.redact import REDACTED
from helpers import TINY
from helpers.processes import ROOT


@pytest.mark.slow
def test_no_planted_secret_reaches_any_file_of_the_run_dir(tmp_path):
    planted = {
        "WANDB_API_KEY": "fake-planted-key-123",
        "HF_TOKEN": "hf_planted_token_456",
        "HUGGING_FACE_HUB_TOKEN": "hf_planted_token_789",
    }
    config_secret = "planted-config-secret-0ab"
    run_dir = tmp_path / "run"
    env = {**os.environ, **planted, "WANDB_MODE": "offline", "PYTHONUNBUFFERED": "1"}
    done = subprocess.run(
        [
            sys.executable,
            "train.py",
            *TINY,
            "eval.evaluators=[splits]",
            "trainer.num_threads=1",
            "logger.backends=[disk,wandb]",
            f"+extra.api_key={config_secret}",
            f"hydra.run.dir={run_dir}",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert any(p.suffix == ".wandb" for p in files) and (run_dir / ".hydra" / "config.yaml").exists()
    needles = [s.encode() for s in [*planted.values(), config_secret]]
    leaks = [(str(p.relative_to(run_dir)), n.decode()) for p in files for n in needles if n in p.read_bytes()]
    assert leaks == []
    overrides = (run_dir / ".hydra" / "overrides.yaml").read_text()
    assert f"+extra.api_key={REDACTED}" in overrides
