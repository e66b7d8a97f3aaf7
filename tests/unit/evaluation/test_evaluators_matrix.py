"""The ``matrix`` evaluator and the summary's matrix (docs/metrics.md#3-continual-learning-matrix) on hand-built split rows."""

import json

import pytest

from evolve_train.config import EvalConfig
from evolve_train.data.timeline import Timeline, TimeStep
from evolve_train.evaluation.evaluator import EvalContext
from evolve_train.evaluation.evaluators.matrix import format_matrix, matrices, matrix_evaluator, matrix_summary


def split(checkpoint, kind, step, em, n=10):
    return {"group": "splits", "checkpoint": checkpoint, "set": kind, "set_step": step, "em": em, "n": n}


# checkpoint -1 is the model before training; ckpt i also evaluates step i+1's sets (forward transfer)
ROWS = [
    split(-1, "unchanged", None, 0.0),
    split(-1, "new", 1, 0.05),
    split(-1, "updated", 1, 0.0),
    split(-1, "new", 2, 0.0),
    split(-1, "updated", 2, 0.0, n=30),
    split(0, "unchanged", None, 0.9),
    split(0, "new", 1, 0.1),
    split(0, "updated", 1, 0.0),
    split(0, "outdated", 1, 0.9),
    split(1, "unchanged", None, 0.8),
    split(1, "new", 1, 0.9),
    split(1, "updated", 1, 0.8),
    split(1, "outdated", 1, 0.1),
    split(1, "new", 2, 0.2),
    split(1, "updated", 2, 0.2, n=30),
    split(2, "unchanged", None, 0.7),
    split(2, "new", 1, 0.6),
    split(2, "updated", 1, 0.5),
    split(2, "outdated", 1, 0.3),
    split(2, "new", 2, 0.9),
    split(2, "updated", 2, 1.0, n=30),
]
# learned: j=0 Unchanged; j=1 (New_1 + Updated_1)/2 (n 10 + 10); j=2 (New_2·10 + Updated_2·30)/40
LEARNED = {0: {0: 0.9, 1: 0.05}, 1: {0: 0.8, 1: 0.85, 2: 0.2}, 2: {0: 0.7, 1: 0.55, 2: 0.975}}


def test_learned_matrix_is_item_weighted_and_keeps_the_initial_row():
    A = matrices(ROWS)
    for i, row in LEARNED.items():
        assert A["learned"][i] == pytest.approx(row)
    assert A["learned"][-1] == pytest.approx({0: 0.0, 1: 0.025, 2: 0.0})
    assert A["outdated"] == {0: {1: 0.9}, 1: {1: 0.1}, 2: {1: 0.3}}
    assert A["unchanged"][2] == {0: 0.7}


def test_matrix_summary_hand_computed():
    summary = matrix_summary(ROWS)
    learned = summary["matrices"]["learned"]
    assert "-1" not in learned["A"] and learned["A_init"] == pytest.approx({"0": 0.0, "1": 0.025, "2": 0.0})
    at2 = learned["metrics"]["2"]
    assert at2["avg_acc"] == pytest.approx((0.7 + 0.55 + 0.975) / 3)
    assert at2["bwt"] == pytest.approx(((0.7 - 0.9) + (0.55 - 0.85)) / 2)
    assert at2["forgetting"] == pytest.approx({"0": 0.2, "1": 0.3})
    assert at2["forgetting_max"] == pytest.approx({"0": 0.2, "1": 0.3})
    assert learned["metrics"]["1"]["fwt"] == pytest.approx(0.05 - 0.025)  # A[0][1] − A_init[1]
    assert learned["metrics"]["2"]["fwt"] == pytest.approx(0.2 - 0.0)
    # fuar_1: forgotten 0.9 − 0.8; gained (0.8 − 0.0) + (0.9 − 0.1)
    # fuar_2: forgotten 0.8 − 0.7; gained (1.0 − 0.2) + (0.9 − 0.2)
    assert summary["fuar"] == pytest.approx({"1": 0.1 / 1.6, "2": 0.1 / 1.5})
    json.dumps(summary)  # JSON-able


def test_without_forward_transfer_or_initial_model_fwt_and_fuar_are_null():
    rows = [r for r in ROWS if r["checkpoint"] >= 0 and (r["set_step"] or 0) <= r["checkpoint"]]
    summary = matrix_summary(rows)
    assert summary["fuar"] == {"1": None, "2": None}
    assert summary["matrices"]["learned"]["A_init"] is None
    assert all(m["fwt"] is None for m in summary["matrices"]["learned"]["metrics"].values())


def test_evaluator_reads_earlier_checkpoints_from_the_run_dir(tmp_path):
    earlier = [r for r in ROWS if r["checkpoint"] < 2]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in earlier))
    timeline = Timeline(steps=[TimeStep(k, str(2018 + k)) for k in range(3)], eval_sets=[])
    ctx = EvalContext(timeline=timeline, checkpoint=2, cfg=EvalConfig(), run_dir=tmp_path)
    ctx.rows = [r for r in ROWS if r["checkpoint"] == 2]  # this checkpoint's splits rows
    rows = {r["set"]: r for r in matrix_evaluator(ctx)}
    assert set(rows) == {"unchanged", "new", "updated", "outdated", "learned"}
    learned = rows["learned"]
    assert (learned["group"], learned["checkpoint"]) == ("matrix", 2)
    assert learned["A_row"] == pytest.approx({"0": 0.7, "1": 0.55, "2": 0.975})
    assert learned["bwt"] == pytest.approx(-0.25)
    assert learned["fuar"] == pytest.approx(0.1 / 1.5)


def test_n0_sets_are_skipped_not_zero():
    rows = [
        split(0, "unchanged", None, 0.9),
        split(1, "unchanged", None, 0.8),
        split(1, "new", 1, None, n=0),
        split(1, "updated", 1, 0.6),
    ]
    A = matrices(rows)
    assert A["learned"][1] == {0: 0.8, 1: 0.6}  # the empty New_1 does not drag the column to 0
    assert A["new"][1] == {1: None}


def test_format_matrix_prints_rows_and_metrics():
    text = format_matrix(matrix_summary(ROWS))
    lines = text.splitlines()
    assert "learned" in lines[0] and "avg_acc" in lines[1] and "fuar" in lines[1]
    assert lines[2].startswith("initial ") and lines[-1].startswith("2 ")
    assert "0.975" in lines[-1] and "0.067" in lines[-1]  # A[2][2] and fuar_2
    assert "fwt: -" not in lines[0]  # the initial model's rows are there: fwt has a value


def test_without_the_initial_model_the_matrix_says_why_fwt_is_empty():
    text = format_matrix(matrix_summary([row for row in ROWS if row["checkpoint"] >= 0]))
    lines = text.splitlines()
    assert lines[0].endswith("; fwt: - without an evaluated initial model)") and not lines[2].startswith("initial")
    assert all(line.split()[-2] == "-" for line in lines[2:])  # the fwt column
