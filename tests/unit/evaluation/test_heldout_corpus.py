"""The shipped held-out text ``python_docs`` (>= 20,000 words of openly licensed English with its SOURCE.md),
disjoint from the general English mixed into training, and the bootstrap interval over documents that every
held-out perplexity row carries."""

from __future__ import annotations

import importlib.util
import math
import re
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from evolve_train.config import EvalConfig
from evolve_train.evaluation.context import Shards
from evolve_train.evaluation.evaluators.heldout import (
    GENERAL_FILE,
    SHIPPED,
    document_nll,
    document_windows,
    heldout_evaluator,
    heldout_files,
    text_loss,
)
from evolve_train.evaluation.metrics.stats import bootstrap_ratio_ci
from evolve_train.models.build import train_tokenizer
from evolve_train.models.text_format import make_text_format
from helpers.processes import ROOT

PYTHON_DOCS = SHIPPED["python_docs"]
RESOURCES = PYTHON_DOCS.parent


def words(text: str) -> list[str]:
    return re.sub(r"[^a-z0-9\s]", " ", text.lower().replace("'", "")).split()


def ngrams(text: str, n: int = 6) -> set[tuple[str, ...]]:
    w = words(text)
    return {tuple(w[i : i + n]) for i in range(len(w) - n + 1)}


def test_python_docs_is_at_least_20000_words_in_many_documents_with_its_source_and_licence():
    text = PYTHON_DOCS.read_text(encoding="utf-8")
    documents = [d for d in text.split("\n\n") if d.strip()]
    assert len(text.split()) >= 20_000  # a BPE tokenizer gives at least one token per word
    assert len(documents) >= 50 and min(len(d.split()) for d in documents) >= 12
    source = (RESOURCES / "SOURCE.md").read_text(encoding="utf-8")
    assert "Python Software Foundation License" in source and "pydoc_data/topics.py" in source
    licence = (RESOURCES / "PSF_LICENSE.txt").read_text(encoding="utf-8")
    assert "PYTHON SOFTWARE FOUNDATION LICENSE VERSION 2" in licence and "documentation are licensed" in licence
    assert heldout_files(["python_docs", "general"]) == [PYTHON_DOCS, GENERAL_FILE]


def test_python_docs_shares_no_six_word_sequence_with_trained_general_english_or_the_general_text():
    docs = ngrams(PYTHON_DOCS.read_text(encoding="utf-8"))
    mixed = set().union(
        *(ngrams(p.read_text(encoding="utf-8")) for p in (ROOT / "data" / "general_english").glob("*.txt"))
    )
    assert docs and not docs & mixed
    assert not docs & ngrams(GENERAL_FILE.read_text(encoding="utf-8"))


@pytest.mark.skipif(sys.version_info[:3] != (3, 11, 7), reason="the text was extracted from CPython 3.11.7")
def test_the_extraction_script_rebuilds_the_shipped_text():
    spec = importlib.util.spec_from_file_location("make_text", ROOT / "scripts" / "make_python_docs_text.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.build() == PYTHON_DOCS.read_text(encoding="utf-8")


def test_the_ratio_bootstrap_on_hand_cases():
    assert bootstrap_ratio_ci([], []) is None
    # every document the same ratio: the interval is that ratio
    assert bootstrap_ratio_ci([2.0, 4.0, 6.0], [1, 2, 3]) == pytest.approx([2.0, 2.0])
    sums, counts = [1.0, 9.0, 3.0, 30.0], [1, 3, 1, 10]
    low, high = bootstrap_ratio_ci(sums, counts, B=500, seed=1)
    assert low <= sum(sums) / sum(counts) <= high and low < high
    assert bootstrap_ratio_ci(sums, counts, B=500, seed=1) == [low, high]  # seeded


@pytest.fixture(scope="module")
def setup():
    tokenizer = train_tokenizer([GENERAL_FILE.read_text()] * 3, vocab_size=300)
    torch.manual_seed(0)
    lm = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_layer=1, n_embd=32, n_head=2, n_positions=64))
    return make_text_format(tokenizer, False), lm.eval()


def test_per_document_sums_add_up_to_the_text_loss_and_each_token_counts_once(setup):
    text_format, lm = setup
    text = "One short document.\n\nAnother document, a little longer than the first.\n\nA third one."
    windows, owners = document_windows(text_format, text, 8)
    assert [len(w) for w in windows] == [len(o) for o in owners]
    assert sorted(set(sum(owners, []))) == [0, 1, 2]
    sums, counts = document_nll(lm, windows, owners, batch_size=2)
    total, count = text_loss(lm, windows, batch_size=3)
    assert counts.sum() == count == sum(len(w) - 1 for w in windows)
    assert sums.sum() == pytest.approx(total, rel=1e-6) and (counts > 0).all()


def test_every_heldout_row_carries_its_interval_over_documents(setup, tmp_path):
    text_format, lm = setup
    custom = tmp_path / "news.txt"
    custom.write_text("The bridge opened.\n\nThe river rose.\n\nThe town voted on Monday.\n")
    ctx = SimpleNamespace(
        model=lm,
        text_format=text_format,
        checkpoint=1,
        cfg=EvalConfig(heldout_text=["general", str(custom)]),
        shards=Shards(),
    )
    rows = heldout_evaluator(ctx)
    assert [r["set_name"] for r in rows] == ["heldout_general", "news"]
    assert rows[1]["n_documents"] == 3 and rows[0]["n_documents"] >= 5
    for row in rows:
        low, high = row["loss_ci"]
        assert low <= row["loss"] <= high and row["bootstrap"] == 2000
        assert row["perplexity_ci"] == pytest.approx([math.exp(low), math.exp(high)])
        assert np.isfinite(row["perplexity_ci"]).all()


class LockedModel:
    """``model`` whose forward calls take ``lock`` (one forward at a time, as in a process of its own)."""

    def __init__(self, model, lock):
        self.model, self.lock = model, lock

    def __call__(self, *args, **kwargs):
        with self.lock:
            return self.model(*args, **kwargs)

    def eval(self):
        return self

    def parameters(self):
        return self.model.parameters()


@pytest.mark.parametrize("count", [2, 3])
def test_processes_score_shares_of_the_windows_and_sum_bit_for_bit_as_one(setup, count):
    import threading

    from helpers.shards import ThreadShards, World

    text_format, lm = setup
    windows, owners = document_windows(text_format, GENERAL_FILE.read_text(encoding="utf-8"), 16)
    reference = document_nll(lm, windows, owners, batch_size=3)
    world = World(count)
    shards = [ThreadShards(i, count, world=world) for i in range(count)]
    results = [None] * count

    def process(index: int) -> None:
        results[index] = document_nll(LockedModel(lm, world.model_lock), windows, owners, 3, shards[index])

    threads = [threading.Thread(target=process, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for sums, counts in results:
        assert sums.tolist() == reference[0].tolist() and counts.tolist() == reference[1].tolist()  # exact
    loads = shards[0].done_per_process()
    assert sum(loads) == len(windows) and min(loads) > 0 and max(loads) - min(loads) <= 3  # whole batches each
