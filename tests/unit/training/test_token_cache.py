"""The tokenized cache (training/token_cache.py), memory-mapped rows (training/rows.py) and streamed training
files (data/corpus.py): written once, hit afterwards with the same rows bitwise, keyed on everything the rows
depend on, never read half-written, shared by concurrent processes."""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

import numpy as np
import pytest
from datasets import Dataset, concatenate_datasets, load_from_disk

from evolve_train.data.corpus import ArrowRecords, concat_records, step_fingerprint, write_int_rows
from evolve_train.data.loaders.common import read_training_file
from evolve_train.data.schema import TimeStep
from evolve_train.errors import DataError
from evolve_train.models.text_format import make_text_format
from evolve_train.models.build import train_tokenizer
from evolve_train.training import token_cache
from evolve_train.training.examples import as_array_rows
from evolve_train.training.rows import TokenRows
from evolve_train.training.token_cache import TokenCache, token_key
from helpers.data import DOCS, step_of


def write_docs(path: Path, docs=DOCS) -> Path:
    path.write_text(
        "".join(json.dumps({"text": text, "doc_id": f"d{k}"}) + "\n" for k, text in enumerate(docs)), encoding="utf-8"
    )
    return path


@pytest.fixture(scope="module")
def text_format():
    return make_text_format(train_tokenizer(DOCS, 300))


def same_rows(a, b) -> bool:
    return len(a) == len(b) and all(
        set(x) == set(y) and all(x[k].dtype == y[k].dtype and np.array_equal(x[k], y[k]) for k in x)
        for x, y in zip(a, b)
    )


def test_token_rows_equal_as_array_rows_plain_mapped_and_memory_mapped(tmp_path):
    data = Dataset.from_dict(
        {
            "input_ids": [[1, 2, 3], [4], [5, 6], [7, 8, 9, 10]],
            "labels": [[-100, 2, 3], [4], [-100, 6], [7, 8, -100, 10]],
        }
    )
    data.save_to_disk(str(tmp_path / "d"))
    mapped = load_from_disk(str(tmp_path / "d"))
    replay_like = concatenate_datasets([mapped, mapped.select([3, 0, 3])])  # chunks + an index mapping
    for examples in (data, data.select([2, 0]), data.shuffle(seed=1), mapped, replay_like, data.select([])):
        rows = TokenRows(examples)
        expected = as_array_rows(examples)
        assert same_rows(list(rows), expected)
        assert rows.lengths.tolist() == [len(r["input_ids"]) for r in expected]
        assert all(r["input_ids"].dtype == np.int64 for r in rows)
    with pytest.raises(IndexError):
        TokenRows(data)[4]


def test_token_rows_of_a_cache_entry_read_the_file_and_equal_the_mapped_rows(tmp_path, text_format):
    step = step_of(write_docs(tmp_path / "docs.jsonl"), tmp_path / "cache")
    examples = TokenCache(tmp_path / "cache", text_format).examples(step, "clm", 16)
    rows = TokenRows(examples)
    read = [values.where or not values.view.size for column in rows._flat.values() for values in column.values]
    assert all(read)  # plain reads (a chunk with no document start has no segment values to read)
    replay_like = concatenate_datasets([examples, examples.select([5, 0, 5])])  # chunks + an index mapping
    for data in (examples, replay_like, examples.shuffle(seed=2)):
        assert same_rows(list(TokenRows(data)), as_array_rows(data))
    assert rows[3]["input_ids"].dtype == np.int64 and len(rows[3]["input_ids"]) == rows.lengths[3]


def test_written_once_then_hit_with_the_same_rows(tmp_path, text_format, caplog, monkeypatch):
    step = step_of(write_docs(tmp_path / "docs.jsonl"), tmp_path / "cache")
    calls = []
    encode = type(text_format).encode_batches
    monkeypatch.setattr(type(text_format), "encode_batches", lambda self, *a: calls.append(a) or encode(self, *a))
    with caplog.at_level(logging.INFO, logger="evolve_train.training.token_cache"):
        first = TokenCache(tmp_path / "cache", text_format).examples(step, "clm", 16)
        second = TokenCache(tmp_path / "cache", text_format).examples(step, "clm", 16)
    messages = [r.getMessage() for r in caplog.records]
    assert [m.split(" ")[2] for m in messages] == ["miss", "hit"] and len(calls) == 1
    entry = Path(messages[1].split(" ")[3])
    assert entry.parent == tmp_path / "cache" / "tokens" and (entry / token_cache.META).is_file()
    assert sorted(p.name for p in entry.iterdir()) == [token_cache.ROWS, token_cache.META]
    assert not list((tmp_path / "cache" / "corpora").rglob("cache-*.arrow"))  # nothing written next to the corpus
    uncached = text_format.encode_step(step, "clm", 16)
    assert same_rows(TokenRows(second), TokenRows(first)) and same_rows(TokenRows(second), TokenRows(uncached))


