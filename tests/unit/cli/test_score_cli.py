"""`evolve-score` and `score_items` (docs/metrics.md#1-answer-matching, docs/metrics.md#4-paired-temporal-metrics, docs/metrics.md#6-the-five-dimensions, docs/metrics.md#7-multiple-choice-and-confidence)."""

import json
import math
import os
import subprocess
import sys

import pytest

from evolve_train.cli.score import main
from evolve_train.data.qa_items import QAItem
from evolve_train.evaluation.metrics import score_items
from helpers.processes import ROOT

REPO = ROOT

GOLD = [
    {
        "id": "a19",
        "question": "As of 2019, who leads Acme?",
        "answers": ["Ann Lee", "Ann"],
        "timestamp": "2019",
        "set": "outdated",
        "dimension": "version_awareness",
    },
    {
        "id": "a21",
        "question": "In February 07, 2021, who leads Acme?",
        "answers": ["Bob Stone"],
        "timestamp": "February 07, 2021",
        "set": "updated",
        "dimension": "version_awareness",
    },
    {
        "id": "f19",
        "question": "As of 2019-05-03, when was Acme founded?",
        "answers": ["1990"],
        "timestamp": "2019-05-03",
        "set": "unchanged",
        "dimension": "time_localization",
    },
    {
        "id": "f21",
        "question": "As of 2021, when was Acme founded?",
        "answers": "1990",
        "timestamp": "2021",
        "set": "unchanged",
        "dimension": "time_localization",
    },
    {"id": "now", "question": "Who leads Acme?", "answers": ["Bob Stone", "Bob"]},
    {
        "id": "mc1",
        "question": "Which city hosts Acme's HQ?",
        "answers": ["Oslo"],
        "options": ["Rome", "Oslo"],
        "set": "new",
    },
]
PREDICTIONS = [
    {"id": "a19", "prediction": "Ann\nQuestion: who?"},  # cut at the newline → "Ann", an alias: EM 1
    {"id": "a21", "prediction": "Ann Lee"},  # the 2019 answer: EM 0, F1 0, confusion
    {"id": "f19", "prediction": "1990"},  # EM 1
    {"id": "f21", "prediction": "in 1990"},  # EM 0; F1: P 1/2, R 1 → 2/3
    {"id": "now", "prediction": "bob"},  # no timestamp: the latest answer, alias "Bob": EM 1
    {"id": "mc1", "prediction": "Oslo", "option_scores": [-2.0, -0.5]},  # EM 1
]
P_OSLO = 1 / (1 + math.exp(-1.5))  # softmax([-2.0, -0.5])[1] ≈ 0.8176
EXPECTED = {
    # EM: 1 + 0 + 1 + 0 + 1 + 1 = 4 of 6; F1: (1 + 0 + 1 + 2/3 + 1 + 1) / 6 = 14/18
    "overall": {"em": pytest.approx(4 / 6), "f1": pytest.approx(14 / 18), "n": 6},
    "sets": {
        "outdated": {"em": 1.0, "f1": 1.0, "n": 1},
        "updated": {"em": 0.0, "f1": 0.0, "n": 1},
        "unchanged": {"em": 0.5, "f1": pytest.approx((1 + 2 / 3) / 2), "n": 2},
        "all": {"em": 1.0, "f1": 1.0, "n": 1},
        "new": {"em": 1.0, "f1": 1.0, "n": 1},
    },
    # one automatic pair (a19, a21); the founding-year items share their answer → stable, not a pair
    # adoption: a21 wrong → 0; confusion: EM(p_new "Ann Lee", g_old) = 1 → 1 / (2·1)
    "paired": {"update_adoption": 0.0, "confusion_index": 0.5, "n_pairs": 1},
    "time_accuracy": {"2019": {"em": 1.0, "n": 2}, "2021": {"em": 0.0, "n": 2}},
    "old_knowledge_retention": {"em": 0.5, "n": 2},  # f19 right, f21 wrong
    "dimensions": {
        "time_localization": {"em": 0.5, "n": 2, "error_share": 0.5},
        "version_awareness": {"em": 0.5, "n": 2, "error_share": 0.5},
    },
    # acc_norm: both options 4 bytes → same choice; ECE = |1 − p|
    # Brier = (p_rome − 0)² + (p_oslo − 1)² = 2(1 − p)²
    "calibration": {
        "acc": 1.0,
        "acc_norm": 1.0,
        "ece": pytest.approx(1 - P_OSLO),
        "brier": pytest.approx(2 * (1 - P_OSLO) ** 2),
        "overconfident_error_rate": None,
        "n": 1,
    },
}


def write_jsonl(path, records):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records), encoding="utf-8")
    return str(path)


@pytest.fixture
def files(tmp_path):
    return write_jsonl(tmp_path / "gold.jsonl", GOLD), write_jsonl(tmp_path / "pred.jsonl", PREDICTIONS)


def run_json(capsys, *argv):
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_report_hand_computed(files, capsys):
    gold, pred = files
    report = run_json(capsys, "--gold", gold, "--predictions", pred)
    assert list(report) == [
        "overall",
        "sets",
        "paired",
        "time_accuracy",
        "old_knowledge_retention",
        "dimensions",
        "calibration",
    ]
    assert report == EXPECTED


