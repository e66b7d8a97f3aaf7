"""Generic timestamped QA: field mapping, date formats, alias lists, pairing into the splits."""

from __future__ import annotations


from evolve_train.config import DataConfig
from evolve_train.data.qa_items import QAItem
from evolve_train.data.timeline import build_timeline
from helpers.data import DATES, FIELDS, world_release


def test_items_land_in_the_splits_by_timestamp_and_pairing(tmp_path):
    counts = world_release(tmp_path)
    timeline = build_timeline(
        DataConfig(
            kind="temporal_qa",
            root=str(tmp_path),
            fields=FIELDS,
            train_files={"2018": ["train_2018.jsonl"], "2019": ["train_2019.jsonl"]},
            eval_files=["qa.jsonl"],
        )
    )
    sets = {s.name: s for s in timeline.eval_sets}
    assert {name: len(s.items) for name, s in sets.items()} == {
        "unchanged": counts["unchanged"],
        "new_1": counts["new"],
        "updated_1": counts["updated"],
        "outdated_1": counts["updated"],
        "paired_1": 2 * counts["updated"],
    }
    dated = {item["id"]: item["timestamp"] for item in sets["paired_1"].items}
    assert sorted(set(dated.values())) == sorted(DATES)  # both members, each at its own date
    for new, old in zip(sets["updated_1"].items, sets["outdated_1"].items):
        assert old["id"] == new["id"] + "#outdated" and old["question"] == new["question"]
        assert old["answers"] != new["answers"] and len(old["answers"]) == 2  # the alias list travels
    assert [s.name for s in timeline.steps] == ["2018", "2019"]


def test_explicit_sets_and_pair_ids():
    from evolve_train.data.loaders.temporal_qa import _derive_sets

    items = [
        QAItem(id="u", question="Who leads Acme?", answers=["Bo"], set="updated", step=1, pair_id="p"),
        QAItem(id="o", question="Who leads Acme?", answers=["Ann"], set="outdated", step=1, pair_id="p"),
        QAItem(id="n", question="Who leads Zeta?", answers=["Cy"], step=1),
        QAItem(id="s", question="Who founded Acme?", answers=["Di"], step=0),
    ]
    records = _derive_sets([(item, {"file": "f", "line": k}) for k, item in enumerate(items, 1)])
    assert [(r["id"], r["set"], r["step"]) for r in records] == [
        ("u", "updated", 1),
        ("o", "outdated", 1),
        ("n", "new", 1),
        ("s", "unchanged", None),
    ]
