"""docs/metrics.md#7-multiple-choice-and-confidence: multiple choice by log-likelihood and calibration."""

import math

import pytest

from evolve_train.evaluation.metrics import (
    brier,
    calibration_summary,
    cyclic_rotations,
    ece,
    mc_accuracy,
    mc_accuracy_norm,
    mc_predict,
    overconfident_error_rate,
    position_consistency,
    softmax,
)


def test_mc_predict_ties_go_to_the_first_option():
    assert mc_predict([-1.0, -1.0, -2.0]) == 0
    assert mc_predict([-3.0, -1.0, -1.0]) == 1
    assert mc_predict([-3.0, -2.0, -1.0]) == 2


def test_acc_norm_divides_by_utf8_bytes():
    # acc: −2.0 > −3.0 → option 0. acc_norm: −2/2 = −1 < −3/4 = −0.75 → option 1
    assert mc_accuracy([[-2.0, -3.0]], [1]) == 0.0
    assert mc_accuracy_norm([[-2.0, -3.0]], [["ab", "abcd"]], [1]) == 1.0
    # "éé" is 4 bytes (2 characters): −2.2/4 = −0.55 > −2.0/3 ≈ −0.667 → option 0
    # (dividing by characters would give −1.1 and pick option 1)
    assert mc_accuracy_norm([[-2.2, -2.0]], [["éé", "abc"]], [0]) == 1.0


def test_softmax_confidence():
    assert softmax([0.0, math.log(3.0)]) == pytest.approx([0.25, 0.75])
    assert softmax([1000.0, 1000.0]) == pytest.approx([0.5, 0.5])  # no overflow


def test_ece_hand_computed():
    # bins: 9 → [0.95 ✓]; 8 → [0.85 ✗, 0.82 ✓]; 3 → [0.30 ✗]
    # ECE = 1/4·|1 − 0.95| + 2/4·|0.5 − 0.835| + 1/4·|0 − 0.3| = 0.0125 + 0.1675 + 0.075 = 0.255
    assert ece([0.95, 0.85, 0.82, 0.3], [1, 0, 1, 0]) == pytest.approx(0.255)


def test_ece_all_correct():
    assert ece([1.0, 1.0], [1, 1]) == 0.0  # confidence 1.0 falls in the last bin
    # bin 9: two at 0.9 → 2/3·|1 − 0.9|; bin 6: one at 0.6 → 1/3·|1 − 0.6|; 0.0667 + 0.1333 = 0.2
    assert ece([0.9, 0.6, 0.9], [1, 1, 1]) == pytest.approx(0.2)
    assert ece([], []) is None


def test_brier_hand_computed():
    # q1: (0.7−1)² + 0.2² + 0.1² = 0.09 + 0.04 + 0.01 = 0.14; q2: 0.5² + (0.5−1)² = 0.5; mean 0.32
    assert brier([[0.7, 0.2, 0.1], [0.5, 0.5]], [0, 1]) == pytest.approx(0.32)


def test_overconfident_error_rate():
    # wrong: 0.9, 0.8, 0.5 → ≥ 0.8: two of three (τ inclusive)
    assert overconfident_error_rate([0.9, 0.8, 0.5, 0.99], [0, 0, 0, 1]) == pytest.approx(2 / 3)
    assert overconfident_error_rate([0.9, 0.8, 0.5, 0.99], [0, 0, 0, 1], tau=0.85) == pytest.approx(1 / 3)
    assert overconfident_error_rate([0.9, 0.4], [1, 1]) is None  # no errors


def test_position_consistency_and_rotations():
    assert cyclic_rotations(["a", "b", "c"]) == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"]]
    assert cyclic_rotations(["a", "b", "c"], k=2) == [["a", "b", "c"], ["b", "c", "a"]]
    assert position_consistency([["Paris", "Paris", "Paris"], ["Rome", "Oslo", "Rome"]]) == 0.5
    assert position_consistency([]) is None


def test_calibration_summary_hand_computed():
    # q1: scores [0, ln 3] → probs [0.25, 0.75], gold 1 → right, confidence 0.75
    # q2: scores [ln 9, 0] → probs [0.9, 0.1], gold 1 → wrong, confidence 0.9
    # ECE: bin 7: 1/2·|1 − 0.75| = 0.125; bin 9: 1/2·|0 − 0.9| = 0.45 → 0.575
    # Brier: q1 0.25² + 0.25² = 0.125; q2 0.9² + 0.9² = 1.62 → mean 0.8725
    summary = calibration_summary([[0.0, math.log(3)], [math.log(9), 0.0]], [["x", "y"], ["x", "y"]], [1, 1])
    assert summary == {
        "acc": 0.5,
        "acc_norm": 0.5,
        "ece": pytest.approx(0.575),
        "brier": pytest.approx(0.8725),
        "overconfident_error_rate": 1.0,
        "n": 2,
    }


def test_calibration_summary_empty_group():
    assert calibration_summary([], [], []) == {
        "acc": None,
        "acc_norm": None,
        "ece": None,
        "brier": None,
        "overconfident_error_rate": None,
        "n": 0,
    }
