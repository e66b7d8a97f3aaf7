"""evolve-train: continual pretraining over time steps and evaluation of what models learn, update and forget."""

__version__ = "0.2.0"
"""The package version, its one source: pyproject.toml reads it at build time ([tool.setuptools.dynamic]),
CITATION.cff and CHANGELOG.md quote it (tests/unit/docs/test_version.py)."""
