"""Generated pages (docs/options.md, docs/cli.md, docs/metrics_glossary.md): write one, or check that the
committed copy is what the code gives, for the small scripts under ``scripts/`` that render them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable, Optional


def write_or_check(
    page: Path, render: Callable[[], str], regenerate: str, what: str, argv: Optional[list[str]] = None
) -> int:
    """``--check``: exit status 1 (and a line naming ``regenerate``) when ``page`` differs from ``render()``;
    without it, write the page. ``what``: where the page comes from, for ``--help``."""
    parser = argparse.ArgumentParser(description=f"write {page.name} from {what}")
    parser.add_argument("--check", action="store_true", help=f"exit 1 if {page.name} is out of date")
    args = parser.parse_args(argv)
    text, shown = render(), page.name if len(page.parts) < 2 else "/".join(page.parts[-2:])
    if args.check:
        current = page.read_text(encoding="utf-8") if page.exists() else ""
        if current != text:
            print(f"{shown} is out of date: run {regenerate}", file=sys.stderr)
            return 1
        print(f"{shown} is up to date")
        return 0
    page.write_text(text, encoding="utf-8")
    print(f"wrote {shown}")
    return 0
