"""Compact tokenized rows (training/compact_rows.py): ids in the vocabulary's smallest unsigned type, labels and
positions derived when read; read back (memory-mapped or in memory) they are exactly the rows the text format
encodes, and a run trains on the same batches as on the plain rows."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest
from datasets import Dataset, concatenate_datasets

from evolve_train.data.corpus import rows_in_memory as plain_rows
from evolve_train.data.schema import TimeStep
from evolve_train.methods.mixing import take_tokens
from evolve_train.models.build import train_tokenizer
from evolve_train.models.text_format import make_text_format
from evolve_train.training import compact_rows
from evolve_train.training.compact_rows import decode_row, id_type
from evolve_train.training.examples import as_array_rows
from evolve_train.training.rows import TokenRows
from evolve_train.training.token_cache import TokenCache


DOCS = [f"Document {k} says that the river {k % 7} flows past town {k * 3} in spring." * (1 + k % 5) for k in range(60)]


TEXTS = [{"text": text, "doc_id": f"d{k}"} for k, text in enumerate(DOCS)]


PAIRS = [{"input": f"The river {k} flows past <mask> in spring.", "output": f"town {k * 3}"} for k in range(30)]


@pytest.fixture(scope="module")
def text_format():
    return make_text_format(train_tokenizer(DOCS, 300))


def plain(text_format, step, objective, seq_len=32):
    return as_array_rows(text_format.encode_step(step, objective, seq_len))


def same(a, b) -> bool:
    return len(a) == len(b) and all(
        set(x) == set(y) and all(x[k].dtype == y[k].dtype and np.array_equal(x[k], y[k]) for k in x)
        for x, y in zip(a, b)
    )


@pytest.mark.parametrize("objective", ["clm", "masked_entity"])
@pytest.mark.parametrize("cached", [False, True])
def test_compact_rows_read_back_as_the_encoded_rows(text_format, tmp_path, objective, cached):
    step = TimeStep(index=0, name="2019", pairs=PAIRS if objective == "masked_entity" else [], texts=TEXTS)
    examples = TokenCache(tmp_path if cached else None, text_format).examples(step, objective, 32)
    assert examples.data.schema.field("input_ids").type == pa.list_(pa.uint16())
    assert "labels" not in examples.column_names and "position_ids" not in examples.column_names
    expected = plain(text_format, step, objective)
    assert same(list(TokenRows(examples)), expected)
    assert same(as_array_rows(examples), expected)
    if objective == "clm":
        assert any((row["labels"] == -100).sum() > 1 for row in expected)  # several documents per row
        assert any(row["position_ids"][0] == 0 and row["position_ids"].max() < 31 for row in expected)


def test_selected_and_concatenated_compact_rows_read_as_plain_ones(text_format):
    step = TimeStep(index=0, name="2019", pairs=[], texts=TEXTS)
    examples = TokenCache(None, text_format).examples(step, "clm", 16)
    mixed = concatenate_datasets([examples.select([3, 1]), examples.shuffle(seed=1)])
    expected = plain(text_format, step, "clm", 16)
    order = [3, 1] + examples.shuffle(seed=1)._indices.column(0).to_pylist()
    assert same(list(TokenRows(mixed)), [expected[i] for i in order])


def test_a_cut_row_of_the_mix_keeps_its_labels_and_positions(text_format):
    step = TimeStep(index=0, name="2019", pairs=[], texts=TEXTS)
    pool = TokenCache(None, text_format).examples(step, "clm", 16)
    rows, _ = take_tokens(pool, 37, seed=0)
    decoded = list(TokenRows(rows))
    assert sum(len(r["input_ids"]) for r in decoded) == 37
    whole = list(TokenRows(pool))
    last = decoded[-1]
    source = next(r for r in whole if np.array_equal(r["input_ids"][: len(last["input_ids"])], last["input_ids"]))
    for name in last:
        assert np.array_equal(last[name], source[name][: len(last["input_ids"])])


def test_seq2seq_labels_are_stored_as_a_column():
    batch = {"input_ids": [[5, 6, 7], [8]], "labels": [[9, 1], [2, 3, 1]]}
    record = compact_rows.compact_batch(batch, pa.uint16())
    assert record.schema.names == ["input_ids", "labels"]
    rows = [
        decode_row({name: record.column(name)[i].values.to_numpy() for name in record.schema.names}) for i in [0, 1]
    ]
    assert [r["labels"].tolist() for r in rows] == batch["labels"]


def test_id_type_is_the_smallest_that_holds_the_vocabulary():
    assert id_type(50_257) == pa.uint16() and id_type(1 << 16) == pa.uint16()
    assert id_type((1 << 16) + 1) == pa.uint32() and id_type(128_256) == pa.uint32()
    with pytest.raises(ValueError, match="does not fit"):
        compact_rows.compact_batch({"input_ids": [[70_000]], "labels": [[70_000]]}, pa.uint16())


def test_compact_rows_take_an_eighth_of_the_plain_rows_bytes(text_format, tmp_path):
    step = TimeStep(index=0, name="2019", pairs=[], texts=TEXTS * 5)
    compact = TokenCache(tmp_path, text_format).examples(step, "clm", 256)
    plain_ = plain_rows(text_format.encode_batches(step, "clm", 256))
    tokens = sum(len(ids) for ids in compact["input_ids"])
    entry = next(tmp_path.glob("tokens/*/"))
    on_disk = (entry / "rows.arrow").stat().st_size / tokens
    print(f"{on_disk:.2f} bytes per token on disk, {plain_.data.nbytes / tokens:.2f} for plain rows")
    assert on_disk < 3 and plain_.data.nbytes / tokens > 20  # documents of ~50 tokens: 2 bytes + 12 per document
    meta = json.loads((entry / "token_meta.json").read_text())
    assert meta["rows"] == len(compact)


def test_plain_rows_still_decode():
    row = {"input_ids": [1, 2], "labels": [-100, 2]}
    assert {k: v.tolist() for k, v in decode_row(row).items()} == row
    assert Dataset.from_dict({"input_ids": [[1]], "labels": [[1]]}).column_names == ["input_ids", "labels"]
