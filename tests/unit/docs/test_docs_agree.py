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


# SLURM: the template and both submitit launchers ran as jobs of a real one-node SLURM cluster; several nodes
# and GPUs under SLURM did not.

NEVER_UNDER_SLURM = re.compile(r"never ran under SLURM|Not run: real SLURM|real SLURM: NCCL|Awaiting [^.]*real SLURM")


def a_test_file(name: str) -> bool:
    """Whether tests/ holds a file of that name (in whichever folder of tests/ it lives)."""
    return any((ROOT / "tests").rglob(name))


def test_every_page_says_the_slurm_template_ran_on_a_real_one_node_cluster():
    assert (ROOT / "scripts" / "slurm" / "local_cluster.sh").is_file() and a_test_file("test_slurm_cluster.py")
    for page in ("README.md", "docs/methods.md", "docs/distributed.md", "docs/reliability.md"):
        text = squash(read(page))
        assert not NEVER_UNDER_SLURM.search(text), page
        assert "local_cluster.sh" in text, page
    for page in ("docs/methods.md", "docs/distributed.md"):
        text = squash(read(page))
        assert "several nodes" in text and "test_slurm_cluster.py" in text, page
