"""Generic timestamped QA: field mapping, date formats, alias lists, pairing into the splits."""

from __future__ import annotations

import json

from evolve_train.data.qa_items import QAItem
from evolve_train.evaluation.metrics import score_items
from evolve_train.run import train
from helpers import tiny_cfg
from helpers.data import FIELDS, world_release


def test_evaluates_a_checkpoint_on_mapped_fields_full_dates_and_aliases(tmp_path):
    root = tmp_path / "data"
    root.mkdir()
    counts = world_release(root)
    run_dir = tmp_path / "run"
    train(
        tiny_cfg(
            run_dir,
            "data=temporal_qa",
            f"data.root={root}",
            "+data.train_files.2018=[train_2018.jsonl]",
            "+data.train_files.2019=[train_2019.jsonl]",
            "data.eval_files=[qa.jsonl]",
            *[f"data.fields.{key}={source}" for key, source in FIELDS.items()],
            "trainer.epochs_step0=1",
            "trainer.num_threads=1",
            "trainer.epochs=1",
            "eval.max_new_tokens=4",
        )
    )
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    splits = {(r["checkpoint"], r["set_name"]): r for r in rows if r.get("group") == "splits"}
    assert splits[(1, "updated_1")]["n"] == splits[(1, "outdated_1")]["n"] == counts["updated"]
    assert splits[(0, "unchanged")]["n"] == splits[(1, "unchanged")]["n"] == counts["unchanged"]
    records = {}
    for name in ("unchanged", "new_1", "updated_1", "outdated_1"):
        for line in (run_dir / "predictions" / "step_1" / f"{name}.jsonl").read_text().splitlines():
            record = json.loads(line)
            records[record["id"]] = (name, record)
    source = {row["qid"]: row for row in map(json.loads, (root / "qa.jsonl").read_text().splitlines())}
    for item_id, (name, record) in records.items():
        row = source[item_id.removesuffix("#outdated")]
        assert record["prompt"] == f"Question: {row['edited_question']}\nAnswer:"
        assert record["golds"] == row["gold"] or name == "outdated_1"  # the alias list, not its first name
    # the run's EM per set agrees with evolve-score's scoring of the same predictions
    items = [QAItem(id=i, question=r["prompt"], answers=r["golds"], set=name) for i, (name, r) in records.items()]
    report = score_items(items, {i: r["generation"] for i, (_, r) in records.items()})
    for name in ("unchanged", "new_1", "updated_1", "outdated_1"):
        assert report["sets"][name]["em"] == splits[(1, name)]["em"]