def test_table_output(files, capsys):
    gold, pred = files
    assert main(["--gold", gold, "--predictions", pred]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["overall", "em=0.6667", "f1=0.7778", "n=6"]
    assert any(line.split() == ["time", "2021", "em=0.0000", "n=2"] for line in lines)


def test_field_mapping_reads_another_layout(tmp_path, capsys):
    renamed = [
        {
            "id": g["id"],
            "question": "unrelated original wording",
            "edited_question": g["question"],
            "answer": g["answers"],
            **({"date": g["timestamp"]} if "timestamp" in g else {}),
            **{k: v for k, v in g.items() if k not in ("id", "question", "answers", "timestamp")},
        }
        for g in GOLD
    ]
    gold = write_jsonl(tmp_path / "renamed.jsonl", renamed)
    pred = write_jsonl(tmp_path / "pred.jsonl", PREDICTIONS)
    report = run_json(
        capsys,
        "--gold",
        gold,
        "--predictions",
        pred,
        "--field",
        "question=edited_question",
        "--field",
        "answers=answer",
        "--field",
        "timestamp=date",
    )
    assert report == EXPECTED


def test_explicit_pair_ids_and_empty_groups():
    items = [
        QAItem(id="o", question="Who?", answers=["Ann"], timestamp="2019", pair_id="p"),
        QAItem(id="n", question="Who now?", answers=["Bob"], timestamp="2020-05", pair_id="p"),
    ]
    report = score_items(items, {"o": "Ann", "n": "Bob"})
    assert report["paired"] == {"update_adoption": 1.0, "confusion_index": 0.0, "n_pairs": 1}
    assert report["calibration"] == {
        "acc": None,
        "acc_norm": None,
        "ece": None,
        "brier": None,
        "overconfident_error_rate": None,
        "n": 0,
    }
    assert report["dimensions"] == {} and report["old_knowledge_retention"] == {"em": None, "n": 0}
    with pytest.raises(ValueError, match="no prediction for item id 'n'"):
        score_items(items, {"o": "Ann"})


def error_of(capsys, *argv):
    code = main(list(argv))
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    return err


@pytest.mark.parametrize(
    "gold_records, pred_records, where, reason",
    [
        (GOLD[:2] + ['{"id": "f19",'] + GOLD[3:], PREDICTIONS, "gold.jsonl, line 3", "malformed JSON"),
        (GOLD, PREDICTIONS[:1] + ["not json"] + PREDICTIONS[2:], "pred.jsonl, line 2", "malformed JSON"),
        (GOLD, PREDICTIONS[:3] + PREDICTIONS[4:], "gold.jsonl, line 4, field 'id'", "no prediction for id 'f21'"),
        (
            GOLD,
            PREDICTIONS + [{"id": "zz", "prediction": "x"}],
            "pred.jsonl, line 7, field 'id'",
            "id 'zz' is not in the gold file",
        ),
        (GOLD + [GOLD[0]], PREDICTIONS, "gold.jsonl, line 7, field 'id'", "duplicate id 'a19' (lines 1 and 7)"),
        (GOLD, PREDICTIONS + [PREDICTIONS[1]], "pred.jsonl, line 7, field 'id'", "duplicate id 'a21' (lines 2 and 7)"),
        (
            GOLD[:1] + [{**GOLD[1], "timestamp": "Febtember 7, 2021"}] + GOLD[2:],
            PREDICTIONS,
            "gold.jsonl, line 2, field 'timestamp'",
            "unparseable timestamp 'Febtember 7, 2021'",
        ),
        (
            GOLD,
            PREDICTIONS[:2] + [{"id": "f19"}] + PREDICTIONS[3:],
            "pred.jsonl, line 3, field 'prediction'",
            "missing required field 'prediction'",
        ),
        (
            GOLD,
            PREDICTIONS[:5] + [{"id": "mc1", "option_scores": [-1.0]}],
            "pred.jsonl, line 6, field 'option_scores'",
            "1 option_scores for item 'mc1' with 2 options",
        ),
    ],
)
def test_bad_input_exits_2_with_file_line_and_reason(tmp_path, capsys, gold_records, pred_records, where, reason):
    gold = write_jsonl(tmp_path / "gold.jsonl", gold_records)
    pred = write_jsonl(tmp_path / "pred.jsonl", pred_records)
    err = error_of(capsys, "--gold", gold, "--predictions", pred)
    assert err.startswith("evolve-score: error: ")
    assert f"{tmp_path}/{where}" in err and reason in err


def test_missing_file_and_bad_field_option(tmp_path, capsys, files):
    gold, pred = files
    assert str(tmp_path / "nope.jsonl") in error_of(
        capsys, "--gold", str(tmp_path / "nope.jsonl"), "--predictions", pred
    )
    assert "unknown QA item field" in error_of(capsys, "--gold", gold, "--predictions", pred, "--field", "qq=x")
    with pytest.raises(SystemExit) as caught:
        main(["--gold", gold, "--predictions", pred, "--field", "no-equals-sign"])
    assert caught.value.code == 2 and "KEY=SOURCE" in capsys.readouterr().err


def test_runs_as_a_program(files):
    gold, pred = files
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(
        [sys.executable, "-m", "evolve_train.cli.score", "--gold", gold, "--predictions", pred, "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == EXPECTED
