"""The embedded world's probe sets (paired, the five dimensions) and its release corpus extension."""

import re

import pytest

from evolve_train.config import DataConfig, WorldConfig
from evolve_train.data.qa_items import QAItem
from evolve_train.data.relations import RELATIONS_BY_NAME
from evolve_train.data.timeline import SET_KINDS, build_timeline
from evolve_train.data.world import generate_world, step_corpus
from evolve_train.data.world_dimensions import member_series
from evolve_train.data.world_probes import DIMENSION_KIND, PAIRED_KIND, stable_facts
from evolve_train.data.world_releases import generate_releases
from evolve_train.evaluation.metrics import DIMENSIONS

WORLD = WorldConfig(n_entities=40, new_entities_per_step=6, n_people=12, n_cities=12, n_steps=3)


@pytest.fixture(scope="module")
def timeline():
    return build_timeline(
        DataConfig(world=WORLD, heldout_share=0.0)
    )  # the corpora as the world writes them (slices: test_slices.py)


@pytest.fixture(scope="module")
def world():
    return generate_world(WORLD)


def sets_of(timeline, kind):
    return {s.step: s for s in timeline.eval_sets if s.kind == kind}


def corpus_text(timeline):
    return " ".join(t["text"] for step in timeline.steps for t in step.texts)


def test_world_corpora_are_kept_and_only_releases_are_added(timeline, world):
    releases = generate_releases(world)
    for step in timeline.steps:
        pairs, texts = step_corpus(world, step.index)
        assert step.pairs[: len(pairs)] == pairs and step.texts[: len(texts)] == texts
        added = step.pairs[len(pairs) :]
        assert len(added) == 4 * len(releases.released[step.index])
        assert {p["relation"] for p in added} <= {"release_version", "release_year"}
    assert len(timeline.steps[0].pairs) - len(step_corpus(world, 0)[0]) == 4 * len(releases.products)


def test_split_sets_are_unchanged_and_get_heldout_variants(timeline):
    for eval_set in timeline.eval_sets:
        if eval_set.kind in SET_KINDS:
            for item in eval_set.items:
                relation = RELATIONS_BY_NAME[item["extra"]["relation"]]
                prefix = f"year: {item['timestamp']} text: "  # the default world's date form
                cloze = relation.cloze(relation.statements[0], item["extra"]["entity"])
                assert item["question"] == prefix + cloze
                assert len(item["extra"]["variants"]) == len(relation.heldout)
                assert all(v.startswith(prefix) for v in item["extra"]["variants"])


def test_every_change_yields_a_timestamped_pair_and_a_now_question(timeline, world):
    paired = sets_of(timeline, PAIRED_KIND)
    assert set(paired) == {0, 1, 2}
    for step in (1, 2):
        by_pair = {}
        for item in paired[step].items:
            by_pair.setdefault(item["pair_id"], []).append(item)
        for change in world.changes[step]:
            old, new = sorted(
                by_pair[f"{PAIRED_KIND}/{change.entity}/{change.relation}/{step}"], key=lambda i: i["timestamp"]
            )
            assert (old["timestamp"], old["answers"]) == (str(world.years[step - 1]), [change.old])
            assert (new["timestamp"], new["answers"]) == (str(world.years[step]), [change.new])
            assert old["question"].startswith(f"year: {world.years[step - 1]} text: ")
            assert old["extra"]["cloze"] in old["question"]
            assert new["question"] == new["extra"]["ts_template"].format(timestamp=world.years[step])
            now = [
                i
                for i in by_pair[None]
                if i["extra"]["role"] == "now"
                and i["extra"]["entity"] == change.entity
                and i["extra"]["relation"] == change.relation
            ]
            assert len(now) == 1 and now[0]["timestamp"] is None
            history = {int(k): v for k, v in now[0]["extra"]["answers_by_step"].items()}
            assert history == {s: [world.states[s][(change.entity, change.relation)]] for s in range(step, 3)}
        n_changes = len(world.changes[step])
        assert len([i for i in paired[step].items if i["pair_id"]]) == 2 * n_changes


def test_stable_probes_are_flagged_and_true_at_every_step(timeline, world):
    facts = stable_facts(world)
    assert facts
    for step, eval_set in sets_of(timeline, PAIRED_KIND).items():
        stable = [i for i in eval_set.items if i["stable"]]
        assert len(stable) == len(facts)
        for item in stable:
            key = (item["extra"]["entity"], item["extra"]["relation"])
            assert all(state[key] == item["answers"][0] for state in world.states)
            assert item["timestamp"] == str(world.years[step])


def test_timestamped_cloze_keeps_a_leading_entity_capitalised():
    from evolve_train.data.world_probes import with_timestamp

    expected = "As of 2019, the director of Ka Guild is"
    assert with_timestamp("The director of Ka Guild is", "Ka Guild", "2019") == expected
    assert with_timestamp("Ka Guild is led by", "Ka Guild", "2019") == "As of 2019, Ka Guild is led by"


