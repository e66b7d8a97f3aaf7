"""The row schema (evaluation/rows.py): one reader, one column order, unchanged bytes on disk, and one paired
comparison, so evolve-gate and evolve-report agree on the same two runs."""

from __future__ import annotations

import json

import pytest

from evolve_train.evaluation.rows import ReportError, column_key, read_metrics
from evolve_train.tracking.disk import DiskLogger


def test_read_metrics_names_the_file_line_and_field(tmp_path):
    path = tmp_path / "metrics.jsonl"
    assert read_metrics(tmp_path) == []  # no file yet
    good = {"group": "splits", "checkpoint": 0, "set": "unchanged", "set_name": "unchanged", "set_step": None}
    path.write_text(json.dumps(good) + "\n\n" + "{not json\n")
    with pytest.raises(ReportError, match=r"metrics.jsonl, line 3: malformed JSON"):
        read_metrics(path)
    path.write_text(json.dumps(good) + "\n" + json.dumps({"group": "paired", "checkpoint": "1"}) + "\n")
    with pytest.raises(ReportError, match=r"metrics.jsonl, line 2: field 'checkpoint' must be an integer, got '1'"):
        read_metrics(path)
    path.write_text(json.dumps({"group": "splits", "checkpoint": 0, "set": "new"}) + "\n")
    with pytest.raises(ReportError, match=r"line 1: field 'set_step' missing from a 'splits' row"):
        read_metrics(tmp_path)


def test_disk_logger_writes_rows_byte_for_byte_in_key_order(tmp_path):
    first = [
        {
            "group": "splits",
            "checkpoint": 0,
            "set": "unchanged",
            "set_name": "unchanged",
            "set_step": None,
            "n": 2,
            "em": 0.5,
            "f1": 0.75,
            "method": "full",
            "seed": 0,
            "train_seconds": 1.5,
        }
    ]
    second = [{"checkpoint": 1, "group": "timing", "set": None, "set_step": None, "seconds": {"é": 0.25}}]
    logger = DiskLogger(tmp_path)
    logger.log_eval(0, first)
    logger.log_eval(1, second)
    expected = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in first + second)
    assert (tmp_path / "metrics.jsonl").read_bytes() == expected.encode("utf-8")
    assert read_metrics(tmp_path) == first + second


def test_column_key_orders_by_step_then_kind():
    names = ["outdated_1", "new_2", "custom", "updated_1", "unchanged", "new_1", "time_slice_a", "updated_2"]
    assert sorted(names, key=column_key) == [
        "unchanged",
        "custom",
        "new_1",
        "updated_1",
        "outdated_1",
        "new_2",
        "updated_2",
        "time_slice_a",
    ]
