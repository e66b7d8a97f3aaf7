"""The installed console scripts, found or built, run as a user runs them."""

import os
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from helpers.processes import ROOT


REPO = ROOT


MAIN = "import sys; from evolve_train.cli.train import main; sys.exit(main())"


def _installed_command() -> list[str] | None:
    """The console script, when this checkout's package is installed with it (pip install -e .)."""
    script = shutil.which("evolve-train")
    scripts = {e.name for e in metadata.entry_points(group="console_scripts")}
    return [script] if script and "evolve-train" in scripts else None


def evolve_train(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    command = _installed_command() or [sys.executable, "-c", MAIN]
    environ = {**os.environ, "PYTHONPATH": str(REPO), "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1", **env}
    return subprocess.run(command + args, cwd=cwd, env=environ, capture_output=True, text=True, timeout=600)
