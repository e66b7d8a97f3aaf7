"""Every relative link of the README and the docs (reference and results pages) reaches a file that exists, and
a link's ``#anchor`` names a heading of the Markdown file it points into (GitHub's heading anchors)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers.processes import ROOT

PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"(?<!\\)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def prose(text: str) -> list[str]:
    """The lines of ``text`` outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def anchor(title: str) -> str:
    """GitHub's anchor of a heading: Markdown code marks and punctuation dropped, lowercase, spaces to ``-``."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found, seen = set(), {}
    for line in prose(path.read_text(encoding="utf-8")):
        match = re.match(r"#{1,6}\s+(.*)", line)
        if match:
            base = anchor(match.group(1))
            count = seen.get(base, 0)
            found.add(base if count == 0 else f"{base}-{count}")
            seen[base] = count + 1
    return found


def test_anchor_follows_github():
    assert anchor("## 9. Time-sliced perplexity"[3:]) == "9-time-sliced-perplexity"
    assert anchor("LoRA's learning rate (`method.lr`)") == "loras-learning-rate-methodlr"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page):
    broken = []
    for line in prose(page.read_text(encoding="utf-8")):
        for target in LINK.findall(line):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            file, _, fragment = target.partition("#")
            path = (page.parent / file).resolve() if file else page
            if not path.exists():
                broken.append(f"{target}: no such file")
            elif fragment and path.suffix == ".md" and fragment not in anchors(path):
                broken.append(f"{target}: no heading #{fragment} in {path.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}:\n" + "\n".join(broken)


def test_results_pages_are_apart_from_reference_pages_and_indexed():
    results = sorted((ROOT / "docs" / "results").glob("*.md"))
    assert results, "docs/results/ holds the dated measurements"
    index = (ROOT / "docs" / "README.md").read_text(encoding="utf-8")
    for page in [*results, *(ROOT / "docs").glob("*.md")]:
        if page.name != "README.md":
            assert page.relative_to(ROOT / "docs").as_posix() in index, f"docs/README.md does not list {page.name}"
    for page in results:  # a results page says when and how its figures were measured
        text = page.read_text(encoding="utf-8")
        assert re.search(r"\b20\d\d-\d\d-\d\d\b", text), f"{page.name}: no date"
        assert "`python " in text or "`evolve-" in text or "bash scripts/" in text, f"{page.name}: no command"
