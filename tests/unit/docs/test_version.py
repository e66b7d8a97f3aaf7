"""The version is defined once (``evolve_train.__version__``): pyproject.toml reads it at build time, and
CITATION.cff and CHANGELOG.md's newest release quote it. (The built wheel's metadata: tests/unit/cli/test_evolve_train_cli.py and tests/e2e/test_evolve_train_cli.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

import evolve_train

ROOT = Path(__file__).resolve().parents[3]
tomllib = pytest.importorskip("tomllib")  # Python >= 3.11


def test_the_version_is_a_release_number_defined_in_the_package_only():
    assert re.fullmatch(r"\d+\.\d+\.\d+", evolve_train.__version__)
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in pyproject["project"] and "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "evolve_train.__version__"}


def test_citation_and_changelog_quote_the_version():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert str(cff["version"]) == evolve_train.__version__
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    sections = re.findall(r"^## \[([^\]]+)\]", changelog, flags=re.M)
    assert sections[0] == "Unreleased" and sections[1] == evolve_train.__version__, sections
    assert re.search(rf"^## \[{re.escape(evolve_train.__version__)}\] - \d{{4}}-\d{{2}}-\d{{2}}$", changelog, re.M)


def test_provenance_records_the_version_of_the_code_that_runs():
    from evolve_train.utils.provenance import PACKAGES, versions

    recorded = versions()
    assert PACKAGES[0] == "evolve-train" and recorded["evolve-train"] == evolve_train.__version__
    assert set(recorded) == set(PACKAGES)
