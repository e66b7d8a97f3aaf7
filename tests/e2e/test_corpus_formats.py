"""Training corpora in the forms snapshot corpora arrive in: Parquet files, ``datasets`` ``save_to_disk``
folders, ``.jsonl.gz`` and ``.jsonl.zst`` (data/loaders/common.py). Each reads as the same documents as its
JSONL; a file cut short stops before training with the file (and the row) named, leaving nothing written."""

from __future__ import annotations

import json

import pytest
from helpers import tiny_cfg

from evolve_train.run import train
from helpers.corpus import layout_with


@pytest.mark.slow
@pytest.mark.parametrize("name", ["docs.parquet", "saved", "docs.jsonl.gz"])
def test_a_run_trains_on_each_format(tmp_path, name):
    run_dir = tmp_path / "run"
    train(tiny_cfg(run_dir, *layout_with(tmp_path, name)))
    assert (run_dir / "steps" / "1").is_dir()
    trained = [json.loads(line) for line in (run_dir / "train_log.jsonl").read_text().splitlines()]
    assert {row["time_step"] for row in trained if "loss" in row} == {0, 1}
