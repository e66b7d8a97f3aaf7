"""The EvolvingQA release layout: the shipped sample maps onto the splits, trains and evaluates."""

from __future__ import annotations

import csv

import pytest

from evolve_train.config import DataConfig
from evolve_train.data.loaders.evolvingqa import default_order
from evolve_train.data.timeline import build_timeline
from helpers.processes import ROOT


SAMPLE = ROOT / "data" / "evolvingqa_sample"


def rows(name: str) -> list[dict]:
    with open(SAMPLE / "finetune_qa" / name, encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def sample_timeline(**overrides):
    return build_timeline(
        DataConfig(kind="evolvingqa", root=str(SAMPLE), prompt_template="Question: {question}\nAnswer:", **overrides)
    )


def test_sample_maps_onto_the_splits():
    timeline = sample_timeline()
    assert [s.name for s in timeline.steps] == ["20230101", "0102", "0203"]
    assert all(pair["input"].count("<extra_id_0>") == 1 for step in timeline.steps for pair in step.pairs)
    sets = {s.name: s for s in timeline.eval_sets}
    assert list(sets) == ["unchanged", "new_1", "updated_1", "outdated_1", "new_2", "updated_2", "outdated_2"]
    assert sets["unchanged"].step is None and sets["new_2"].step == 2 and sets["outdated_1"].kind == "outdated"
    edited = rows("edited_0102.csv")
    assert len(sets["updated_1"].items) == len(sets["outdated_1"].items) == len(edited)
    for row, new, old in zip(edited, sets["updated_1"].items, sets["outdated_1"].items):
        assert new["question"] == old["question"] == row["question"]
        assert new["answers"] == [row["answer2"]] and old["answers"] == [row["answer1"]]
        assert new["pair_id"] == old["pair_id"] and new["id"] != old["id"]
    assert len(sets["unchanged"].items) == len(rows("unchanged_eval.csv"))
    assert timeline.prompt(sets["new_1"].items[0]) == f"Question: {rows('new_0102.csv')[0]['question']}\nAnswer:"


def test_time_prompted_questions_through_the_field_mapping():
    timeline = sample_timeline(fields={"question": "question_time"})
    item = timeline.eval_sets[1].items[0]
    assert item["question"].startswith("As of February 2023, ")


def test_steps_subset_leaves_later_sets_out():
    timeline = sample_timeline(steps=["20230101", "0102"])
    assert [s.name for s in timeline.steps] == ["20230101", "0102"]
    assert {s.name for s in timeline.eval_sets} == {"unchanged", "new_1", "updated_1", "outdated_1"}


def test_default_order_puts_the_snapshot_first_and_diffs_by_month():
    assert default_order(["0304", "0203", "20230201", "0405"]) == ["20230201", "0203", "0304", "0405"]


def test_sample_is_small_and_regenerates_byte_identically(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_sample_data", ROOT / "scripts" / "make_sample_data.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    written = module.make_sample(tmp_path)
    shipped = sorted(p.relative_to(SAMPLE) for p in SAMPLE.rglob("*") if p.is_file())
    assert sorted(p.relative_to(tmp_path) for p in written) == shipped
    assert all((tmp_path / rel).read_bytes() == (SAMPLE / rel).read_bytes() for rel in shipped)
    assert sum((SAMPLE / rel).stat().st_size for rel in shipped) < 200_000


@pytest.mark.parametrize("name", ["edited_0102.csv", "new_0203.csv", "unchanged_train.csv"])
def test_sample_files_have_the_release_columns(name):
    header = next(csv.reader(open(SAMPLE / "finetune_qa" / name, encoding="utf-8")))
    expected = {"edited_0102.csv": ["question", "question_time", "answer1", "answer2"]}
    assert header == expected.get(name, ["question", "question_time", "answer"])
