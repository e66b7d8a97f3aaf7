"""Invariants of the embedded evolving world."""

from __future__ import annotations

import filecmp
from dataclasses import replace

import pytest

from evolve_train.config import WorldConfig
from evolve_train.data.relations import RELATIONS_BY_NAME
from evolve_train.data.world import MASK, eval_sets, generate_world, step_corpus, step_documents, write_world

CONFIG = WorldConfig(seed=3, n_entities=40, n_steps=4, change_share=0.3, new_entities_per_step=6,
                     n_people=15, n_cities=12)


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
    assert len(texts) == len(touched | new)
    org = sorted(touched)[0]
    founded = world.states[step][(org, "founded")]  # stable: never changes, still restated
    assert any(p["entity"] == org and p["output"] == founded for p in pairs)
    assert all(MASK in p["input"] and p["output"] not in p["input"] for p in pairs)


def test_heldout_phrasings_never_occur_in_any_corpus(world):
    for step in range(CONFIG.n_steps):
        _, texts = step_corpus(world, step)
        for doc in texts:
            for relation in RELATIONS_BY_NAME.values():
                for template in relation.heldout:
                    assert relation.cloze(template, doc["doc_id"]) not in doc["text"], template


def test_same_seed_gives_byte_identical_files_and_other_seed_differs(tmp_path):
    write_world(generate_world(CONFIG), tmp_path / "a")
    write_world(generate_world(CONFIG), tmp_path / "b")
    write_world(generate_world(replace(CONFIG, seed=4)), tmp_path / "c")
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    match, mismatch, errors = filecmp.cmpfiles(tmp_path / "a", tmp_path / "b", names, shallow=False)
    assert match == names and not mismatch and not errors
    assert (tmp_path / "a" / "eval_unchanged.jsonl").read_bytes() != (tmp_path / "c" / "eval_unchanged.jsonl").read_bytes()


def test_item_ids_are_unique_and_splits_assigned(sets):
    ids = [item["id"] for items in sets.values() for item in items]
    assert len(ids) == len(set(ids))
    splits = {item["split"] for items in sets.values() for item in items}
    assert splits == {"dev", "private"}
