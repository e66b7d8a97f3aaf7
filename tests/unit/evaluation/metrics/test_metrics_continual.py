"""docs/metrics.md#3-continual-learning-matrix: the continual-learning matrix."""

import json

import pytest

from evolve_train.evaluation.metrics import avg_acc, bwt, continual_summary, forgetting, forgetting_max, fuar, fwt

# A[i][j]: checkpoint i, set of step j; A[0][1] and A[1][2] are the forward-transfer entries (j = i + 1).
A = {
    0: {0: 0.8, 1: 0.3},
    1: {0: 0.95, 1: 0.9, 2: 0.2},
    2: {0: 0.7, 1: 0.5, 2: 0.8},
}
A_INIT = {1: 0.1, 2: 0.25}


def test_avg_acc_uses_only_j_le_i():
    assert avg_acc(A, 0) == pytest.approx(0.8)  # A[0][1] (j = 1 > 0) excluded
    assert avg_acc(A, 1) == pytest.approx((0.95 + 0.9) / 2)  # 0.925
    assert avg_acc(A, 2) == pytest.approx((0.7 + 0.5 + 0.8) / 3)  # 2/3


def test_forgetting_relative_to_right_after_learning():
    assert forgetting(A, 2, 0) == pytest.approx(0.8 - 0.7)  # A[0][0] − A[2][0] = 0.1
    assert forgetting(A, 2, 1) == pytest.approx(0.9 - 0.5)  # 0.4
    assert forgetting(A, 1, 0) == pytest.approx(0.8 - 0.95)  # −0.15: it improved
    assert forgetting(A, 1, 1) is None  # only i > j


def test_forgetting_max_uses_the_best_earlier_checkpoint():
    # max(A[0][0], A[1][0]) − A[2][0] = 0.95 − 0.7 = 0.25 (plain forgetting says 0.1)
    assert forgetting_max(A, 2, 0) == pytest.approx(0.25)
    assert forgetting_max(A, 2, 1) == pytest.approx(0.9 - 0.5)  # l ∈ [1, 1]
    assert forgetting_max(A, 0, 0) is None


def test_bwt_and_fwt():
    assert bwt(A, 0) is None
    assert bwt(A, 1) == pytest.approx(0.95 - 0.8)  # 0.15
    assert bwt(A, 2) == pytest.approx(((0.7 - 0.8) + (0.5 - 0.9)) / 2)  # −0.25
    assert fwt(A, 1, A_INIT) == pytest.approx(0.3 - 0.1)  # A[0][1] − A_init[1] = 0.2
    assert fwt(A, 2, A_INIT) == pytest.approx(0.2 - 0.25)  # −0.05
    assert fwt(A, 1) is None  # no A_init


def test_none_entries_are_skipped_not_zero():
    matrix = {0: {0: None}, 1: {0: 0.5, 1: 0.6}, 2: {0: None, 1: 0.4, 2: 0.6}}
    assert avg_acc(matrix, 0) is None  # nothing to average
    assert avg_acc(matrix, 2) == pytest.approx(0.5)  # (0.4 + 0.6) / 2, not 1.0 / 3
    assert bwt(matrix, 1) is None  # A[0][0] is None: not 0.5 − 0
    assert bwt(matrix, 2) == pytest.approx(0.4 - 0.6)  # only j = 1 counts
    assert forgetting(matrix, 1, 0) is None
    assert forgetting_max(matrix, 2, 0) is None  # A[2][0] None
    assert forgetting_max({0: {0: None}, 1: {0: 0.9}, 2: {0: 0.5}}, 2, 0) == pytest.approx(0.4)  # l = 0 skipped


def test_fuar_hand_computed():
    # forgotten = 0.9 − 0.8 = 0.1; gained = (0.5 − 0.2) + (0.3 − 0.1) = 0.5 → 0.2
    assert fuar(0.9, 0.8, 0.2, 0.5, 0.1, 0.3) == pytest.approx(0.2)
    # an Updated drop is clipped to 0: gained = 0 + 0.2 → 0.1 / 0.2 = 0.5
    assert fuar(0.9, 0.8, 0.5, 0.2, 0.1, 0.3) == pytest.approx(0.5)
    # Unchanged improved → forgotten = 0
    assert fuar(0.7, 0.8, 0.2, 0.5, 0.1, 0.3) == 0.0
    # a None split contributes no gain
    assert fuar(0.9, 0.8, None, None, 0.1, 0.3) == pytest.approx(0.5)


def test_fuar_zero_gain_is_none():
    assert fuar(0.9, 0.8, 0.5, 0.5, 0.3, 0.2) is None
    assert fuar(None, 0.8, 0.2, 0.5, 0.1, 0.3) is None


def test_continual_summary_is_json_able_and_matches_the_functions():
    summary = continual_summary(A, A_INIT)
    assert set(summary) == {"0", "1", "2"}
    assert summary["0"] == {
        "avg_acc": pytest.approx(0.8),
        "bwt": None,
        "fwt": None,
        "forgetting": {},
        "forgetting_max": {},
    }
    assert summary["2"]["bwt"] == pytest.approx(-0.25)
    assert summary["2"]["fwt"] == pytest.approx(-0.05)
    assert summary["2"]["forgetting"]["0"] == pytest.approx(0.1)
    assert summary["2"]["forgetting_max"]["0"] == pytest.approx(0.25)
    # keys that went through JSON (strings) give the same summary
    round_tripped = json.loads(json.dumps(A))
    assert continual_summary(round_tripped, json.loads(json.dumps(A_INIT))) == json.loads(json.dumps(summary))
