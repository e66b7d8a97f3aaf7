"""docs/cli.md is what ``scripts/cli_doc.py`` generates from the argument parsers of the console scripts of
pyproject.toml: each tool's ``build_parser()`` builds its parser without running it, and every tool, subcommand
and option is on the page."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "cli.md"


def cli_doc():
    spec = importlib.util.spec_from_file_location("cli_doc", ROOT / "scripts" / "cli_doc.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["cli_doc"] = module
    spec.loader.exec_module(module)
    return module


def test_cli_page_is_current():
    assert PAGE.read_text(encoding="utf-8") == cli_doc().render(), (
        "docs/cli.md is out of date: run python scripts/cli_doc.py"
    )


def test_check_mode_fails_on_a_stale_page(tmp_path, monkeypatch, capsys):
    module = cli_doc()
    stale = tmp_path / "cli.md"
    stale.write_text(module.render().replace("--baseline", "--base"), encoding="utf-8")
    monkeypatch.setattr(module, "PAGE", stale)
    monkeypatch.setattr(module, "ROOT", tmp_path)
    assert module.main(["--check"]) == 1 and "out of date" in capsys.readouterr().err
    assert module.main([]) == 0 and module.main(["--check"]) == 0


def test_the_page_covers_every_console_script():
    scripts = cli_doc().scripts()
    assert set(scripts) == {
        "evolve-train",
        "evolve-score",
        "evolve-data",
        "evolve-report",
        "evolve-gate",
        "evolve-eval",
    }


@pytest.mark.parametrize("command", sorted(cli_doc().scripts()))
def test_every_tool_builds_its_parser_without_running_and_is_documented_whole(command):
    module = importlib.import_module(cli_doc().scripts()[command])
    parser = module.build_parser()
    assert isinstance(parser, argparse.ArgumentParser) and parser.prog == command
    text = PAGE.read_text(encoding="utf-8")
    assert f"## `{command}`" in text
    subs = cli_doc().subcommands(parser)
    for name, sub in subs.items():
        assert f"### `{command} {name}`" in text, f"{command} {name}"
    for each in [parser, *subs.values()]:
        for option in each._option_string_actions:
            if option.startswith("--"):
                assert option in text, f"{each.prog} {option}"
