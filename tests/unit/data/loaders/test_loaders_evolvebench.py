"""EvolveBench-style event files load as open-form and multiple-choice items and score with score_items."""

from __future__ import annotations

import json

import pytest

from evolve_train.data.loaders.evolvebench import read_events
from evolve_train.evaluation.metrics import score_items

EVENTS = [
    {
        "id": "acme-ceo",
        "dimension": "knowledge_evolution",
        "knowledge_event": "Acme changes CEO",
        "questions": [
            {
                "text": "As of 2019, who is the CEO of Acme?",
                "timestamp": "2019",
                "correct": "Ann Lee",
                "distractors": ["Bo Chan", "Cy Diaz"],
            },
            {
                "text": "As of June 1, 2021, who is the CEO of Acme?",
                "timestamp": "June 1, 2021",
                "correct": ["Bo Chan", "B. Chan"],
                "distractors": ["Ann Lee", "Cy Diaz"],
            },
        ],
        "source": "press release",
        "verification": "two annotators",
    },
    {
        "id": "zeta-version",
        "dimension": "version_awareness",
        "knowledge_event": "Zeta releases",
        "questions": [
            {
                "text": "In 2020, what is the latest version of Zeta?",
                "timestamp": "2020-03",
                "correct": "2.0",
                "distractors": ["1.0", "3.0"],
            },
            {
                "text": "In 2022, what is the latest version of Zeta?",
                "timestamp": "2022-03-01",
                "correct": "3.0",
                "distractors": ["2.0", "1.0"],
            },
        ],
        "source": "changelog",
        "verification": "automatic",
    },
]


@pytest.fixture(params=["json", "jsonl"])
def event_file(request, tmp_path):
    path = tmp_path / f"events.{request.param}"
    if request.param == "json":
        path.write_text(json.dumps({"events": EVENTS}, indent=1), encoding="utf-8")
    else:
        path.write_text("".join(json.dumps(event) + "\n" for event in EVENTS), encoding="utf-8")
    return path


def test_events_load_as_open_form_and_multiple_choice_items(event_file):
    items = [item for _, item in read_events(event_file)]
    by_id = {item.id: item for item in items}
    assert sorted(by_id) == [
        "acme-ceo/0",
        "acme-ceo/0/mc",
        "acme-ceo/1",
        "acme-ceo/1/mc",
        "zeta-version/0",
        "zeta-version/0/mc",
        "zeta-version/1",
        "zeta-version/1/mc",
    ]
    open_form, mc = by_id["acme-ceo/1"], by_id["acme-ceo/1/mc"]
    assert open_form.answers == ["Bo Chan", "B. Chan"] and open_form.options is None
    assert sorted(mc.options) == ["Ann Lee", "Bo Chan", "Cy Diaz"] and mc.options[mc.gold_index] == "Bo Chan"
    assert open_form.pair_id == "acme-ceo" and mc.pair_id == "acme-ceo/mc"
    assert open_form.dimension == "knowledge_evolution" and open_form.extra["source"] == "press release"
    assert read_events(event_file)[0][0] == (3 if event_file.suffix == ".json" else 1)  # line of the event


def test_gold_positions_are_shuffled_but_fixed(event_file):
    items = [item for _, item in read_events(event_file) if item.options]
    assert len({item.gold_index for item in items}) > 1  # not always the first option
    again = [item for _, item in read_events(event_file) if item.options]
    assert [i.options for i in items] == [i.options for i in again]


def test_scores_with_score_items(event_file):
    items = [item for _, item in read_events(event_file)]
    right = {item.id: item.answers[-1] for item in items}
    report = score_items(items, right)
    assert report["overall"]["em"] == 1.0
    assert report["paired"]["n_pairs"] == 4 and report["paired"]["update_adoption"] == 1.0
    assert set(report["dimensions"]) >= {"knowledge_evolution", "version_awareness"}
    stale = {item.id: ("Ann Lee" if item.id.startswith("acme") else "2.0") for item in items}
    report = score_items(items, stale)
    assert report["paired"]["update_adoption"] == 0.0 and report["paired"]["confusion_index"] == 0.5
    # multiple choice through option scores: the gold option scored highest on every MC item
    mc = [item for item in items if item.options]
    scored = {
        item.id: {"option_scores": [0.0 if k == item.gold_index else -5.0 for k in range(len(item.options))]}
        for item in mc
    }
    report = score_items(mc, scored)
    assert report["overall"]["em"] == 1.0 and report["calibration"]["n"] == len(mc)


def test_repeated_answers_fall_back_to_automatic_pairing(tmp_path):
    event = {
        "id": "e",
        "knowledge_event": "k",
        "questions": [
            {"text": "In 2018, who leads X?", "timestamp": "2018", "correct": "A", "distractors": []},
            {"text": "In 2019, who leads X?", "timestamp": "2019", "correct": "A", "distractors": []},
            {"text": "In 2020, who leads X?", "timestamp": "2020", "correct": "B", "distractors": []},
        ],
    }
    path = tmp_path / "e.jsonl"
    path.write_text(json.dumps(event) + "\n", encoding="utf-8")
    items = [item for _, item in read_events(path)]
    assert all(item.pair_id is None and item.base_question == "event:e" for item in items)
    report = score_items(items, {item.id: item.answers[0] for item in items})
    assert report["paired"]["n_pairs"] == 1  # only 2019 -> 2020 changes the answer
