"""Invariants of the embedded evolving world."""

from __future__ import annotations

import filecmp
from dataclasses import replace

import pytest

from evolve_train.config import WorldConfig
from evolve_train.data.dates import DATE_FORMS
from evolve_train.data.relations import RELATIONS, RELATIONS_BY_NAME
from evolve_train.data.world import (
    MASK,
    document_wordings,
    eval_sets,
    generate_world,
    step_corpus,
    step_documents,
    write_world,
)
from evolve_train.errors import ConfigError
from evolve_train.evaluation.metrics.answer import normalize

CONFIG = WorldConfig(
    seed=3, n_entities=40, n_steps=4, change_share=0.3, new_entities_per_step=6, n_people=15, n_cities=12
)


@pytest.fixture(scope="module")
def world():
    return generate_world(CONFIG)


@pytest.fixture(scope="module")
def sets(world):
    return eval_sets(world)


def test_every_updated_answer_differs_from_its_outdated_answer(world, sets):
    for step in range(1, CONFIG.n_steps):
        updated = {item["extra"]["entity"] + item["extra"]["relation"]: item for item in sets[f"updated_{step}"]}
        outdated = {item["extra"]["entity"] + item["extra"]["relation"]: item for item in sets[f"outdated_{step}"]}
        assert updated.keys() == outdated.keys() and updated
        for key, item in updated.items():
            assert item["question"] == outdated[key]["question"]
            assert item["answers"] != outdated[key]["answers"]
            entity, relation = item["extra"]["entity"], item["extra"]["relation"]
            assert item["answers"] == [world.states[step][(entity, relation)]]
            assert outdated[key]["answers"] == [world.states[step - 1][(entity, relation)]]


def test_unchanged_answers_never_change(world, sets):
    assert sets["unchanged"]
    for item in sets["unchanged"]:
        key = (item["extra"]["entity"], item["extra"]["relation"])
        assert {state[key] for state in world.states} == set(item["answers"])


def test_new_items_are_absent_from_the_previous_state(world, sets):
    for step in range(1, CONFIG.n_steps):
        assert len(sets[f"new_{step}"]) == CONFIG.new_entities_per_step * len(RELATIONS_BY_NAME)
        for item in sets[f"new_{step}"]:
            key = (item["extra"]["entity"], item["extra"]["relation"])
            assert key not in world.states[step - 1] and key in world.states[step]


def test_change_share_and_stable_relations(world):
    changeable = sum(1 for (_, rel) in world.states[0] if RELATIONS_BY_NAME[rel].changes)
    assert len(world.changes[1]) == round(CONFIG.change_share * changeable)
    for changes in world.changes:
        assert all(RELATIONS_BY_NAME[c.relation].changes and c.old != c.new for c in changes)


def test_later_corpora_are_diffs_that_restate_unchanged_facts(world):
    step = 1
    touched = {c.entity for c in world.changes[step]}
    new = {org for org, first in world.founded_at.items() if first == step}
    assert set(step_documents(world, step)) == touched | new
    pairs, texts = step_corpus(world, step)
    assert len(texts) == len(touched | new) * CONFIG.docs_per_entity
    org = sorted(touched)[0]
    founded = world.states[step][(org, "founded")]  # stable: never changes, still restated
    assert any(p["entity"] == org and p["output"] == founded for p in pairs)
    assert all(MASK in p["input"] and p["output"] not in p["input"] for p in pairs)


@pytest.mark.parametrize("dates", DATE_FORMS)
def test_heldout_phrasings_never_occur_in_any_corpus(dates):
    world = generate_world(replace(CONFIG, dates=dates, docs_per_entity=12))
    for step in range(CONFIG.n_steps):
        pairs, texts = step_corpus(world, step)
        corpus = " ".join(normalize(doc["text"]) for doc in texts) + " ".join(normalize(p["input"]) for p in pairs)
        for org in step_documents(world, step):
            for relation in RELATIONS_BY_NAME.values():
                for template in relation.heldout:
                    assert normalize(relation.cloze(template, org)) not in corpus, template


@pytest.mark.parametrize("dates, docs", [("prefix", 3), ("inline", 5), ("none", 1)])
def test_same_seed_gives_byte_identical_files_and_other_seed_differs(tmp_path, dates, docs):
    config = replace(CONFIG, dates=dates, docs_per_entity=docs)
    write_world(generate_world(config), tmp_path / "a")
    write_world(generate_world(config), tmp_path / "b")
    write_world(generate_world(replace(config, seed=4)), tmp_path / "c")
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    match, mismatch, errors = filecmp.cmpfiles(tmp_path / "a", tmp_path / "b", names, shallow=False)
    assert match == names and not mismatch and not errors
    assert (tmp_path / "a" / "eval_unchanged.jsonl").read_bytes() != (
        tmp_path / "c" / "eval_unchanged.jsonl"
    ).read_bytes()


