"""Every `python train.py ...` / `evolve-eval ...` command shown in configs/ comments, the README and docs/
composes: each override it passes parses and names a real key (the form a reader copies must work)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

import evolve_train.config  # noqa: F401  (registers the typed schema, base_config)

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
COMMAND = re.compile(r"(?:python3? train\.py|evolve-eval)\s(.*)")
PLACEHOLDERS = ("...", "…", "<", "KEY=", "OVERRIDE")


def _joined_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) with backslash continuations joined; YAML comment markers dropped."""
    out, pending, first = [], "", 0
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        text = line.lstrip("# ").rstrip() if path.suffix == ".yaml" else line.strip()
        if path.suffix == ".yaml" and not line.lstrip().startswith("#"):
            continue
        if not pending:
            first = number
        if text.endswith("\\"):
            pending += text[:-1] + " "
            continue
        out.append((first, pending + text))
        pending = ""
    return out


def _first_of_sweep(value: str) -> str:
    """``a,b`` (a sweep) -> ``a``; commas inside brackets or braces belong to a list/dict value."""
    depth = 0
    for k, char in enumerate(value):
        depth += char in "[{(" and 1 or (-1 if char in "]})" else 0)
        if char == "," and depth == 0:
            return value[:k]
    return value


def documented_commands() -> list[tuple[str, list[str]]]:
    files = sorted(CONFIGS.rglob("*.yaml")) + [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
    found = []
    for path in files:
        for number, text in _joined_lines(path):
            match = COMMAND.search(text.replace("`", " "))
            if not match:
                continue
            try:
                words = shlex.split(match.group(1).split(" #")[0].split("|")[0].split("&&")[0])
            except ValueError:
                continue
            overrides = [
                _first_of_sweep(w)
                for w in words
                if "=" in w
                and not w.startswith("-")
                and not w.startswith(("hydra", "+hydra"))
                and not any(p in w for p in PLACEHOLDERS)
                and re.match(r"^[+~]?[\w./]+=", w)
            ]
            if overrides:
                found.append((f"{path.relative_to(ROOT)}:{number}", overrides))
    return found


COMMANDS = documented_commands()


def test_the_documents_show_commands():
    assert len(COMMANDS) >= 10
    assert any("temporal_qa.yaml" in where for where, _ in COMMANDS)


@pytest.mark.parametrize("where, overrides", COMMANDS, ids=[where for where, _ in COMMANDS])
def test_documented_overrides_compose(where, overrides):
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        compose(config_name="config", overrides=overrides)
