"""Private vs dev (docs/metrics.md#8-statistics-and-hygiene): dev_items, the private-leak check and the record of private evaluations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import evolve_train.run as run_module
from evolve_train.config import DataConfig, WorldConfig
from evolve_train.data.hygiene import (
    check_private_leaks,
    check_prompt_text,
    dev_items,
    filled,
    record_private_evaluations,
    static_prompt_text,
    tokens,
)
from evolve_train.data.timeline import EvalSet, TimeStep, Timeline, build_timeline
from evolve_train.errors import DataError
from helpers import tiny_cfg


def item(item_id, question, answers, split="private", variants=None, kind="unchanged"):
    record = {"id": item_id, "question": question, "answers": answers, "split": split, "set": kind, "step": None}
    if variants is not None:
        record["extra"] = {"variants": variants}
    return record


def timeline(items, pairs=(), texts=(), step1_pairs=(), step1_texts=(), template="{question}"):
    steps = [
        TimeStep(0, "2018", pairs=list(pairs), texts=list(texts)),
        TimeStep(1, "2019", pairs=list(step1_pairs), texts=list(step1_texts)),
    ]
    return Timeline(
        steps=steps, eval_sets=[EvalSet("unchanged", "unchanged", None, list(items))], prompt_template=template
    )


def test_dev_items_returns_only_dev_items_from_any_source():
    a, b = item("a", "Q a?", ["x"], "dev"), item("b", "Q b?", ["y"], "private")
    c = {"id": "c", "question": "Q c?", "answers": ["z"]}  # no split: private
    d = item("d", "Q d?", ["w"], "dev", kind="new")
    sets = [EvalSet("unchanged", "unchanged", None, [a, b, c]), EvalSet("new_1", "new", 1, [d, a])]
    tl = Timeline(steps=[TimeStep(0, "0")], eval_sets=sets)
    assert [i["id"] for i in dev_items(tl)] == ["a", "d"]  # dedup by id, order kept
    assert [i["id"] for i in dev_items(sets[0])] == ["a"]
    assert [i["id"] for i in dev_items([a, b, c, d])] == ["a", "d"]
    assert [i["id"] for i in dev_items(tl, kinds=["new"])] == ["d"]


def test_the_embedded_world_marks_every_item_and_dev_items_are_all_dev():
    tl = build_timeline(DataConfig(world=WorldConfig(n_entities=12, new_entities_per_step=4, n_people=10, n_cities=10)))
    everything = [i for s in tl.eval_sets for i in s.items]
    assert {i["split"] for i in everything} == {"dev", "private"}
    chosen = dev_items(tl)
    assert chosen and all(i["split"] == "dev" for i in chosen)
    assert len(chosen) == len({i["id"] for i in everything if i["split"] == "dev"})


def test_filled_replaces_either_mask_and_appends_when_there_is_none():
    assert tokens(filled({"input": "Who runs Acme? <mask>", "output": "Jane Roe"})) == (
        "who",
        "runs",
        "acme",
        "jane",
        "roe",
    )
    assert tokens(filled({"input": "<extra_id_0> runs Acme.", "output": "Jane"})) == ("jane", "runs", "acme")
    assert tokens(filled({"input": "Who runs Acme?", "output": "Jane"})) == ("who", "runs", "acme", "jane")


def test_static_prompt_text_keeps_only_the_literal_text():
    assert static_prompt_text("Q: Who runs Acme? A: Jane\nQ: {question}\nA:") == "Q: Who runs Acme? A: Jane\nQ: \n\nA:"


PRIVATE_Q = item("u/acme", "Who runs  ACME, Inc.?", ["Jane Roe"])


def test_a_private_question_in_a_training_document_is_named_with_where():
    tl = timeline(
        [PRIVATE_Q],
        texts=[{"doc_id": "d0", "text": "Acme makes tools."}],
        step1_texts=[{"doc_id": "d7", "text": "FAQ. who runs the acme inc? Nobody knows."}],
    )
    with pytest.raises(DataError) as err:
        check_private_leaks(tl)
    message = str(err.value)
    assert "'u/acme'" in message and "step 1 (2019) training document 'd7'" in message


def test_a_dev_item_may_appear_and_token_boundaries_matter():
    dev = item("u/acme", "Who runs Acme?", ["Jane"], split="dev")
    check_private_leaks(timeline([dev], texts=[{"text": "Who runs Acme? Jane."}]))
    private = item("u/acme", "Who runs Acme?", ["Jane"])
    counts = check_private_leaks(timeline([private], texts=[{"text": "Who runs Acmes? Jane."}]))
    assert counts["private_items"] == 1 and counts["training_examples"] == 1


def test_a_private_question_as_a_masked_pair_is_named():
    tl = timeline(
        [PRIVATE_Q],
        pairs=[
            {"input": "Acme is in <mask>.", "output": "Oslo"},
            {"input": "Who runs Acme, Inc.? <mask>", "output": "Jane Roe"},
        ],
    )
    with pytest.raises(DataError, match=r"'u/acme'.*step 0 \(2018\) training pair #1"):
        check_private_leaks(tl)


def test_a_cloze_question_is_a_fact_statement_but_its_heldout_variants_must_stay_out():
    cloze = item(
        "u/acme/director",
        "The director of Acme is",
        ["Jane Roe"],
        variants=["Heading Acme is", "Which person heads Acme? It is"],
    )
    fact = {"input": "The director of Acme is <mask>.", "output": "Jane Roe"}
    counts = check_private_leaks(timeline([cloze], pairs=[fact], texts=[{"text": "The director of Acme is Jane Roe."}]))
    assert counts["cloze_questions"] == 1
    # a cloze variant without the gold after it is not the held-out statement: allowed
    check_private_leaks(timeline([cloze], pairs=[fact], texts=[{"text": "Heading Acme is Bob Poe."}]))
    with pytest.raises(DataError, match=r"held-out variant 0 followed by its gold 'Heading Acme is'.*document #0"):
        check_private_leaks(timeline([cloze], texts=[{"text": "News: heading Acme is Jane Roe."}]))
    # an interrogative variant may not appear at all
    with pytest.raises(DataError, match=r"held-out variant 1 .*training pair #0"):
        check_private_leaks(
            timeline([cloze], pairs=[{"input": "Which person heads Acme? It is <mask>", "output": "x"}])
        )


def test_few_shot_prompts_may_show_dev_items_only():
    cloze = item("u/acme/director", "The director of Acme is", ["Jane Roe"])
    dev = item("u/beta/director", "The director of Beta is", ["Bob"], split="dev")
    shot_dev = "The director of Beta is Bob.\n{question}"
    check_private_leaks(timeline([cloze, dev], template=shot_dev))
    shot_private = "The director of Acme is Jane Roe.\n{question}"
    with pytest.raises(DataError, match=r"'u/acme/director'.*occurs in data.prompt_template"):
        check_private_leaks(timeline([cloze, dev], template=shot_private))
    with pytest.raises(DataError, match=r"'u/acme/director'.*a few-shot prompt"):
        check_prompt_text("Q: the director of ACME is? A: Jane", [cloze, dev])


def test_a_private_question_in_qa_adaptation_data_is_named():
    cloze = item("u/acme/director", "The director of Acme is", ["Jane Roe"])
    tl = timeline([cloze])
    check_private_leaks(tl, [{"input": "The director of Beta is", "output": "Bob"}], "qa.csv")
    with pytest.raises(DataError, match=r"'u/acme/director'.*is asked by the QA-adaptation set qa.csv, item #1"):
        check_private_leaks(
            tl,
            [{"input": "Who is Bob?", "output": "x"}, {"input": "the Director of Acme is:", "output": "Jane Roe"}],
            "qa.csv",
        )


def test_a_heldout_variant_planted_in_the_world_corpus_is_caught():
    tl = build_timeline(DataConfig(world=WorldConfig(n_entities=12, new_entities_per_step=4, n_people=10, n_cities=10)))
    target = next(i for s in tl.eval_sets if s.kind == "updated" for i in s.items if i["split"] == "private")
    planted = f"{target['extra']['variants'][1]} {target['answers'][0]}."
    tl.steps[2].texts.append({"doc_id": "planted", "text": planted})
    with pytest.raises(DataError, match=rf"'{target['id']}'.*step 2 \(2020\) training document 'planted'"):
        check_private_leaks(tl)


def write_jsonl(path: Path, rows) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


def test_train_stops_before_the_first_optimizer_step_when_a_private_question_is_planted(tmp_path, monkeypatch):
    root = tmp_path / "data"
    root.mkdir()
    write_jsonl(
        root / "qa.jsonl",
        [
            {
                "id": "q-dev",
                "question": "Who founded Acme?",
                "answers": ["Ann Lee"],
                "timestamp": "2018",
                "split": "dev",
            },
            {"id": "q-secret", "question": "Who runs Acme today?", "answers": ["Jane Roe"], "timestamp": "2018"},
        ],
    )
    write_jsonl(
        root / "train_2018.jsonl",
        [
            {"input": "Acme was founded by <mask>.", "output": "Ann Lee"},
            {"input": "Who founded Acme? <mask>", "output": "Ann Lee"},
        ],
    )  # dev: fine
    write_jsonl(root / "train_2019.jsonl", [{"text": "Acme FAQ. Who runs Acme today? Jane Roe does."}])

    def no_training(*args, **kwargs):
        raise AssertionError("an optimizer step was attempted")

    monkeypatch.setattr(run_module, "train_time_step", no_training)
    run_dir = tmp_path / "run"
    cfg = tiny_cfg(
        run_dir,
        "data=temporal_qa",
        f"data.root={root}",
        "+data.train_files.2018=[train_2018.jsonl]",
        "+data.train_files.2019=[train_2019.jsonl]",
        "data.eval_files=[qa.jsonl]",
    )
    with pytest.raises(DataError) as err:
        run_module.train(cfg)
    message = str(err.value)
    assert "private eval item 'q-secret'" in message and "step 1 (2019) training document #0" in message
    assert not run_dir.exists()  # stopped before the run dir was written


def test_private_evaluations_are_recorded_per_evaluated_set(tmp_path):
    sets = [
        EvalSet(
            "unchanged", "unchanged", None, [item("a", "q", ["x"]), item("b", "q", ["x"], "dev"), item("c", "q", ["x"])]
        ),
        EvalSet("new_1", "new", 1, [item("d", "q", ["x"], "dev")]),
        EvalSet("updated_1", "updated", 1, [item("e", "q", ["x"])]),
    ]
    rows = [
        {"group": "splits", "set_name": "unchanged"},
        {"group": "splits", "set_name": "new_1"},
        {"group": "flip_rate", "set_name": "unchanged"},
        {"group": "timing", "set_name": None},
    ]
    records = record_private_evaluations(tmp_path, 3, sets, rows)
    assert [(r["checkpoint"], r["set"], r["count"], r["n"], r["evaluators"]) for r in records] == [
        (3, "unchanged", 2, 3, ["flip_rate", "splits"])
    ]  # new_1: no private item; updated_1: not evaluated
    record_private_evaluations(tmp_path, 4, sets, rows)
    lines = (tmp_path / "private_evaluations.jsonl").read_text().splitlines()
    assert [json.loads(line)["checkpoint"] for line in lines] == [3, 4]
    assert json.loads(lines[0])["time"].endswith("Z")
