"""docs/options.md is what ``scripts/options_doc.py`` generates from the configuration schema: every key, its
default and its docstring, never out of date."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def options_doc():
    spec = importlib.util.spec_from_file_location("options_doc", ROOT / "scripts" / "options_doc.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_options_page_is_current():
    module = options_doc()
    assert (ROOT / "docs" / "options.md").read_text(encoding="utf-8") == module.render(), (
        "docs/options.md is out of date: run python scripts/options_doc.py"
    )


def test_options_page_lists_keys_of_every_group_with_their_defaults():
    text = (ROOT / "docs" / "options.md").read_text(encoding="utf-8")
    for group in ("model", "method", "data", "trainer", "eval", "logger"):
        assert f"## `{group}`" in text, group
    assert "| `trainer.lr` |" in text and "| `eval.heldout_text` |" in text and "| `seed` | `0` |" in text


def test_fields_and_their_docstrings_are_read_from_source():
    source = 'class A:\n    x: int = 1\n    """The x."""\n    y: str = "a"\n'
    assert options_doc().schema_fields(source) == {"A": [("x", "int", "The x."), ("y", "str", "")]}
