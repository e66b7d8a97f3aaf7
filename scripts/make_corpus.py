#!/usr/bin/env python
"""Write a plain-text JSONL training corpus of a given size, for memory and throughput measurements.

    python scripts/make_corpus.py /tmp/corpus_1g.jsonl --size 1G [--seed 0] [--words 20000]

Each line is ``{"text": ..., "doc_id": "d<k>"}``: a document of 50-2000 words drawn (seeded) from a synthetic
vocabulary with a Zipf-like frequency, in sentences. The file is cut at the first document that reaches the
size (so it is ``--size`` plus at most one document). Write it outside the repository (e.g. under /tmp).
docs/data.md ("Corpora larger than memory") uses it to measure the peak RSS of training one time step.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    """``250M``, ``1G``, ``4096`` -> bytes."""
    text = text.strip().upper().removesuffix("B")
    if text and text[-1] in UNITS:
        return int(float(text[:-1]) * UNITS[text[-1]])
    return int(text)


def vocabulary(size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` distinct pronounceable words of 2-10 letters."""
    consonants, vowels = list("bcdfghjklmnprstvwz"), list("aeiou")
    words: set[str] = set()
    while len(words) < size:
        syllables = rng.integers(1, 5)
        words.add("".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(syllables)))
    return np.array(sorted(words))


def documents(rng: np.random.Generator, words: np.ndarray):
    """Endless documents: sentences of 5-20 words, Zipf-weighted."""
    weights = 1.0 / np.arange(1, len(words) + 1)
    weights /= weights.sum()
    while True:
        ids = rng.choice(len(words), size=int(rng.integers(50, 2000)), p=weights)
        tokens = words[ids].tolist()
        cuts = np.cumsum(rng.integers(5, 21, size=len(tokens)))
        sentences, start = [], 0
        for stop in cuts:
            if start >= len(tokens):
                break
            sentence = tokens[start : int(stop)]
            sentences.append(sentence[0].capitalize() + " " + " ".join(sentence[1:]) + ".")
            start = int(stop)
        yield " ".join(sentences)


def write_corpus(path: Path, size: int, seed: int = 0, n_words: int = 20000) -> tuple[int, int]:
    """Write documents to ``path`` until it holds ``size`` bytes; (documents, bytes)."""
    rng = np.random.default_rng(seed)
    words = vocabulary(n_words, rng)
    written = count = 0
    with open(path, "w", encoding="utf-8") as out:
        for count, text in enumerate(documents(rng, words), start=1):
            line = json.dumps({"text": text, "doc_id": f"d{count}"}) + "\n"
            out.write(line)
            written += len(line.encode("utf-8"))
            if written >= size:
                break
    return count, written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path, help="the JSONL file to write (outside the repository)")
    parser.add_argument("--size", default="250M", help="bytes, with K/M/G (default 250M)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--words", type=int, default=20000, help="vocabulary size of the synthetic language")
    args = parser.parse_args(argv)
    args.path.parent.mkdir(parents=True, exist_ok=True)
    count, written = write_corpus(args.path, parse_size(args.size), args.seed, args.words)
    print(f"{args.path}: {count} documents, {written / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
