"""Rewrite references to the metric spec by its old file name into links to docs/metrics.md's sections.

    python scripts/relink_metrics.py [--check]

Each ``<old name> §N`` (also ``§N, §M``, ``section N``, ``sections N-M``) becomes ``docs/metrics.md#<anchor>`` —
a Markdown link in ``*.md`` files — using the anchors of docs/metrics.md's numbered headings. Running it twice
changes nothing the second time. ``--check`` only lists the files it would change (exit status 1 if any)."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = "docs/metrics.md"
OLD = "METRICS" + r"\.md"  # spelled in two pieces so this file does not name the old file itself


def anchor(title: str) -> str:
    """GitHub's heading anchor: lowercase, punctuation other than ``-`` and ``_`` dropped, spaces to ``-``."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def section_anchors(spec: Path = ROOT / SPEC) -> dict[str, str]:
    """``{"4": "4-paired-temporal-metrics", ...}`` from the ``## N. Title`` headings of docs/metrics.md."""
    found = {}
    for line in spec.read_text(encoding="utf-8").splitlines():
        match = re.match(r"##\s+(\d+)\.\s+(.*)", line)
        if match:
            found[match.group(1)] = anchor(f"{match.group(1)}. {match.group(2)}")
    return found


def _numbers(text: str) -> list[str]:
    """``"§9, §11"`` -> ``["9", "11"]``; ``"sections 1-2"`` -> ``["1", "2"]``."""
    numbers = []
    for low, high in re.findall(r"(\d+)(?:\s*[-–]\s*(\d+))?", text):
        numbers.extend(str(n) for n in range(int(low), int(high or low) + 1))
    return numbers


REFERENCE = re.compile(
    rf"(?:shared/)?{OLD}(?P<poss>'s)?"
    r"(?P<sections>(?:\s*§\s*\d+(?:\s*[-–]\s*\d+)?(?:\s*,\s*§\s*\d+)*)|(?:\s+sections?\s+\d+(?:\s*[-–]\s*\d+)?))?"
)


def rewrite(text: str, markdown: bool, prefix: str, anchors: dict[str, str]) -> str:
    """``text`` with every reference replaced; ``prefix`` is the path from the file's folder to docs/metrics.md."""

    def one(number: str) -> str:
        if number not in anchors:
            raise SystemExit(f"{SPEC} has no section {number}")
        target = f"{prefix}#{anchors[number]}"
        return f"[{SPEC} §{number}]({target})" if markdown else f"{SPEC}#{anchors[number]}"

    def replace(match: re.Match) -> str:
        sections = match.group("sections")
        poss = match.group("poss") or ""
        if not sections:
            return (f"[{SPEC}]({prefix})" if markdown else SPEC) + poss
        return ", ".join(one(n) for n in _numbers(sections)) + poss

    return REFERENCE.sub(replace, text)


# This script, and the vocabulary test whose examples of the old name must stay as they are.
KEEP = {Path(__file__).resolve(), ROOT / "tests" / "test_vocabulary.py"}


def tracked_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True, text=True)
    return [ROOT / name for name in listed.stdout.split("\0") if name]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="list the files that would change; change nothing")
    args = parser.parse_args(argv)
    anchors = section_anchors()
    changed = []
    for path in tracked_files():
        if path in KEEP or not path.is_file() or path.suffix in {".png", ".pt", ".bin"}:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        markdown = path.suffix == ".md"
        prefix = Path(os.path.relpath(ROOT / SPEC, path.parent)).as_posix()
        new = rewrite(text, markdown, prefix, anchors)
        if new != text:
            changed.append(path.relative_to(ROOT).as_posix())
            if not args.check:
                path.write_text(new, encoding="utf-8")
    for name in changed:
        print(name)
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
