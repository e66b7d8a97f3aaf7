"""README.md and docs/ say what the code does: each test pins one statement of the docs to the code behind it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def read(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def squash(text: str) -> str:
    """Markdown text with its line breaks and runs of spaces as single spaces (a phrase may wrap)."""
    return re.sub(r"\s+", " ", text)


# The model before training: `initial` wherever it is printed, -1 in the rows.


def test_the_console_names_the_model_before_training_initial():
    from evolve_train.tracking.console import format_checkpoint

    rows = [{"group": "splits", "set": "unchanged", "set_step": None, "em": 0.5}]
    assert format_checkpoint(-1, rows) == "[checkpoint initial] EM  unchanged=0.500"
    assert format_checkpoint(2, rows).startswith("[checkpoint 2] EM")


def test_the_docs_call_the_base_model_checkpoint_initial_and_its_rows_minus_one():
    readme = squash(read("README.md"))
    assert "checkpoint `initial`" in readme and "checkpoint `init`" not in readme
    outputs = squash(read("docs/outputs.md"))
    assert "`-1` = the initial model" in outputs and "`step_-1`" in outputs
