"""Readers of cutoff evidence (data/loaders/cutoff_evidence.py) on tiny files in each layout."""

import json

import numpy as np
import pytest

from evolve_train.data.loaders.cutoff_evidence import (
    match_value,
    read_dyknow_answers,
    read_loss_csv,
    read_tic_lm_evals,
)
from evolve_train.data.loaders.dyknow_facts import Fact, parse_answer
from evolve_train.errors import DataError
from helpers.cutoff import write_tic_lm


def test_tic_lm_layout_gives_one_matrix_per_domain(tmp_path):
    a = write_tic_lm(
        tmp_path, "cutoff201305", {"news": {"201305": 2.0, "201403": 2.3}, "wiki": {"201305": 1.0, "201403": 1.1}}
    )
    b = write_tic_lm(
        tmp_path, "cutoff202407", {"news": {"201305": 2.0, "201403": 2.1}, "wiki": {"201305": 1.0, "201403": 1.0}}
    )
    matrices = read_tic_lm_evals([b, a])
    assert sorted(matrices) == ["news", "wiki"]
    news = matrices["news"]
    assert news.slices == ["201305", "201403"] and [r.name for r in news.rows] == ["cutoff201305", "cutoff202407"]
    row = news.row("cutoff201305")
    assert row.means.tolist() == [2.0, 2.3]
    assert row.stderr == pytest.approx([0.01, 0.01], rel=1e-4)
    assert row.n == 200


def test_tic_lm_missing_slice_and_bad_record_fail(tmp_path):
    a = write_tic_lm(tmp_path, "m1", {"news": {"201305": 2.0, "201403": 2.3}})
    b = write_tic_lm(tmp_path, "m2", {"news": {"201305": 2.0}})
    with pytest.raises(DataError, match="no news slice 201403"):
        read_tic_lm_evals([a, b])
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"loss": 1.0}\n')
    with pytest.raises(DataError, match="line 1"):
        read_tic_lm_evals([bad])


def test_loss_csv(tmp_path):
    path = tmp_path / "losses.csv"
    path.write_text("model,2019,2020,2021\nold,2.0,2.1,2.5\nnew,2.0,2.0,2.0\n")
    matrix = read_loss_csv(path)
    assert matrix.slices == ["2019", "2020", "2021"]
    assert np.allclose(matrix.row("old").means, [2.0, 2.1, 2.5])
    path.write_text("model,2019,2020\nold,2.0,x\n")
    with pytest.raises(DataError, match="line 2"):
        read_loss_csv(path)


def fact(category: str, entity: str, relation: str, *answers: str) -> Fact:
    values = [parse_answer(a, category, entity, relation, "facts", k) for k, a in enumerate(answers)]
    return Fact(category, entity, relation, {"generic": "x"}, values)


FACTS = [
    fact(
        "countries",
        "Italy",
        "President",
        "Giorgio Napolitano |S: +2006-05-15T00:00:00Z |E: +2015-01-14T00:00:00Z",
        "Sergio Mattarella |S: +2015-02-03T00:00:00Z",
    ),
    fact(
        "athletes",
        "Lionel Messi",
        "",
        "FC Barcelona |S: +2004-00-00T00:00:00Z |E: +2021-00-00T00:00:00Z",
        "Inter Miami CF |S: +2023-07-15T00:00:00Z",
    ),
]


def write_model(root, with_sheet: bool = True):
    model = root / "some-model"
    model.mkdir()
    if with_sheet:
        sheet = {"Italy": {"President": {"generic": "correct", "rephrased_1": "irrelevant"}}}
        dates = {"Italy": {"President": {"generic": "+2015-02-03T00:00:00Z"}}}
        (model / "countries_answer_sheet.json").write_text(json.dumps(sheet))
        (model / "countries_dates.json").write_text(json.dumps(dates))
        (model / "athletes_answer_sheet.json").write_text(json.dumps({"Lionel Messi": {"generic": "outdated"}}))
        (model / "athletes_dates.json").write_text(json.dumps({"Lionel Messi": {"generic": "+2004-00-00T00:00:00Z"}}))
    answers = {
        "Lionel Messi": {
            "answers": {"generic": "He plays for Barcelona.", "rephrased_1": "Inter Miami, since 2023"},
            "questions": {},
        }
    }
    (model / "athletes_answers.json").write_text(json.dumps(answers))
    countries = {"Italy": {"President": {"answers": {"generic": "Giorgio Napolitano", "rephrased_1": "Nobody"}}}}
    (model / "countries_answers.json").write_text(json.dumps(countries))
    return model


def test_dyknow_answer_sheet_and_dates(tmp_path):
    answers = read_dyknow_answers(write_model(tmp_path), FACTS)
    by = {(a.fact, a.year, a.current) for a in answers}
    assert by == {
        (("countries", "Italy", "President"), 2015, True),
        (("countries", "Italy", "President"), None, None),
        (("athletes", "Lionel Messi", ""), 2004, False),
    }
    assert {a.current_year for a in answers} == {2015, 2023}
    without_facts = read_dyknow_answers(tmp_path / "some-model")
    assert {a.current_year for a in without_facts} == {None}


def test_dyknow_answers_judged_by_matching(tmp_path):
    answers = read_dyknow_answers(write_model(tmp_path, with_sheet=False), FACTS)
    got = sorted(((a.fact[1], a.year, a.current) for a in answers), key=str)
    assert got == [
        ("Italy", 2006, False),
        ("Italy", None, None),
        ("Lionel Messi", 2004, False),
        ("Lionel Messi", 2023, True),
    ]
    with pytest.raises(DataError, match="needs the facts"):
        read_dyknow_answers(tmp_path / "some-model")


def test_match_value_takes_the_value_named_first():
    messi = FACTS[1]
    assert match_value("Inter Miami after FC Barcelona", messi).text == "Inter Miami CF"
    assert match_value("Barça", messi) is None
