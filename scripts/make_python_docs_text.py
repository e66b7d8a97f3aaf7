"""Rebuild ``evolve_train/resources/heldout_python_docs.txt`` from the Python documentation text that ships inside
CPython (``Lib/pydoc_data/topics.py``, PSF License Version 2; see ``evolve_train/resources/SOURCE.md``).

    python scripts/make_python_docs_text.py

Keeps each topic's prose: paragraphs whose lines all start at the margin (code, grammar rules and tables are
indented in that text), of at least 12 words, without the ``****`` heading rules. One topic is one document
(its paragraphs on consecutive lines); documents are separated by a blank line, as ``eval.heldout_text`` reads
them. Written in sorted topic order until ``TARGET_WORDS`` words."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pydoc_data.topics

OUT = Path(__file__).resolve().parents[1] / "evolve_train" / "resources" / "heldout_python_docs.txt"
TARGET_WORDS = 24_000
MIN_WORDS = 12


def prose(topic_text: str) -> list[str]:
    paragraphs = []
    for block in re.split(r"\n\s*\n", topic_text):
        lines = [line for line in block.splitlines() if line.strip()]
        if not lines or any(line[0].isspace() for line in lines):
            continue
        if any(re.fullmatch(r"[*=\-~^]{3,}", line.strip()) for line in lines):
            lines = [line for line in lines if not re.fullmatch(r"[*=\-~^]{3,}", line.strip())][1:]
        text = " ".join(line.strip() for line in lines)
        if len(text.split()) >= MIN_WORDS and not text.startswith(">>>"):
            paragraphs.append(text)
    return paragraphs


def build(topics: dict[str, str] = pydoc_data.topics.topics) -> str:
    """The file's text from ``topics`` (name -> the topic's plain text)."""
    documents, words = [], 0
    for name in sorted(topics):
        paragraphs = prose(topics[name])
        if not paragraphs:
            continue
        documents.append("\n".join(paragraphs))
        words += sum(len(p.split()) for p in paragraphs)
        if words >= TARGET_WORDS:
            break
    return "\n\n".join(documents) + "\n"


def main() -> int:
    text = build()
    OUT.write_text(text, encoding="utf-8")
    documents = text.split("\n\n")
    print(f"{OUT.name}: {len(documents)} documents, {len(text.split())} words (Python {sys.version.split()[0]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
