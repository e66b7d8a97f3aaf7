"""compare_runs (paired bootstrap + kappa per split) and the saturation refresh (evolve-data refresh)."""

from __future__ import annotations

import json

import pytest

from evolve_train.cli.data import main as data_main
from evolve_train.data.refresh import saturated_ids
from evolve_train.evaluation.compare import compare_runs
from evolve_train.evaluation.metrics.stats import paired_bootstrap_diff
from evolve_train.reporting.runs import ReportError
from helpers.runs import fake_run, write_jsonl


def test_compare_runs_per_split_by_hand(tmp_path):
    a = fake_run(
        tmp_path / "a",
        {
            "unchanged": {"u1": 1, "u2": 1, "u3": 0, "u4": 0},
            "new_1": {"n1": 1, "n2": 1},
            "outdated_1": {"o1": 1, "o2": 0},
        },
    )
    b = fake_run(
        tmp_path / "b",
        {
            "unchanged": {"u1": 1, "u2": 0, "u3": 0, "u4": 0},
            "new_1": {"n1": 1, "n2": 1},
            "outdated_1": {"o1": 0, "o2": 0},
        },
    )
    result = compare_runs(a, b, B=500)
    u = result["unchanged"]
    assert u["diff"] == 0.25 and (u["em_a"], u["em_b"], u["n"]) == (0.5, 0.25, 4)
    # kappa: p_o = 3/4, p_e = (2*1 + 2*3)/16 = 1/2 -> (3/4 - 1/2)/(1/2) = 1/2
    assert u["kappa"] == pytest.approx(0.5)
    expected = paired_bootstrap_diff({"u1": 1, "u2": 1, "u3": 0, "u4": 0}, {"u1": 1, "u2": 0, "u3": 0, "u4": 0}, B=500)
    assert (u["ci_low"], u["ci_high"]) == (expected["ci_low"], expected["ci_high"])
    assert result["new_1"]["diff"] == 0.0 and result["new_1"]["kappa"] == 1.0  # identical, p_e = 1
    # all = unchanged + new (6 questions; outdated, lower-is-better, not pooled): 4/6 - 3/6
    assert result["all"]["n"] == 6 and result["all"]["diff"] == pytest.approx(1 / 6)
    assert result["outdated_1"]["diff"] == 0.5


def test_compare_runs_refuses_different_question_sets(tmp_path):
    a = fake_run(tmp_path / "a", {"unchanged": {"u1": 1, "u2": 0}})
    b = fake_run(tmp_path / "b", {"unchanged": {"u1": 1, "u9": 0}})
    with pytest.raises(ReportError, match=r"split 'unchanged' has different question sets.*'u2' only in"):
        compare_runs(a, b)
    c = fake_run(tmp_path / "c", {"unchanged": {"u1": 1, "u2": 0}, "new_1": {"n1": 1}})
    with pytest.raises(ReportError, match=r"different question sets: splits \['new_1'\] only in .*c"):
        compare_runs(c, a)


# ---------------------------------------------------------------- refresh


def test_saturated_ids_by_hand():
    golds = {"q1": ["Paris"], "q2": ["Oslo"], "q3": ["Rome"], "q4": ["Bern"]}
    ref_a = [{"q1": ["paris"], "q2": ["Oslo"], "q3": ["Rome"]}, {"q1": ["The Paris"], "q2": ["Lima"], "q3": ["Rome"]}]
    ref_b = [{"q1": ["Paris"], "q2": ["Oslo"], "q3": ["Rome", "Milan"]}]
    # q1 right everywhere (normalized); q2 wrong in a's 2nd attempt; q3: one of b's two predictions wrong;
    # q4 never answered
    assert saturated_ids(golds, [ref_a, ref_b]) == {"q1"}
    assert saturated_ids(golds, [ref_a[:1]]) == {"q1", "q2", "q3"}
    assert saturated_ids(golds, []) == set()


