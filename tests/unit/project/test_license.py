"""LICENSE is the Apache-2.0 text pyproject declares, and CITATION.cff is valid CFF naming the package's version."""

from __future__ import annotations


import pytest
import yaml

import evolve_train
from helpers.processes import ROOT

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def test_license_file_is_the_apache_2_text_pyproject_declares():
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert pyproject()["license"] == "Apache-2.0"
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    # all nine sections of the terms, in order
    positions = [text.index(f"\n   {n}. ") for n in range(1, 10)]
    assert positions == sorted(positions)


def test_citation_file_is_cff_with_the_package_version_and_license():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    for key in ("cff-version", "message", "title", "authors", "version", "license"):
        assert cff.get(key), key
    assert str(cff["version"]) == evolve_train.__version__  # the one source (pyproject.toml reads it)
    assert cff["license"] == pyproject()["license"]
    assert all(author.get("name") or author.get("family-names") for author in cff["authors"])
