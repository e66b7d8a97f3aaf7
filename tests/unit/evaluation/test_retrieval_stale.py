"""Stale evidence in the open book (``evaluators/retrieval.py``) and the time-aware store ``scope=newest_version``
(``retrieval_index.py``), on a hand-built three-step store whose documents carry their ``doc_id`` across steps.

The model is the stub reader of tests/unit/evaluation/test_retrieval.py: it answers with the last word of the prompt's first
line (the best retrieved passage), so every number is hand-computed from which passages BM25 returns."""

from __future__ import annotations

import json

import pytest

from evolve_train.config import EvalConfig, RetrievalConfig
from evolve_train.data.timeline import EvalSet, Timeline, TimeStep
from evolve_train.evaluation.context import EvalContext
from evolve_train.evaluation.evaluator import evaluate_checkpoint
from evolve_train.evaluation.evaluators.retrieval import OutdatedAnswers, stale_answers
from evolve_train.evaluation.retrieval_index import Passage, RetrievalIndex, document_key, newest_versions

DOCS = {
    0: [
        ("acme", "The director of Acme is Ann."),
        ("brix", "The director of Brix is Cal."),
        ("wren", "Gale Street hosts the Wren Prize."),
    ],
    1: [("acme", "The director of Acme is Bob."), ("dune", "The director of Dune is Eve.")],
    2: [("brix", "The director of Brix is Fay.")],
}


def item(key, kind, step, question, answer, pair_id=None):
    return {"id": key, "question": question, "answers": [answer], "set": kind, "step": step, "pair_id": pair_id}


SETS = [
    EvalSet("unchanged", "unchanged", None, [item("u", "unchanged", None, "Gale Street hosts the", "Wren Prize")]),
    EvalSet("new_1", "new", 1, [item("n", "new", 1, "The director of Dune is", "Eve")]),
    EvalSet("updated_1", "updated", 1, [item("a", "updated", 1, "The director of Acme is", "Bob")]),
    EvalSet("outdated_1", "outdated", 1, [item("a", "outdated", 1, "The director of Acme is", "Ann")]),
    EvalSet("updated_2", "updated", 2, [item("b", "updated", 2, "The director of Brix is", "Fay")]),
    EvalSet("outdated_2", "outdated", 2, [item("b", "outdated", 2, "The director of Brix is", "Cal")]),
]


def timeline() -> Timeline:
    steps = [TimeStep(k, str(2018 + k), texts=[{"doc_id": doc, "text": text} for doc, text in DOCS[k]]) for k in DOCS]
    return Timeline(steps=steps, eval_sets=SETS)


TIMELINE = timeline()


def reader(prompts):
    return [" " + (p.split("\n")[0].split() or [""])[-1].rstrip(".") for p in prompts]


def rows_of(checkpoint, run_dir=None, **retrieval):
    cfg = EvalConfig(evaluators=["retrieval"], retrieval=RetrievalConfig(**retrieval))
    ctx = EvalContext(timeline=TIMELINE, checkpoint=checkpoint, cfg=cfg, shared={})
    ctx.answers = reader
    ctx.run_dir = run_dir
    rows = [r for r in evaluate_checkpoint(ctx) if r["group"] == "retrieval" and r.get("set") != "paired"]
    return {r["set_name"]: r for r in rows}


# ---------------------------------------------------------------- stale_at_k


def test_stale_at_k_equals_the_hand_computation_under_scope_all():
    # checkpoint 2, scope all, k = 2 (stop words dropped): "The director of Acme is" -> {director, acme}: the two
    # Acme passages (0/acme: Ann, 1/acme: Bob; a tie, the lower index first) -> an outdated value (Ann) retrieved,
    # and the reader answers Ann (wrong, the outdated value); Brix the same with 0/brix (Cal) and 2/brix (Fay)
    rows = rows_of(2, k=2)
    for name in ("updated_1", "updated_2"):
        assert rows[name]["n_stale_known"] == 1 and rows[name]["stale_at_k"] == 1.0
        assert rows[name]["em_open_stale"] == 0.0 and rows[name]["em_open_no_stale"] is None
        assert rows[name]["outdated_open_stale"] == 1.0
    # no known outdated answer: Unchanged, New, and Outdated itself (its gold is the outdated value)
    for name in ("unchanged", "new_1", "outdated_1", "outdated_2"):
        assert rows[name]["n_stale_known"] == 0 and rows[name]["stale_at_k"] is None
    pooled = rows["all"]  # Unchanged + New + Updated: the two Updated questions are the known ones
    assert (pooled["n_stale_known"], pooled["n_stale"], pooled["n_no_stale"]) == (2, 2, 0)
    assert pooled["stale_at_k"] == 1.0 and pooled["em_open_stale"] == 0.0
    assert pooled["stale_at_k_ci"] == [1.0, 1.0]


