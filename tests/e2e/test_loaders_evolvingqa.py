"""The EvolvingQA release layout: the shipped sample maps onto the splits, trains and evaluates."""

from __future__ import annotations

import csv
import json


from evolve_train.run import train
from helpers import tiny_cfg
from helpers.processes import ROOT


SAMPLE = ROOT / "data" / "evolvingqa_sample"


def rows(name: str) -> list[dict]:
    with open(SAMPLE / "finetune_qa" / name, encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def test_trains_one_step_and_evaluates_on_the_sample(tmp_path):
    run_dir = tmp_path / "run"
    train(
        tiny_cfg(
            run_dir,
            "data=evolvingqa",
            f"data.root={SAMPLE}",
            "data.steps=[20230101]",
            "trainer.epochs_step0=1",
            "trainer.num_threads=1",
        )
    )
    assert (run_dir / "steps" / "0").is_dir() and not (run_dir / "steps" / "1").exists()
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    splits = [row for row in metrics if row.get("group") == "splits"]
    assert [(row["set_name"], row["n"]) for row in splits] == [("unchanged", len(rows("unchanged_eval.csv")))]
    predictions = [
        json.loads(line) for line in (run_dir / "predictions" / "step_0" / "unchanged.jsonl").read_text().splitlines()
    ]
    first = rows("unchanged_eval.csv")[0]
    assert predictions[0]["prompt"] == f"Question: {first['question']}\nAnswer:"
    assert predictions[0]["golds"] == [first["answer"]]
