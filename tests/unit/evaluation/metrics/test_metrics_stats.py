"""docs/metrics.md#8-statistics-and-hygiene: paired bootstrap, kappa, flip rate, paraphrase gap, release gate."""

import numpy as np
import pytest

from evolve_train.evaluation.metrics import (
    bootstrap_ci_bounds,
    cohen_kappa,
    paraphrase_gap,
    flip_rate,
    paired_bootstrap_diff,
    release_gate,
)


def test_percentile_positions():
    # B = 2000: int(50.0) = 50 and int(1950.0) − 1 = 1949
    assert bootstrap_ci_bounds(list(range(2000))) == (50.0, 1949.0)
    # B = 40: int(1.0) = 1 and int(39.0) − 1 = 38
    assert bootstrap_ci_bounds(list(range(40))) == (1.0, 38.0)


def test_bootstrap_resamples_with_the_seeded_generator():
    a, b = [1, 1, 1, 0, 1], [0, 1, 0, 0, 1]
    result = paired_bootstrap_diff(a, b, B=40, seed=7)
    # the same draws by hand: B rows of n indices from default_rng(seed)
    index = np.random.default_rng(7).integers(0, 5, size=(40, 5))
    diffs = np.sort(np.asarray(a)[index].mean(axis=1) - np.asarray(b)[index].mean(axis=1))
    assert result == {"diff": pytest.approx(4 / 5 - 2 / 5), "ci_low": diffs[1], "ci_high": diffs[38], "B": 40, "n": 5}
    assert paired_bootstrap_diff(a, b, B=40, seed=7) == result  # deterministic


def test_bootstrap_degenerate_cases():
    same = paired_bootstrap_diff([1, 0, 1], [1, 0, 1])
    assert (same["diff"], same["ci_low"], same["ci_high"]) == (0.0, 0.0, 0.0)
    better = paired_bootstrap_diff([1, 1, 1], [0, 0, 0])
    assert (better["diff"], better["ci_low"], better["ci_high"]) == (1.0, 1.0, 1.0)


def test_bootstrap_dicts_align_by_id():
    a = {"q1": 1, "q2": 0, "q3": 1}
    b = {"q3": 0, "q1": 1, "q2": 0}  # other order
    assert paired_bootstrap_diff(a, b, B=200)["diff"] == pytest.approx(1 / 3)
    assert paired_bootstrap_diff(a, b, B=200) == paired_bootstrap_diff([1, 0, 1], [1, 0, 0], B=200)


def test_bootstrap_different_question_sets_raise():
    with pytest.raises(ValueError, match="'q3' is missing from run b"):
        paired_bootstrap_diff({"q1": 1, "q3": 1}, {"q1": 1, "q2": 0})
    with pytest.raises(ValueError, match="different question sets: 3 vs 2"):
        paired_bootstrap_diff([1, 0, 1], [1, 0])
    with pytest.raises(ValueError, match="0 or 1"):
        paired_bootstrap_diff([1, 2], [1, 0])


def test_cohen_kappa():
    # p_o = 3/4; p_e = 0.5·0.25 + 0.5·0.75 = 0.5 → (0.75 − 0.5) / 0.5 = 0.5
    assert cohen_kappa([1, 1, 0, 0], [1, 0, 0, 0]) == pytest.approx(0.5)
    assert cohen_kappa(["y", "y", "y"], ["y", "y", "y"]) == 1.0  # p_e = 1
    assert cohen_kappa([1, 1], [0, 0]) == 0.0  # p_o = 0, p_e = 0
    assert cohen_kappa([], []) is None


def test_flip_rate_normalizes_and_takes_majorities():
    predictions = {
        "q1": ["Paris", "paris.", "The Paris"],  # same after normalization
        "q2": ["Rome", "Milan"],  # flips
        "q3": [["Oslo", "Oslo", "Bergen"], ["oslo", "Bergen", "oslo"]],  # majorities agree
    }
    assert flip_rate(predictions) == pytest.approx(1 / 3)
    assert flip_rate({}) is None


def test_paraphrase_gap():
    # acc(original) = 3/4; variants 1/2, 1/2, 3/4 → mean 7/12; gap = 9/12 − 7/12 = 1/6
    assert paraphrase_gap([1, 1, 1, 0], [[1, 0, 1, 0], [1, 1, 0, 0], [1, 1, 1, 0]]) == pytest.approx(1 / 6)
    assert paraphrase_gap(0.8, [0.7, 0.75]) == pytest.approx(0.075)
    with pytest.raises(ValueError):
        paraphrase_gap(0.8, [])


def test_release_gate_passes_and_reports_each_check():
    gate = release_gate({"flip_rate": 0.05, "paraphrase_gap": 0.03, "bootstrap_ci_low": 0.01})
    assert gate["passed"] is True
    assert [(c["name"], c["value"], c["threshold"], c["passed"]) for c in gate["checks"]] == [
        ("flip_rate", 0.05, 0.10, True),
        ("paraphrase_gap", 0.03, 0.03, True),  # ≤ is inclusive
        ("bootstrap_ci_low", 0.01, 0.0, True),
    ]


def test_release_gate_fails_on_each_threshold():
    base = {"flip_rate": 0.05, "paraphrase_gap": 0.0, "bootstrap_ci_low": 0.01}
    assert release_gate({**base, "flip_rate": 0.12})["passed"] is False
    assert release_gate({**base, "paraphrase_gap": 0.031})["passed"] is False
    assert release_gate({**base, "bootstrap_ci_low": 0.0})["passed"] is False  # CI low must be > 0
    missing = release_gate({"flip_rate": 0.05, "paraphrase_gap": 0.0})
    assert missing["passed"] is False and missing["checks"][2]["value"] is None


def test_release_gate_slice_floors_and_disabled_checks():
    thresholds = {"paraphrase_gap_max": None, "ci_low_min": None, "slice_floors": {"2019": 0.5, "2020": 0.5}}
    gate = release_gate({"flip_rate": 0.0, "slices": {"2019": 0.4, "2020": 0.5}}, thresholds)
    assert [(c["name"], c["passed"]) for c in gate["checks"]] == [
        ("flip_rate", True),
        ("slice:2019", False),
        ("slice:2020", True),
    ]
    assert gate["passed"] is False
    with pytest.raises(ValueError, match="unknown release-gate threshold"):
        release_gate({}, {"flip_max": 0.1})
