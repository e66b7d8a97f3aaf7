"""Time-aware training for every loader (data.time_prefix), the full-history corpus (data.keep_history),
the held-out wordings proved absent by the private-leak preflight, the time_aware arms, and the
perturbation kinds of the hygiene evaluators."""

from __future__ import annotations

from dataclasses import replace

import pytest

from evolve_train.config import DataConfig, WorldConfig
from evolve_train.data.hygiene import check_private_leaks, is_private
from evolve_train.data.relations import RELATIONS_BY_NAME
from evolve_train.data.timeline import build_timeline
from evolve_train.errors import ConfigError, DataError
from evolve_train.evaluation.evaluators.hygiene import kind_stats, kind_variants, surface_variants
from helpers import tiny_cfg
from helpers.data import FIELDS, world_release

WORLD = WorldConfig(n_entities=12, new_entities_per_step=3, n_people=8, n_cities=8, n_steps=3)
ARMS = {
    "undated": ("undated_full", "none", False, ["full"]),
    "dated": ("dated_full", "prefix", False, ["full"]),
    "dated_replay": ("dated_replay", "prefix", False, ["full", "replay"]),
    "positive_control": ("positive_control", "prefix", True, ["full"]),
    "negative_control": ("negative_control", "none", True, ["full"]),
}


def temporal_qa(root, **overrides) -> DataConfig:
    world_release(root)
    return DataConfig(
        kind="temporal_qa",
        root=str(root),
        fields=FIELDS,
        eval_files=["qa.jsonl"],
        train_files={"2018": ["train_2018.jsonl"], "2019": ["train_2019.jsonl"]},
        **overrides,
    )


def test_time_prefix_dates_every_training_example_and_timestamped_prompt_of_a_loader(tmp_path):
    plain = build_timeline(temporal_qa(tmp_path))
    timeline = build_timeline(temporal_qa(tmp_path, time_prefix=True))
    for before, step in zip(plain.steps, timeline.steps):
        assert step.pairs and [p["input"] for p in step.pairs] == [
            f"year: {step.name} text: " + p["input"] for p in before.pairs
        ]
    stamped = [i for s in timeline.eval_sets for i in s.items if i.get("timestamp") is not None]
    assert stamped
    for item in stamped:
        assert item["question"].startswith(f"year: {item['timestamp']} text: ")
        assert item["extra"]["ts_template"].format(timestamp=item["timestamp"]) == item["question"]
        assert item["timestamp"] not in item["extra"]["cloze"]
        assert item["extra"]["ts_template"].format(timestamp="1999").startswith("year: 1999 text: ")


def test_time_prefix_format_is_checked_before_training(tmp_path):
    with pytest.raises(ConfigError, match="data.time_prefix_format"):
        build_timeline(temporal_qa(tmp_path, time_prefix=True, time_prefix_format="year: text: "))


def test_time_prefix_on_the_world_is_its_prefix_date_form():
    a = build_timeline(DataConfig(world=replace(WORLD, dates="none"), time_prefix=True))
    b = build_timeline(DataConfig(world=replace(WORLD, dates="prefix")))
    assert [s.pairs for s in a.steps] == [s.pairs for s in b.steps]
    assert [[i["question"] for i in s.items] for s in a.eval_sets] == [
        [i["question"] for i in s.items] for s in b.eval_sets
    ]
    with pytest.raises(ConfigError, match="data.world.dates"):
        build_timeline(DataConfig(world=replace(WORLD, dates="inline"), time_prefix=True))


def test_keep_history_keeps_every_earlier_dated_snapshot_in_each_step():
    diff = build_timeline(DataConfig(world=WORLD))
    full = build_timeline(DataConfig(world=WORLD, keep_history=True))
    for k, step in enumerate(full.steps):
        assert step.pairs == [p for s in diff.steps[: k + 1] for p in s.pairs]
        assert step.texts == [t for s in diff.steps[: k + 1] for t in s.texts]
    years = {p["input"][:10] for p in full.steps[-1].pairs if p["input"].startswith("year:")}
    assert years == {f"year: {y}" for y in (2018, 2019, 2020)}
    assert [s.items for s in full.eval_sets] == [s.items for s in diff.eval_sets]


@pytest.mark.parametrize("dates", ["prefix", "inline", "none"])
def test_the_preflight_proves_heldout_wordings_absent_and_catches_one_put_in(dates):
    timeline = build_timeline(DataConfig(world=replace(WORLD, dates=dates)))
    counts = check_private_leaks(timeline)
    assert counts["private_items"] > 0 and counts["training_examples"] > 0
    item = next(i for s in timeline.eval_sets if s.kind == "updated" for i in s.items if is_private(i))
    relation = RELATIONS_BY_NAME[item["extra"]["relation"]]
    leaked = relation.heldout[1].format(e=item["extra"]["entity"], v=item["answers"][0])
    if dates != "none":  # a held-out wording in a corpus is caught at any date, not only the item's
        leaked = ("year: 1999 text: " if dates == "prefix" else "As of 1999, ") + leaked
    timeline.steps[-1].texts.append({"doc_id": "leak", "text": leaked})
    with pytest.raises(DataError, match="held-out variant"):
        check_private_leaks(timeline)


@pytest.mark.parametrize("arm", ARMS)
def test_time_aware_arms_compose_with_distinct_method_names(tmp_path, arm):
    cfg = tiny_cfg(tmp_path, "experiment=time_aware", f"+time_aware={arm}")
    name, dates, history, strategies = ARMS[arm]
    assert (cfg.method.name, cfg.data.world.dates, cfg.data.keep_history, list(cfg.method.strategies)) == (
        name,
        dates,
        history,
        strategies,
    )


def test_surface_variants_by_kind_keep_the_question_and_differ_from_it():
    kinds = surface_variants("year: 2019 text: The director of Ka Guild is")
    assert set(kinds) == {"case", "spacing", "punctuation", "qa_frame"}
    assert kinds["case"] == "year: 2019 text: the director of ka guild is"
    assert kinds["spacing"] == "year:  2019  text:  The  director  of  Ka  Guild  is"
    assert kinds["punctuation"] == "year: 2019 text: The director of Ka Guild is:"
    assert kinds["qa_frame"] == "Question: year: 2019 text: The director of Ka Guild is\nAnswer:"
    assert surface_variants("Who leads Ka Guild?")["punctuation"] == "Who leads Ka Guild"


def test_kind_stats_score_each_kind_against_the_original():
    items = [
        {"question": q, "answers": [a], "extra": {"variants": [f"held {q}"]}}
        for q, a in (("The head of A is", "Bo"), ("The head of B is", "Cy"))
    ]
    plan = [(item, kind_variants(item, [], 3)) for item in items]

    # right on the original and under spacing; wrong lowercased; only the first item right held out
    def answer(item, q):
        return item["answers"][0] if (q == item["question"] or "  " in q or q == "held The head of A is") else "nobody"

    stats = kind_stats(plan, answer)
    assert stats["spacing"] == {"paraphrase_gap": 0.0, "acc_perturbed": 1.0, "flip_rate": 0.0, "n": 2}
    assert stats["case"]["paraphrase_gap"] == 1.0 and stats["case"]["flip_rate"] == 1.0
    assert stats["heldout"]["acc_perturbed"] == 0.5 and stats["heldout"]["flip_rate"] == 0.5
