"""scripts/setup.sh keeps an importable torch and installs the pinned one only where none is importable.

Run on a copy of the script in a scratch project, with stubs instead of the network: ``python3`` on PATH is a
wrapper of this interpreter whose venvs come without pip (fast), and ``pip``, torch and the packages the
script's last line imports are stub packages on PYTHONPATH. The stub pip records its arguments, and "installs"
a requested ``torch==X`` by writing a stub torch of that version into the environment's site-packages."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.setup_script import project, run_setup, torch_installs  # noqa: F401  (project: a fixture)


pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def fake_torch(site: Path, version: str) -> None:
    (site / "torch").mkdir(parents=True, exist_ok=True)
    (site / "torch" / "__init__.py").write_text(f"__version__ = {version!r}\n")


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