def test_stale_at_k_under_the_time_aware_scopes():
    # newest_version at checkpoint 2: acme's newest version is step 1's (Bob), brix's step 2's (Fay): no stale
    # passage left, and the best passage holds the current answer
    newest = rows_of(2, k=2, scope="newest_version")
    assert newest["all"]["stale_at_k"] == 0.0 and newest["all"]["n_no_stale"] == 2
    assert newest["all"]["em_open_no_stale"] == 1.0 and newest["all"]["em_open_stale"] is None
    assert newest["all"]["scope"] == "newest_version"
    # latest at checkpoint 2: only step 2's passage (Brix: Fay); Acme's question reads it (wrong, but not stale)
    latest = rows_of(2, k=2, scope="latest")
    assert latest["all"]["stale_at_k"] == 0.0 and latest["all"]["em_open_no_stale"] == 0.5
    # checkpoint 1, scope all: only Updated_1 is asked, and Ann is retrieved next to Bob
    assert rows_of(1, k=2)["updated_1"]["stale_at_k"] == 1.0 and "updated_2" not in rows_of(1, k=2)


def test_records_say_whether_a_stale_passage_was_retrieved(tmp_path):
    rows_of(2, run_dir=tmp_path, k=2)
    record = json.loads((tmp_path / "predictions/step_2/open_book/updated_1.jsonl").read_text().splitlines()[0])
    assert record["stale"] == 1 and record["stale_answers"] == ["Ann"] and record["outdated_answer"] == 1
    new = json.loads((tmp_path / "predictions/step_2/open_book/new_1.jsonl").read_text().splitlines()[0])
    assert new["stale"] is None and new["stale_answers"] == []


def test_stale_answers_match_by_question_or_pair_id_and_drop_the_own_gold():
    sets = [
        EvalSet("outdated_1", "outdated", 1, [item("o", "outdated", 1, "Who led X in 2018?", "Ann", pair_id="p")]),
        EvalSet("outdated_2", "outdated", 2, [item("o2", "outdated", 2, "Who leads Y?", "ann", pair_id="q")]),
    ]
    table = OutdatedAnswers(Timeline(steps=[], eval_sets=sets))
    assert stale_answers(item("u", "updated", 1, "Who led X in 2019?", "Bob", pair_id="p"), table) == ["Ann"]
    assert stale_answers(item("u", "updated", 2, "Who leads Y?", "Bob"), table) == ["ann"]
    assert stale_answers(item("u", "updated", 2, "Who leads Y?", "Ann"), table) == []  # its own gold (§1 normalized)
    assert stale_answers(item("u", "new", 2, "Who founded Z?", "Cy"), table) == []


# ---------------------------------------------------------------- newest_version


def test_newest_version_never_holds_two_versions_of_one_document():
    for passages in ("documents", "sentences"):
        index = RetrievalIndex(timeline(), RetrievalConfig(scope="newest_version", passages=passages))
        queries = [text for k in DOCS for _, text in DOCS[k]]
        for checkpoint in range(3):
            store = index.store(checkpoint)
            versions = {}
            for p in store.passages:
                versions.setdefault(p.doc, set()).add(p.step)
            assert all(len(steps) == 1 for steps in versions.values()), versions
            for found in store.search(queries, k=6):
                seen = {}
                for p, _ in found:
                    assert seen.setdefault(p.doc, p.step) == p.step  # never two versions in one answer
                    assert p.step <= checkpoint
    index = RetrievalIndex(timeline(), RetrievalConfig(scope="newest_version"))
    assert sorted((p.doc, p.step) for p in index.store(2).passages) == [
        ("acme", 1),
        ("brix", 2),
        ("dune", 1),
        ("wren", 0),
    ]
    assert sorted((p.doc, p.step) for p in index.store(0).passages) == [("acme", 0), ("brix", 0), ("wren", 0)]


def test_document_keys():
    assert document_key({"doc_id": "d1", "title": "T"}, "x") == "d1"
    assert document_key({"title": "Acme"}, "x") == "Acme"
    assert document_key({}, "\n  Acme Corp  \nbody") == "Acme Corp"  # the first non-blank line
    kept = newest_versions([Passage("0/a", 0, "2018", "a", "a"), Passage("1/a", 1, "2019", "b", "a")])
    assert [p.id for p in kept] == ["1/a"]
    # masked-entity pairs: keyed by their entity and relation (the embedded world), else the masked input
    step = TimeStep(
        0, "2018", pairs=[{"input": "year: 2018 text: X is <mask>.", "output": "A", "entity": "X", "relation": "r"}]
    )
    from evolve_train.evaluation.retrieval_index import versioned_documents

    assert versioned_documents(step)[0][1] == "X/r"


@pytest.mark.parametrize("scope", ["all", "latest", "newest_version"])
def test_every_scope_is_accepted(scope):
    assert str(RetrievalConfig(scope=scope).scope) == scope
