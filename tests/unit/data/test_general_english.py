"""The general English corpus shipped for ``data.mix_files`` (``data/general_english``, its ``SOURCE.md``):
thirty one-document ``.txt`` files of 120-220 words, disjoint from the held-out general text that perplexity is
measured on (no shared 6-word sequence), read by ``mix_corpus`` as exactly thirty documents."""

from __future__ import annotations

import re
from pathlib import Path
from helpers.processes import ROOT

CORPUS = ROOT / "data" / "general_english"
HELDOUT = ROOT / "evolve_train" / "resources" / "heldout_general.txt"
N = 6


def documents() -> list[Path]:
    return sorted(CORPUS.glob("*.txt"))


def words(text: str) -> list[str]:
    """Lowercased, punctuation stripped (an apostrophe joins its word: ``rider's`` -> ``riders``)."""
    return re.sub(r"[^a-z0-9\s]", " ", text.lower().replace("'", "")).split()


def ngrams(text: str, n: int = N) -> set[tuple[str, ...]]:
    w = words(text)
    return {tuple(w[i : i + n]) for i in range(len(w) - n + 1)}


def test_thirty_documents_of_120_to_220_words_without_a_blank_line():
    files = documents()
    assert len(files) == 30
    assert [f.name[:3] for f in files] == [f"{i:02d}_" for i in range(1, 31)]
    for file in files:
        text = file.read_text(encoding="utf-8")
        assert 120 <= len(text.split()) <= 220, file.name
        assert "\n\n" not in text.strip() and all(line.strip() for line in text.strip().splitlines()), file.name


def test_no_six_word_sequence_shared_with_the_heldout_text():
    heldout = ngrams(HELDOUT.read_text(encoding="utf-8"))
    assert heldout  # the held-out text is there and long enough to compare
    for file in documents():
        shared = ngrams(file.read_text(encoding="utf-8")) & heldout
        assert not shared, (file.name, sorted(" ".join(g) for g in shared))


def test_mix_corpus_reads_thirty_documents_and_not_the_source_note(tmp_path):
    from evolve_train.config import DataConfig
    from evolve_train.data.mix import mix_corpus

    assert (CORPUS / "SOURCE.md").is_file()
    corpus = mix_corpus(DataConfig(mix_files=[str(CORPUS)], mix_ratio=0.25, cache_dir=str(tmp_path)))
    assert len(corpus.texts) == 30
    assert sorted(Path(f).name for f in corpus.files) == [f.name for f in documents()]
    texts = {d["text"].strip() for d in corpus.texts}
    assert texts == {f.read_text(encoding="utf-8").strip() for f in documents()}