def test_refresh_cli_over_checkpoints_and_prediction_files(tmp_path, capsys):
    gold = write_jsonl(
        tmp_path / "gold.jsonl",
        [
            {"id": "a", "question": "Qa", "answers": ["x"], "split": "private"},
            {"id": "b", "question": "Qb", "answers": ["y", "why"], "split": "private"},
            {"id": "c", "question": "Qc", "answers": ["z"], "split": "private"},
        ],
    )
    run = tmp_path / "run"
    write_jsonl(run / "predictions" / "step_-1" / "unchanged.jsonl", [{"id": "a", "prediction": "no"}])  # ignored
    write_jsonl(
        run / "predictions" / "step_0" / "unchanged.jsonl",
        [{"id": "a", "prediction": "no"}, {"id": "b", "prediction": "no"}, {"id": "c", "prediction": "no"}],
    )
    write_jsonl(
        run / "predictions" / "step_1" / "unchanged.jsonl",
        [{"id": "a", "prediction": "x"}, {"id": "b", "prediction": "why"}],
    )
    write_jsonl(run / "predictions" / "step_1" / "new_1.jsonl", [{"id": "c", "prediction": "z"}])
    write_jsonl(
        run / "predictions" / "step_2" / "unchanged.jsonl",
        [{"id": "a", "prediction": "X."}, {"id": "b", "prediction": "y"}, {"id": "c", "prediction": "z"}],
    )
    reruns = tmp_path / "reruns"  # a reference of repeated prediction files
    write_jsonl(
        reruns / "attempt_0.jsonl",
        [{"id": "a", "prediction": "x"}, {"id": "b", "prediction": "no"}, {"id": "c", "prediction": "z"}],
    )
    write_jsonl(
        reruns / "attempt_1.jsonl",
        [{"id": "a", "prediction": "x"}, {"id": "b", "prediction": "y"}, {"id": "c", "prediction": "z"}],
    )
    out = tmp_path / "kept.jsonl"
    args = ["refresh", "--references", str(run), str(reruns), "--attempts", "2", "--gold", str(gold), "--out", str(out)]
    assert data_main(args) == 0
    # last 2 checkpoints of run: a, b, c right in both; reruns: b wrong in attempt_0 -> only a and c dropped
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == ["b"]
    assert "kept 1 of 3 items (2 dropped" in capsys.readouterr().out
    note = json.loads((tmp_path / "kept.jsonl.note.json").read_text())
    assert note["references"] == [
        {"path": str(run), "attempts": ["checkpoint 1", "checkpoint 2"]},
        {"path": str(reruns), "attempts": ["attempt_0.jsonl", "attempt_1.jsonl"]},
    ]
    assert note["dropped"] == ["a", "c"] and note["attempts"] == 2 and len(note["date"]) == 10
    # three checkpoints: step 0 was wrong everywhere -> nothing saturated in run
    assert (
        data_main(["refresh", "--references", str(run), "--attempts", "3", "--gold", str(gold), "--out", str(out)]) == 0
    )
    assert len(out.read_text().splitlines()) == 3


def test_refresh_errors_are_one_line_naming_the_reference(tmp_path, capsys):
    gold = write_jsonl(tmp_path / "gold.jsonl", [{"id": "a", "question": "Qa", "answers": ["x"]}])
    reruns = tmp_path / "reruns"
    write_jsonl(reruns / "attempt_0.jsonl", [{"id": "a", "prediction": "x"}])
    out = tmp_path / "kept.jsonl"
    assert (
        data_main(["refresh", "--references", str(reruns), "--attempts", "2", "--gold", str(gold), "--out", str(out)])
        == 2
    )
    assert f"reference {reruns} has 1 attempt(s)" in capsys.readouterr().err and not out.exists()
    write_jsonl(reruns / "attempt_1.jsonl", [{"id": "a", "generation": "x"}])
    assert (
        data_main(["refresh", "--references", str(reruns), "--attempts", "2", "--gold", str(gold), "--out", str(out)])
        == 2
    )
    assert "attempt_1.jsonl, line 1, field 'prediction'" in capsys.readouterr().err