def test_key_follows_data_tokenizer_seq_len_objective_and_encoder(tmp_path, text_format):
    step = step_of(write_docs(tmp_path / "docs.jsonl"), tmp_path / "cache")
    base = token_key(step, text_format, {"objective": "clm", "seq_len": 16})
    assert token_key(step_of(tmp_path / "docs.jsonl"), text_format, {"objective": "clm", "seq_len": 16}) == base
    changed = step_of(write_docs(tmp_path / "other.jsonl", DOCS[:-1] + ["A changed last document."]))
    as_list = TimeStep(index=0, name="2019", texts=list(step.texts))
    keys = [
        token_key(changed, text_format, {"objective": "clm", "seq_len": 16}),
        token_key(step, make_text_format(train_tokenizer(DOCS, 280)), {"objective": "clm", "seq_len": 16}),
        token_key(step, text_format, {"objective": "clm", "seq_len": 32}),
        token_key(step, text_format, {"objective": "masked_entity", "seq_len": 16}),
        token_key(step, make_text_format(text_format.tokenizer, seq2seq=True), {"objective": "clm", "seq_len": 16}),
        token_key(as_list, text_format, {"objective": "clm", "seq_len": 16}),
    ]
    assert base not in keys and len(set(keys)) == len(keys)
    assert token_key(as_list, text_format, {"objective": "clm", "seq_len": 16}) == token_key(
        TimeStep(index=1, name="x", texts=list(step.texts)), text_format, {"objective": "clm", "seq_len": 16}
    )


def test_an_interrupted_write_is_never_read(tmp_path, text_format, monkeypatch, caplog):
    step = step_of(write_docs(tmp_path / "docs.jsonl"), tmp_path / "cache")
    cache = TokenCache(tmp_path / "cache", text_format)

    def killed(batches, tmp, step, settings, vocab):
        write_int_rows(batches, str(tmp / token_cache.ROWS))  # the rows are written, the meta not: then it dies
        raise KeyboardInterrupt

    monkeypatch.setattr(token_cache, "_save", killed)
    with pytest.raises(KeyboardInterrupt):
        cache.examples(step, "clm", 16)
    monkeypatch.undo()
    tokens = tmp_path / "cache" / "tokens"
    assert not [p for p in tokens.iterdir() if not p.name.startswith(".")]  # no entry under a final name
    key = token_key(step, text_format, {"objective": "clm", "seq_len": 16})
    left = tokens / f".{key}.tmp-99999"  # what a kill -9 in the middle of a write leaves
    Dataset.from_dict({"input_ids": [[1]], "labels": [[1]]}).save_to_disk(str(left))
    (tokens / key).mkdir()  # and a final name without its meta (a copy cut short): not an entry either
    with caplog.at_level(logging.INFO, logger="evolve_train.training.token_cache"):
        rows = TokenRows(cache.examples(step, "clm", 16))
    assert "tokenized cache miss" in caplog.text and not left.exists()
    assert same_rows(rows, TokenRows(text_format.encode_step(step, "clm", 16)))


class NoCollectives:
    """An accelerator of two ranks whose collectives fail: preparing rows must not wait in one."""

    def __init__(self, index: int):
        self.process_index, self.num_processes = index, 2

    def main_process_first(self):
        raise AssertionError("tokenized rows prepared inside a collective")

    wait_for_everyone = main_process_first


def test_ranks_share_an_entry_through_the_file_lock_not_a_collective(tmp_path, text_format, caplog):
    step = step_of(write_docs(tmp_path / "docs.jsonl"), tmp_path / "cache")
    results = {}

    def rank(index: int) -> None:
        results[index] = TokenCache(tmp_path / "cache", text_format, NoCollectives(index)).examples(step, "clm", 16)

    with caplog.at_level(logging.INFO, logger="evolve_train.training.token_cache"):
        threads = [threading.Thread(target=rank, args=(index,)) for index in (1, 0)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert sorted(r.getMessage().split(" ")[2] for r in caplog.records) == ["hit", "miss"]
    assert same_rows(TokenRows(results[0]), TokenRows(results[1]))
    assert all(r.cache_files[0]["filename"].startswith(str(tmp_path / "cache" / "tokens")) for r in results.values())


def test_a_streamed_file_is_an_arrow_sequence_and_errors_name_file_line_field(tmp_path):
    path = write_docs(tmp_path / "docs.jsonl")
    texts = step_of(path, tmp_path / "cache").texts
    assert isinstance(texts, ArrowRecords) and texts.dataset.cache_files  # memory-mapped from the cache dir
    assert list(texts) == [{"text": t, "doc_id": f"d{k}"} for k, t in enumerate(DOCS)] and texts[-1] == texts[39]
    assert step_fingerprint(step_of(path)) == step_fingerprint(step_of(path, tmp_path / "cache"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(path.read_text() + json.dumps({"text": 7}) + "\n", encoding="utf-8")
    with pytest.raises(DataError) as err:
        read_training_file(bad, tmp_path / "cache")
    assert (err.value.file, err.value.line, err.value.field) == (str(bad), len(DOCS) + 1, "text")
    assert len(list((tmp_path / "cache" / "corpora").glob("[!.]*"))) == 1  # the bad file left no entry


def test_streamed_batches_equal_the_dataset_for_one_file_many_files_and_memory(tmp_path):
    first, second = write_docs(tmp_path / "a.jsonl"), write_docs(tmp_path / "b.jsonl", DOCS[::-1])
    one, other = step_of(first, tmp_path / "cache").texts, step_of(second, tmp_path / "cache").texts
    both = concat_records([one, other])
    in_memory = step_of(first).texts
    assert not in_memory._files() and len(both._files()) == 2
    for records in (one, both, in_memory):
        streamed = [
            row for batch in records.batches(["doc_id", "text"], size=7) for row in zip(batch["doc_id"], batch["text"])
        ]
        assert streamed == [(r["doc_id"], r["text"]) for r in records.dataset]
        assert all(len(batch["text"]) <= 7 for batch in records.batches(["text"], size=7))
