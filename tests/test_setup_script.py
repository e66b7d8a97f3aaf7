"""scripts/setup.sh keeps an importable torch and installs the pinned one only where none is importable.

Run on a copy of the script in a scratch project, with stubs instead of the network: ``python3`` on PATH is a
wrapper of this interpreter whose venvs come without pip (fast), and ``pip``, torch and the packages the
script's last line imports are stub packages on PYTHONPATH. The stub pip records its arguments, and "installs"
a requested ``torch==X`` by writing a stub torch of that version into the environment's site-packages."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.processes import ROOT

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")

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


def fake_torch(site: Path, version: str) -> None:
    (site / "torch").mkdir(parents=True, exist_ok=True)
    (site / "torch" / "__init__.py").write_text(f"__version__ = {version!r}\n")


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


def constraints(project) -> str:
    path = Path(str(project[3]) + ".constraints")
    return path.read_text() if path.exists() else ""


def venv_commands(project) -> str:
    path = Path(str(project[3]) + ".venv")
    return path.read_text() if path.exists() else ""


def test_fresh_machine_creates_venv_and_installs_the_pinned_torch(project):
    """The default (nothing set, no .venv): a plain venv at .venv, torch==2.13.0, then the package."""
    root = project[0]
    out, calls = run_setup(project)
    assert venv_commands(project).split() == ["venv", ".venv"]
    assert "include-system-site-packages = false" in (root / ".venv" / "pyvenv.cfg").read_text()
    assert calls[0] == ["install", "-q", "--upgrade", "pip"]
    assert torch_installs(calls) == [["install", "-q", "torch==2.13.0"]]
    assert calls[-1][-2:] == ["-e", ".[test,slurm,gguf,retrieval]"]
    assert constraints(project) == "torch==2.13.0\n"  # the extras may not swap it afterwards
    assert "installing torch==2.13.0" in out and "evolve-train env ready: torch 2.13.0" in out


def test_an_existing_env_with_torch_keeps_it(project, tmp_path):
    """VENV= an environment whose torch imports: no torch install is attempted; the package is installed
    under a constraint on that torch's version, and the script says which torch it uses."""
    root = project[0]
    env = tmp_path / "cuda-env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    site = Path(
        subprocess.run(
            [str(env / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    fake_torch(site, "2.5.1+cu121")
    out, calls = run_setup(project, VENV=str(env))
    assert venv_commands(project) == ""  # used as it is
    assert torch_installs(calls) == []
    assert constraints(project) == "torch==2.5.1+cu121\n"
    assert "keeping the importable torch 2.5.1+cu121" in out and str(site / "torch") in out
    assert "evolve-train env ready: torch 2.5.1+cu121" in out
    assert (root / ".venv").resolve() == env.resolve()  # scripts/test.sh and demo.sh run in .venv


def test_an_env_without_torch_gets_the_pinned_one(project, tmp_path):
    env = tmp_path / "empty-env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    out, calls = run_setup(project, VENV=str(env), TORCH_VERSION="2.13.0")
    assert torch_installs(calls) == [["install", "-q", "torch==2.13.0"]]
    assert "no importable torch" in out and "evolve-train env ready: torch 2.13.0" in out


def test_the_active_venv_is_used_and_its_torch_kept(project, tmp_path):
    root = project[0]
    env = tmp_path / "active"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    site = next((env / "lib").glob("python*/site-packages"))
    fake_torch(site, "2.6.0+cu124")
    out, calls = run_setup(project, VIRTUAL_ENV=str(env))
    assert f"using the active venv {env}" in out
    assert torch_installs(calls) == [] and constraints(project) == "torch==2.6.0+cu124\n"
    assert not (root / ".venv").is_dir() or (root / ".venv").resolve() == env.resolve()


def test_system_site_packages_lets_a_new_venv_see_the_torch_of_python3(project, tmp_path):
    """VENV_SYSTEM_SITE_PACKAGES=1: .venv is created with --system-site-packages, and the torch python3's
    environment imports (here a stub on its path) is kept."""
    root, stubs = project[0], project[1]
    fake_torch(stubs, "2.7.0+cu126")
    out, calls = run_setup(project, VENV_SYSTEM_SITE_PACKAGES="1")
    assert venv_commands(project).split() == ["venv", "--system-site-packages", ".venv"]
    assert "include-system-site-packages = true" in (root / ".venv" / "pyvenv.cfg").read_text()
    assert torch_installs(calls) == [] and constraints(project) == "torch==2.7.0+cu126\n"
    assert "keeping the importable torch 2.7.0+cu126" in out


def test_system_site_packages_switches_an_existing_venv(project):
    root = project[0]
    run_setup(project)  # a plain .venv with the pinned torch
    assert "include-system-site-packages = false" in (root / ".venv" / "pyvenv.cfg").read_text()
    out, calls = run_setup(project, VENV_SYSTEM_SITE_PACKAGES="1")
    assert "include-system-site-packages = true" in (root / ".venv" / "pyvenv.cfg").read_text()
    assert "now sees the system site-packages" in out
    assert len(torch_installs(calls)) == 1  # the first run's only: the second kept it
