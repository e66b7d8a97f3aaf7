"""Training corpora in the forms snapshot corpora arrive in: Parquet files, ``datasets`` ``save_to_disk``
folders, ``.jsonl.gz`` and ``.jsonl.zst`` (data/loaders/common.py). Each reads as the same documents as its
JSONL; a file cut short stops before training with the file (and the row) named, leaving nothing written."""

from __future__ import annotations


import pytest
from helpers import tiny_cfg

from evolve_train.data.loaders.common import read_training_file
from evolve_train.data.loaders.temporal_qa import expand_entry
from evolve_train.errors import DataError
from evolve_train.run import train
from helpers.corpus import layout_with, write


DOCS = [
    {"text": f"Document {k}: the river {k % 7} flows past town {k * 3} in spring.", "doc_id": f"d{k}"}
    for k in range(50)
]


PAIRS = [{"input": f"The river {k} flows past <mask>.", "output": f"town {k}"} for k in range(20)]


FORMATS = ["docs.parquet", "docs.jsonl.gz", "docs.jsonl.zst", "saved"]


@pytest.mark.parametrize("name", FORMATS)
@pytest.mark.parametrize("cached", [False, True])
def test_each_format_reads_as_its_jsonl(tmp_path, name, cached):
    cache = tmp_path / "cache" if cached else None
    _, expected = read_training_file(write(tmp_path / "docs.jsonl", DOCS))
    pairs, texts = read_training_file(write(tmp_path / name, DOCS), cache)
    assert not len(pairs) and list(texts) == list(expected) == DOCS
    pairs, _ = read_training_file(write(tmp_path / f"pairs-{name}", PAIRS), cache)
    assert list(pairs) == PAIRS


def test_folders_and_globs_pick_up_the_formats(tmp_path):
    (tmp_path / "corpus").mkdir()
    for name in FORMATS:
        write(tmp_path / "corpus" / name, DOCS)
    found = sorted(path.name for path, _ in expand_entry(str(tmp_path / "corpus"), None, "2019"))
    assert found == sorted(FORMATS)
    assert [p.name for p, _ in expand_entry(str(tmp_path / "corpus" / "saved"), None, "2019")] == ["saved"]


def test_truncated_and_bad_files_name_the_file_and_row(tmp_path):
    for name in ("docs.jsonl.gz", "docs.jsonl.zst"):
        compressed = write(tmp_path / name, DOCS)
        compressed.write_bytes(compressed.read_bytes()[:-20])
        with pytest.raises(DataError, match="truncated or corrupt") as err:
            read_training_file(compressed, tmp_path / "cache")
        assert err.value.file == str(compressed) and 1 <= err.value.line <= len(DOCS)
    parquet = write(tmp_path / "docs.parquet", DOCS)
    parquet.write_bytes(parquet.read_bytes()[:-100])
    with pytest.raises(DataError, match="Parquet") as err:
        read_training_file(parquet, tmp_path / "cache")
    assert err.value.file == str(parquet)
    bad = write(tmp_path / "bad.parquet", DOCS[:20] + [{"text": "", "doc_id": "x"}])
    with pytest.raises(DataError, match="empty 'text'") as err:
        read_training_file(bad, tmp_path / "cache")
    assert (err.value.file, err.value.line, err.value.field) == (str(bad), 21, "text")
    assert not [p for p in (tmp_path / "cache" / "corpora").iterdir() if not p.name.startswith(".")]


def test_a_truncated_corpus_stops_the_run_before_training(tmp_path):
    overrides = layout_with(tmp_path, "docs.jsonl.gz")
    corpus = tmp_path / "data" / "docs.jsonl.gz"
    corpus.write_bytes(corpus.read_bytes()[:-40])
    run_dir = tmp_path / "run"
    with pytest.raises(DataError, match="truncated or corrupt") as err:
        train(tiny_cfg(run_dir, *overrides))
    assert err.value.file == str(corpus)
    assert not run_dir.exists() or not any(run_dir.iterdir())  # nothing written to the run dir


@pytest.mark.parametrize("name", ["docs.jsonl", "docs.parquet", "saved"])
def test_the_text_field_is_configurable(tmp_path, name):
    renamed = [{"content": d["text"], "doc_id": d["doc_id"]} for d in DOCS]
    path = write(tmp_path / name, renamed)
    _, texts = read_training_file(path, tmp_path / "cache", text_field="content")
    assert list(texts) == DOCS
    bad = write(tmp_path / f"bad-{name}", renamed[:5] + [{"content": " ", "doc_id": "x"}])
    with pytest.raises(DataError) as err:
        read_training_file(bad, tmp_path / "cache", text_field="content")
    assert (err.value.file, err.value.line, err.value.field) == (str(bad), 6, "content")
