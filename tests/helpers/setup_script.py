"""scripts/setup.sh run against stub pip and python executables that record what they were asked."""

import json
import os
import shutil
import subprocess
import sys
import pytest
from helpers.processes import ROOT


PIP_STUB = """import json, os, sys, sysconfig
from pathlib import Path

args = sys.argv[1:]
with open(os.environ["PIP_LOG"], "a") as log:
    log.write(json.dumps({"args": args, "python": sys.executable}) + "\\n")
if "-c" in args:  # the constraints file's content, as pip would read it
    with open(os.environ["PIP_LOG"] + ".constraints", "a") as out:
        out.write(Path(args[args.index("-c") + 1]).read_text())
for arg in args:
    if arg.startswith("torch=="):  # "install" it: a stub torch of that version in this environment
        package = Path(sysconfig.get_paths()["purelib"]) / "torch"
        package.mkdir(parents=True, exist_ok=True)
        (package / "__init__.py").write_text(f"__version__ = {arg.split('==')[1]!r}\\n")
"""


PYTHON_WRAPPER = """#!/bin/sh
# python3 whose venvs come without pip (the stub pip on PYTHONPATH stands in); records each venv command
if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then
  shift 2
  echo "venv $*" >> "$PIP_LOG.venv"
  exec "{python}" -m venv --without-pip "$@"
fi
exec "{python}" "$@"
"""


@pytest.fixture
def project(tmp_path):
    """A scratch project holding scripts/setup.sh, a stub dir (PYTHONPATH) and a bin dir with python3."""
    root = tmp_path / "project"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "setup.sh", root / "scripts" / "setup.sh")
    stubs = tmp_path / "stubs"
    (stubs / "pip").mkdir(parents=True)
    (stubs / "pip" / "__init__.py").write_text("")
    (stubs / "pip" / "__main__.py").write_text(PIP_STUB)
    for name in ("transformers", "peft", "accelerate", "datasets", "hydra", "wandb"):
        (stubs / name).mkdir()
        (stubs / name / "__init__.py").write_text("__version__ = '0.0-stub'\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "python3"
    wrapper.write_text(PYTHON_WRAPPER.replace("{python}", sys.executable))
    wrapper.chmod(0o755)
    return root, stubs, bin_dir, tmp_path / "pip.log"


def run_setup(project, **env):
    root, stubs, bin_dir, log = project
    environment = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", str(root)),
        "PYTHONPATH": str(stubs),
        "PIP_LOG": str(log),
        **env,
    }
    result = subprocess.run(
        ["bash", "scripts/setup.sh"], cwd=root, env=environment, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    calls = [json.loads(line)["args"] for line in log.read_text().splitlines()] if log.exists() else []
    return result.stdout, calls


def torch_installs(calls) -> list[list[str]]:
    return [args for args in calls if any(a.startswith("torch==") for a in args)]
