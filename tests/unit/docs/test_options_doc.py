"""docs/options.md is what ``scripts/options_doc.py`` generates from the configuration schema: every key that
``dataclasses.fields`` gives (inherited fields included, ``ClassVar`` constants not), its type, default and
docstring, and the config groups of ``configs/``; never out of date."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from typing import Any, ClassVar, Optional
from helpers.processes import ROOT

while not (ROOT / "pyproject.toml").is_file():  # (wherever under tests/ this file lives)
    ROOT = ROOT.parent


def options_doc():
    spec = importlib.util.spec_from_file_location("options_doc", ROOT / "scripts" / "options_doc.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["options_doc"] = module  # (its dataclasses look their module up)
    spec.loader.exec_module(module)
    return module


def test_options_page_is_current():
    module = options_doc()
    assert (ROOT / "docs" / "options.md").read_text(encoding="utf-8") == module.render(), (
        "docs/options.md is out of date: run python scripts/options_doc.py"
    )


def test_check_mode_fails_on_a_stale_page(tmp_path, monkeypatch, capsys):
    module = options_doc()
    stale = tmp_path / "options.md"
    stale.write_text(module.render().replace("| `trainer.lr` |", "| `trainer.learning_rate` |"), encoding="utf-8")
    monkeypatch.setattr(module, "PAGE", stale)
    monkeypatch.setattr(module, "ROOT", tmp_path)
    assert module.main(["--check"]) == 1
    assert "out of date" in capsys.readouterr().err
    assert module.main([]) == 0 and module.main(["--check"]) == 0


def test_every_schema_field_is_on_the_page_and_no_constant():
    from evolve_train.config import Config, EwcConfig, L2InitConfig

    text = (ROOT / "docs" / "options.md").read_text(encoding="utf-8")
    keys = options_doc().schema_keys(Config)
    assert {"trainer.lr", "eval.heldout_text", "seed", "method.ewc.coef", "method.ewc.anchor_dtype"} <= set(keys)
    for key in keys:
        assert f"| `{key}` |" in text, key
    assert "method.l2_init.section" not in text and "method.ewc.section" not in text  # ClassVar constants
    inherited = {f.name for f in dataclasses.fields(L2InitConfig)}
    assert inherited and all(f"| `method.ewc.{name}` |" in text for name in inherited)
    assert {f.name for f in dataclasses.fields(EwcConfig)} > inherited
    for group in ("model", "method", "data", "trainer", "eval", "logger"):
        assert f"## `{group}`" in text, group
    assert "| `seed` | int | `0` |" in text and "| `method.ewc.anchor_dtype` | one of `float32`, `bfloat16` |" in text


def test_the_groups_table_lists_every_folder_of_configs():
    text = (ROOT / "docs" / "options.md").read_text(encoding="utf-8")
    folders = sorted(p.name for p in (ROOT / "configs").iterdir() if p.is_dir() and p.name != "hydra")
    assert list(options_doc().config_groups()) == folders
    assert f"{len(folders)} groups" in text
    for folder in folders:
        assert f"| `{folder}` |" in text


@dataclasses.dataclass
class Base:
    x: int = 1
    tag: ClassVar[str] = "b"


@dataclasses.dataclass
class Child(Base):
    y: Optional[str] = None


@dataclasses.dataclass
class Top:
    child: Child = dataclasses.field(default_factory=Child)
    notes: dict[str, Any] = dataclasses.field(default_factory=dict)


def test_keys_types_and_docstrings_come_from_fields_and_source():
    module = options_doc()
    source = (
        'class Base:\n    x: int = 1\n    """The x."""\n    tag: ClassVar[str] = "b"\n'
        'class Child(Base):\n    y: Optional[str] = None\n    """The y."""\n'
    )
    docs = module.docstrings(source)
    assert docs == {"Base": {"x": "The x."}, "Child": {"y": "The y."}}

    sections = module.sections(Top, docs)
    assert [(s.path, [(k.key, k.type, k.doc) for k in s.keys]) for s in sections] == [
        ("", [("notes", "dict[str, any]", "")]),
        ("child", [("child.x", "int", "The x."), ("child.y", "str or null", "The y.")]),
    ]
