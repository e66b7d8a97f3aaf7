"""Compact tokenized rows (training/compact_rows.py): ids in the vocabulary's smallest unsigned type, labels and
positions derived when read; read back (memory-mapped or in memory) they are exactly the rows the text format
encodes, and a run trains on the same batches as on the plain rows."""

from __future__ import annotations

import json

import pytest

from evolve_train.models.build import train_tokenizer
from evolve_train.models.text_format import make_text_format
from evolve_train.training import compact_rows
from evolve_train.training.examples import as_array_rows


DOCS = [f"Document {k} says that the river {k % 7} flows past town {k * 3} in spring." * (1 + k % 5) for k in range(60)]


@pytest.fixture(scope="module")
def text_format():
    return make_text_format(train_tokenizer(DOCS, 300))


def plain(text_format, step, objective, seq_len=32):
    return as_array_rows(text_format.encode_step(step, objective, seq_len))


@pytest.mark.parametrize("extra", [("method=replay",), ("method=ewc",), ("method=replay", "data.objective=clm")])
def test_a_run_on_compact_rows_trains_as_on_plain_rows(tmp_path, monkeypatch, extra):
    """The same metrics (losses, perplexities, answers) as a run whose rows are the plain int64 columns."""
    from evolve_train.data import corpus
    from evolve_train.run import train
    from helpers import tiny_cfg, wall_clock

    overrides = ("trainer.epochs_step0=1", "trainer.epochs=1", "eval.max_new_tokens=4", *extra)
    train(tiny_cfg(tmp_path / "compact", *overrides))
    monkeypatch.setattr(compact_rows, "rows_in_memory", lambda batches, vocab: corpus.rows_in_memory(batches))
    train(tiny_cfg(tmp_path / "plain", *overrides))
    metrics = [(tmp_path / run / "metrics.jsonl").read_text().splitlines() for run in ("compact", "plain")]
    strip = [[{k: v for k, v in json.loads(line).items() if not wall_clock(k)} for line in m] for m in metrics]
    assert len(strip[0]) >= 3 and strip[0] == strip[1]
    assert any("loss" in k for row in strip[0] for k in row)
