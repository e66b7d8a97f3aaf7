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
from pathlib import Path

import numpy as np
import pytest

from evolve_train.models.text_format import make_text_format
from evolve_train.models.build import train_tokenizer
from evolve_train.run import train
from evolve_train.training.rows import TokenRows
from evolve_train.training.token_cache import TokenCache
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