@pytest.mark.parametrize(
    "dates, asked",
    [
        ("prefix", "year: 2019 text: The director of"),
        ("inline", "As of 2019, the director of"),
        ("none", "As of 2019, the director of"),
    ],
)
def test_timestamped_probes_ask_in_the_corpus_date_form(dates, asked):
    timeline = build_timeline(
        DataConfig(
            world=WorldConfig(n_entities=20, new_entities_per_step=3, n_people=8, n_cities=8, n_steps=2, dates=dates)
        )
    )
    new = [
        i
        for s in timeline.eval_sets
        if s.kind == PAIRED_KIND
        for i in s.items
        if i["extra"].get("role") == "new" and i["extra"]["relation"] == "director"
    ]
    assert new and all(i["question"].startswith(asked) for i in new)
    for item in new:
        assert item["extra"]["ts_template"].format(timestamp="2031") == item["question"].replace("2019", "2031")
        assert "2019" not in item["extra"]["cloze"]


def test_dimension_items_have_options_golds_and_heldout_variants(timeline):
    dims = sets_of(timeline, DIMENSION_KIND)
    assert set(dims) == {0, 1, 2}
    seen = {d.step: {i["dimension"] for i in d.items} for d in dims.values()}
    assert seen[0] == set(DIMENSIONS) - {"knowledge_evolution"}  # nothing has evolved at step 0
    assert seen[1] == seen[2] == set(DIMENSIONS)
    corpus = corpus_text(timeline)
    for eval_set in dims.values():
        ids = [i["id"] for i in eval_set.items]
        assert len(ids) == len(set(ids))
        for item in eval_set.items:
            assert item["options"][item["gold_index"]] == item["answers"][0]
            assert len(set(item["options"])) == len(item["options"]) >= 2
            assert item["extra"]["variants"] and item["question"] not in item["extra"]["variants"]
            for variant in item["extra"]["variants"]:
                assert variant not in corpus  # held-out phrasings never occur in a corpus
            QAItem.from_dict(item)  # follows the QA item contract


def test_version_and_time_localization_golds_are_stated_in_the_corpus(timeline, world):
    corpus = corpus_text(timeline)
    checked = 0
    for eval_set in sets_of(timeline, DIMENSION_KIND).values():
        for item in eval_set.items:
            if item["dimension"] == "version_awareness":
                year, org = re.fullmatch(r"In (\d{4}), (.+) released version", item["question"]).groups()
                assert f"In {year}, {org} released version {item['answers'][0]} of its toolkit." in corpus
                assert year == str(world.years[eval_set.step])
                checked += 1
            elif item["dimension"] == "time_localization":
                assert f"{item['question']} {item['answers'][0]}." in corpus
                checked += 1
    assert checked > 0


def test_ordering_evolution_and_trend_golds_follow_the_world(timeline, world):
    for eval_set in sets_of(timeline, DIMENSION_KIND).values():
        state = world.states[eval_set.step]
        for item in eval_set.items:
            extra = item["extra"]
            if item["dimension"] == "event_ordering" and extra["kind"] == "founded_first":
                a, b = item["options"]
                earlier = a if int(state[(a, "founded")]) < int(state[(b, "founded")]) else b
                assert item["answers"] == [earlier]
            elif item["dimension"] == "event_ordering":
                change = next(
                    c for c in world.changes[eval_set.step] if c.entity == extra["entity"] and c.relation == "director"
                )
                assert item["answers"] == [change.old] and set(item["options"]) == {change.old, change.new}
            elif item["dimension"] == "knowledge_evolution":
                change = next(
                    c
                    for c in world.changes[eval_set.step]
                    if c.entity == extra["entity"] and c.relation == extra["relation"]
                )
                expected = change.new if extra["direction"] == "forward" else change.old
                assert item["answers"] == [expected]
                known = change.old if extra["direction"] == "forward" else change.new
                assert known in item["question"]
            elif item["dimension"] == "trend_extrapolation":
                series = member_series(world, extra["entity"])
                year = int(item["timestamp"])
                values = [series[y] for y in range(year - 2, year + 2)]
                assert values == sorted(values) or values == sorted(values, reverse=True)  # monotone
                assert item["answers"] == ["higher" if values[-1] > values[-2] else "lower"]


def test_probe_generation_is_deterministic(timeline):
    again = build_timeline(DataConfig(world=WORLD, heldout_share=0.0))
    assert [(s.name, s.items) for s in again.eval_sets] == [(s.name, s.items) for s in timeline.eval_sets]
    assert [s.pairs for s in again.steps] == [s.pairs for s in timeline.steps]


def test_default_world_corpus_extension_is_small():
    world = generate_world(WorldConfig(n_entities=200, new_entities_per_step=30))
    releases = generate_releases(world)
    base = len(step_corpus(world, 0)[0])
    assert 4 * len(releases.products) / base < 0.07


def test_probes_of_a_world_without_new_organisations_or_changes():
    quiet = build_timeline(
        DataConfig(
            world=WorldConfig(
                n_entities=6, new_entities_per_step=0, change_share=0.0, n_people=4, n_cities=4, n_steps=2
            )
        )
    )
    paired = sets_of(quiet, PAIRED_KIND)
    assert not [i for i in paired[1].items if i["pair_id"]]  # nothing changed: no pairs
    dims = sets_of(quiet, DIMENSION_KIND)
    assert {i["dimension"] for i in dims[1].items} <= set(DIMENSIONS) - {"knowledge_evolution", "event_ordering"}
