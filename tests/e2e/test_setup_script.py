"""scripts/setup.sh keeps an importable torch and installs the pinned one only where none is importable.

Run on a copy of the script in a scratch project, with stubs instead of the network: ``python3`` on PATH is a
wrapper of this interpreter whose venvs come without pip (fast), and ``pip``, torch and the packages the
script's last line imports are stub packages on PYTHONPATH. The stub pip records its arguments, and "installs"
a requested ``torch==X`` by writing a stub torch of that version into the environment's site-packages."""

from __future__ import annotations

import shutil

import pytest
from helpers.setup_script import project, run_setup, torch_installs  # noqa: F401  (project: a fixture)


pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def test_system_site_packages_switches_an_existing_venv(project):
    root = project[0]
    run_setup(project)  # a plain .venv with the pinned torch
    assert "include-system-site-packages = false" in (root / ".venv" / "pyvenv.cfg").read_text()
    out, calls = run_setup(project, VENV_SYSTEM_SITE_PACKAGES="1")
    assert "include-system-site-packages = true" in (root / ".venv" / "pyvenv.cfg").read_text()
    assert "now sees the system site-packages" in out
    assert len(torch_installs(calls)) == 1  # the first run's only: the second kept it