def test_item_ids_are_unique_and_splits_assigned(sets):
    ids = [item["id"] for items in sets.values() for item in items]
    assert len(ids) == len(set(ids))
    splits = {item["split"] for items in sets.values() for item in items}
    assert splits == {"dev", "private"}


# ---------------------------------------------------------------- knowledge augmentation and dates


def test_each_relation_has_a_bank_of_training_wordings_and_heldout_ones():
    for relation in RELATIONS:
        assert len(set(relation.statements)) >= 8 and len(set(relation.heldout)) >= 3
        assert not set(relation.statements) & set(relation.heldout)
        for template in relation.statements + relation.heldout:
            assert template.endswith("{v}.") and "{e}" in template  # a cloze; the full name in every wording


@pytest.mark.parametrize("docs", [1, 3, 12])
def test_docs_per_entity_are_differently_worded_with_the_probe_wording_first(docs):
    world = generate_world(replace(CONFIG, docs_per_entity=docs))
    for org in step_documents(world, 1):
        wordings = document_wordings(world, org, 1)
        assert len(wordings) == docs
        for relation in RELATIONS:
            used = [doc[relation.name] for doc in wordings]
            assert used[0] == relation.statements[0]
            assert len(set(used)) == min(docs, len(relation.statements))  # distinct until the bank runs out
    pairs, texts = step_corpus(world, 1)
    assert len(texts) == docs * len(step_documents(world, 1))
    assert len(pairs) == len(texts) * len(RELATIONS)


def test_documents_shuffle_sentence_order_and_name_the_organisation_in_every_sentence():
    world = generate_world(replace(CONFIG, docs_per_entity=4, dates="none"))
    _, texts = step_corpus(world, 0)
    orders = set()
    for doc in texts:
        org = doc["doc_id"].split("#")[0]
        sentences = [s for s in doc["text"].split(". ") if s]
        assert len(sentences) == len(RELATIONS) and all(org in s for s in sentences)
        orders.add(
            tuple(next(r.name for r in RELATIONS if str(world.states[0][(org, r.name)]) in s) for s in sentences)
        )
    assert len(orders) > 1


@pytest.mark.parametrize("dates, start", [("prefix", "year: {y} text: "), ("inline", "As of {y}, "), ("none", "")])
def test_every_pair_document_and_split_question_carries_its_snapshot_date(dates, start):
    world = generate_world(replace(CONFIG, dates=dates))
    for step, year in enumerate(world.years):
        pairs, texts = step_corpus(world, step)
        prefix = start.format(y=year)
        assert all(p["input"].startswith(prefix) for p in pairs)
        assert all(doc["text"].startswith(prefix) for doc in texts)
        if dates == "none":
            assert not any(str(y) in p["input"] for p in pairs for y in world.years)
    sets = eval_sets(world)
    asked = {
        "unchanged": world.years[0],
        **{f"{kind}_{k}": world.years[k] for k in range(1, CONFIG.n_steps) for kind in ("new", "updated", "outdated")},
    }
    for name, items in sets.items():
        for item in items:
            if dates == "none":
                assert not any(str(y) in item["question"] for y in world.years)
            else:
                assert item["question"].startswith(start.format(y=asked[name])), item["question"]
                assert item["timestamp"] == str(asked[name])


def test_split_questions_are_the_dated_probe_wording_cloze():
    world = generate_world(replace(CONFIG, dates="inline"))
    item = eval_sets(world)["updated_1"][0]
    relation = RELATIONS_BY_NAME[item["extra"]["relation"]]
    cloze = relation.cloze(relation.statements[0], item["extra"]["entity"])
    assert item["question"].endswith(cloze[1:]) and item["question"].startswith(f"As of {world.years[1]}, ")


def test_bad_world_settings_fail_naming_the_key():
    with pytest.raises(ConfigError, match="data.world.docs_per_entity must be >= 1"):
        generate_world(replace(CONFIG, docs_per_entity=0))
    with pytest.raises(Exception, match="data.world.dates"):
        generate_world(replace(CONFIG, dates="yearly"))
