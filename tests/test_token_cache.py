"""The tokenized cache (training/token_cache.py), memory-mapped rows (training/rows.py) and streamed training
files (data/corpus.py): written once, hit afterwards with the same rows bitwise, keyed on everything the rows
depend on, never read half-written, shared by concurrent processes."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
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
from evolve_train.run import train
from evolve_train.training import token_cache
from evolve_train.training.examples import as_array_rows
from evolve_train.training.rows import TokenRows
from evolve_train.training.token_cache import TokenCache, token_key
from helpers import tiny_cfg, wall_clock
from helpers.processes import ROOT
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


# ----------------------------------------------------------------------------------- rows


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


# ----------------------------------------------------------------------------------- the cache


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


def test_two_processes_share_one_entry(tmp_path):
    write_docs(tmp_path / "docs.jsonl")
    script = textwrap.dedent(f"""
        import logging, sys, numpy as np
        logging.basicConfig(level=logging.INFO, format="%(message)s")
        from helpers.data import DOCS, step_of
        from evolve_train.models.text_format import make_text_format
        from evolve_train.models.build import train_tokenizer
        from evolve_train.training.rows import TokenRows
        from evolve_train.training.token_cache import TokenCache
        from pathlib import Path
        root = Path({str(tmp_path)!r})
        rows = TokenRows(TokenCache(root / "cache", make_text_format(train_tokenizer(DOCS, 300))).examples(
            step_of(root / "docs.jsonl", root / "cache"), "clm", 16))
        np.save(root / ("ids-" + sys.argv[1] + ".npy"), np.concatenate([r["input_ids"] for r in rows]))
    """)
    here = ROOT / "tests"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(here), str(here.parent), os.environ.get("PYTHONPATH", "")])}
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(k)], stderr=subprocess.PIPE, text=True, env=env)
        for k in range(2)
    ]
    logs = [p.communicate(timeout=120)[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), logs
    outcomes = sorted(
        "miss" if "tokenized cache miss" in text else "hit" if "tokenized cache hit" in text else "?" for text in logs
    )
    assert outcomes == ["hit", "miss"]  # one tokenized, the other waited on the lock and mapped its entry
    assert np.array_equal(np.load(tmp_path / "ids-0.npy"), np.load(tmp_path / "ids-1.npy"))
    assert len([p for p in (tmp_path / "cache" / "tokens").iterdir() if not p.name.startswith(".")]) == 1


# ----------------------------------------------------------------------------------- streamed training files


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


def test_second_run_reads_the_cache(tmp_path, caplog):
    overrides = (
        f"data.cache_dir={tmp_path / 'cache'}",
        "trainer.epochs_step0=1",
        "trainer.epochs=1",
        "eval.max_new_tokens=4",
        "method=replay",
    )
    with caplog.at_level(logging.INFO, logger="evolve_train.training.token_cache"):
        train(tiny_cfg(tmp_path / "a", *overrides))
        first = [r.getMessage().split(" ")[2] for r in caplog.records]
        caplog.clear()
        train(tiny_cfg(tmp_path / "b", *overrides))
        second = [r.getMessage().split(" ")[2] for r in caplog.records]
    assert first.count("miss") == 3  # 3 steps, each tokenized once (replay maps the earlier ones: hits)
    assert second == ["hit"] * len(first)  # the same tokenizer trained again, the same keys: nothing tokenized
    metrics = [(tmp_path / run / "metrics.jsonl").read_text() for run in ("a", "b")]
    strip = [
        [{k: v for k, v in json.loads(line).items() if not wall_clock(k)} for line in m.splitlines()] for m in metrics
    ]
    assert strip[0] == strip[1]  # the same results from cached rows


# ----------------------------------------------------------------------------------- resident memory


def mapped_kb(path: Path) -> int:
    """Resident kB of every mapping of ``path`` in this process (``/proc/self/smaps``): pages read through a
    memory map count, pages read with plain reads do not."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):  # a mapping's first line
            inside = len(head) >= 6 and head[-1] == str(path)
        elif inside and head and head[0] == "Rss:":
            total += int(head[1])
    return total


BIG = [f"Record {k}: " + " ".join(f"w{(k * 31 + j) % 997}" for j in range(60)) for k in range(12000)]  # ~4 MB


@pytest.mark.skipif(not Path("/proc/self/smaps").is_file(), reason="needs /proc/self/smaps (Linux)")
def test_scans_and_tokenization_keep_the_corpus_and_rows_out_of_resident_memory(tmp_path, text_format):
    """Iterating a streamed corpus and writing a cache entry read the Arrow files with plain reads: the
    process's resident mapped pages stay a small fraction of the data, where iterating the dataset through
    its memory map (the check that the measurement sees pages) makes most of the file resident."""
    step = step_of(write_docs(tmp_path / "big.jsonl", BIG), tmp_path / "cache")
    corpus = Path(step.texts.dataset.cache_files[0]["filename"])
    size_kb, opened = corpus.stat().st_size // 1024, mapped_kb(corpus)  # opening reads headers (~0.2 MB here)
    assert size_kb > 3000 and opened < 0.1 * size_kb
    assert [r["text"] for r in step.texts] == BIG and mapped_kb(corpus) < opened + 0.05 * size_kb  # streamed
    examples = TokenCache(tmp_path / "cache", text_format).examples(step, "clm", 64)  # a miss: encode and write
    rows_file = Path(examples.cache_files[0]["filename"])
    assert mapped_kb(corpus) < opened + 0.05 * size_kb
    rows_kb = rows_file.stat().st_size // 1024
    assert mapped_kb(rows_file) < 0.05 * rows_kb  # written, then mapped untouched
    rows = TokenRows(examples)
    order = np.random.default_rng(0).permutation(len(rows))[:400]  # what the loop does: rows at random
    assert sum(len(rows[int(i)]["input_ids"]) for i in order) > 0 and mapped_kb(rows_file) < 0.05 * rows_kb
    assert sum(len(batch["text"]) for batch in step.texts.dataset.iter(batch_size=1000)) == len(BIG)
    assert mapped_kb(corpus) > 0.5 * size_kb  # the map's pages, read through it, are resident


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
