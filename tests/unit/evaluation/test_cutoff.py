"""Knowledge-cutoff estimators (evaluation/metrics/cutoff.py) on constructed evidence with a known answer."""

import numpy as np
import pytest

from evolve_train.evaluation.metrics.cutoff import (
    ANSWER_MODE,
    CURRENT_STEP,
    DEFAULT_RULE,
    HINGE,
    HINGE_REFERENCE,
    JUMP,
    JUMP_REFERENCE,
    OVER_DOCUMENTS,
    OVER_DOCUMENTS_PAIRED,
    OVER_ITEMS,
    OVER_NOTHING,
    RESOLVED,
    DatedAnswer,
    LossMatrix,
    LossRow,
    answer_year,
    current_value_year,
    hinge_cutoff,
    matrix_cutoffs,
    pooled_jump_cutoff,
    resolved_year,
    slice_cutoff,
    slice_times,
    timesliced_rows,
)

SLICES = [str(y) for y in range(2014, 2024)]
CUT = 4  # planted: the last known slice is 2018


def docs_row(name: str, cut: int, rng, jump: float = 0.3, drift: float = 0.02, n: int = 150) -> LossRow:
    """Per-document losses: a slow drift over slices, plus ``jump`` on every slice after ``cut``."""
    return LossRow(
        name, None, docs=[rng.normal(2.0 + drift * j + (jump if j > cut else 0.0), 0.4, n) for j in range(10)]
    )


def test_planted_jump_without_reference_is_found_inside_the_interval():
    est = slice_cutoff(docs_row("a", CUT, np.random.default_rng(0)), SLICES, B=500)
    assert est.found and est.method == JUMP and est.over == OVER_DOCUMENTS
    assert est.estimate == "2018" and (est.before, est.after) == ("2018", "2019")
    assert est.lo <= "2018" <= est.hi
    assert est.change == pytest.approx(0.3, abs=0.15) and est.change_lo > 0
    assert est.n == 1500


def test_planted_jump_against_a_reference_pairs_the_documents():
    rng = np.random.default_rng(1)
    difficulty = [rng.normal(0, 0.5, 150) for _ in range(10)]
    ref = LossRow("ref", None, docs=[2.0 + d for d in difficulty])
    row = LossRow(
        "a",
        None,
        docs=[2.0 + d + (0.1 if j > CUT else 0.0) + rng.normal(0, 0.05, 150) for j, d in enumerate(difficulty)],
    )
    est = slice_cutoff(row, SLICES, ref, B=500)
    assert est.method == JUMP_REFERENCE and est.over == OVER_DOCUMENTS_PAIRED
    assert est.estimate == "2018" and est.lo == est.hi == "2018"


def test_reference_removes_a_harder_slice():
    """A slice hard for every model makes the raw loss jump elsewhere; the gap to the reference does not."""
    bump = np.zeros(10)
    bump[7] = 0.5
    ref = LossRow("ref", 2.0 + bump, stderr=np.full(10, 0.01))
    row = LossRow("a", 2.0 + bump + np.where(np.arange(10) > CUT, 0.2, 0.0), stderr=np.full(10, 0.01))
    assert slice_cutoff(row, SLICES, B=300).estimate == "2020"
    with_ref = slice_cutoff(row, SLICES, ref, B=300)
    assert with_ref.estimate == "2018" and with_ref.over == OVER_ITEMS


def test_no_change_gives_no_cutoff():
    est = slice_cutoff(docs_row("flat", 99, np.random.default_rng(2), drift=0.0), SLICES, B=500)
    assert not est.found and est.estimate is None and est.lo is None
    assert "no jump stands out" in est.reason


def test_the_reference_row_itself_and_a_matrix():
    rng = np.random.default_rng(3)
    matrix = LossMatrix(SLICES, [docs_row("old", CUT, rng), docs_row("new", 99, rng)])
    out = matrix_cutoffs(matrix, reference="new", B=200)
    assert out["old"].estimate == "2018"
    assert not out["new"].found


def test_without_noise_estimate_only_the_threshold_decides():
    est = slice_cutoff(LossRow("m", [1.0, 1.0, 1.5, 1.6]), list("abcd"))
    assert est.estimate == "b" and est.lo is None and est.over == OVER_NOTHING
    flat = slice_cutoff(LossRow("m", [1.0, 0.9, 0.8, 0.7]), list("abcd"))
    assert not flat.found and "not above" in flat.reason


def _domain(bump_at: int, rng=None) -> LossRow:
    """Items' stderr 0.01; a planted 0.1 rise after CUT plus a 0.15 step of this domain's own after ``bump_at``
    (slices that are harder in this domain only); with ``rng``: no change at all, only noise of the stderr's size."""
    j = np.arange(10)
    means = 2.0 + 0.15 * (j > bump_at) + 0.1 * (j > CUT)
    if rng is not None:
        means = 2.0 + rng.normal(0, 0.01, 10)
    return LossRow(f"m{bump_at}", means, stderr=np.full(10, 0.01))


def test_pooled_over_domains_finds_the_shared_cutoff_each_domain_alone_misses():
    domains = [_domain(b) for b in (1, 6, 8)]
    assert [slice_cutoff(d, SLICES, B=300).estimate for d in domains] == ["2015", "2020", "2022"]
    est = pooled_jump_cutoff([(d, None) for d in domains], SLICES, B=500)
    assert est.found and est.method == JUMP + "_pooled" and est.over == OVER_ITEMS
    assert est.estimate == "2018" and est.lo <= "2018" <= est.hi
    assert est.change > 3 * 0.1 / np.sqrt(2 * 0.01**2) * 0.8  # three jumps of ~7 sd each
    with_ref = pooled_jump_cutoff([(d, _domain(99)) for d in domains], SLICES, B=500)
    assert with_ref.method == JUMP_REFERENCE + "_pooled"


def test_pooled_without_change_finds_no_cutoff_and_refuses_what_does_not_add_up():
    rng = np.random.default_rng(5)
    flat = pooled_jump_cutoff([(_domain(0, rng), None) for _ in range(3)], SLICES, B=500)
    assert not flat.found and "lower bound" in flat.reason
    with pytest.raises(ValueError, match="reference or none"):
        pooled_jump_cutoff([(_domain(1), None), (_domain(2), _domain(99))], SLICES)
    with pytest.raises(ValueError, match="noise estimate"):
        pooled_jump_cutoff([(LossRow("m", np.ones(10)), None)], SLICES)


def test_shape_mismatch_fails():
    with pytest.raises(ValueError):
        slice_cutoff(LossRow("m", [1.0, 2.0]), list("abc"))


def planted_answers(year: int = 2019, facts: int = 80, seed: int = 0) -> list[DatedAnswer]:
    """Facts whose current value began 2005..2024; the model gives it only when it began by ``year``, else the
    previous value (which began 3 years before); two prompts per fact."""
    rng = np.random.default_rng(seed)
    out = []
    for f in range(facts):
        began = 2005 + f % 20
        knows = began <= year
        given = began if knows else began - 3
        for _ in range(2):
            flip = rng.random() < 0.05
            out.append(DatedAnswer(f, given, knows != flip, began))
    return out


def test_current_value_step_finds_the_planted_year():
    est = current_value_year(planted_answers(2019), B=300)
    assert est.found and est.method == CURRENT_STEP and est.n == 80
    assert est.estimate == 2019 and est.after == 2020 and est.lo <= 2019 <= est.hi
    assert est.change > 0.5 and est.change_lo > 0


def test_current_value_step_flat_gives_none():
    answers = [DatedAnswer(f, 2010, bool(f % 2), 2005 + (f // 2) % 20) for f in range(80)]
    est = current_value_year(answers, B=300)
    assert not est.found and est.estimate is None and est.reason


def test_answered_year_mode_finds_the_planted_year():
    answers = [DatedAnswer(f, 2019 if f % 4 else 2000 + f % 17) for f in range(100)]
    est = answer_year(answers, B=300)
    assert est.found and est.method == ANSWER_MODE and est.estimate == 2019 and est.lo <= 2019 <= est.hi


def test_answered_year_mode_weighs_each_fact_once():
    # fact 0 answers 2010 four times, facts 1 and 2 answer 2015 once: 2015 wins (weight 2 against 1)
    answers = [DatedAnswer(0, 2010)] * 4 + [DatedAnswer(1, 2015), DatedAnswer(2, 2015)]
    assert answer_year(answers, B=100).before == 2015


def test_answered_year_mode_flat_or_empty_gives_none():
    flat = [DatedAnswer(f, 2000 + f % 10) for f in range(100)]
    assert answer_year(flat, B=200).estimate is None
    assert answer_year([DatedAnswer(0, None)], B=10).reason == "no answer with a dated value"


def test_timesliced_rows_of_a_run_matrix():
    # checkpoint i has learned slices 0..i: its NLL is 2.0 there and 3.0 on later slices
    P = {str(i): {str(j): (2.0 if j <= i else 3.0) for j in range(4)} for i in range(4)}
    rows = {r["checkpoint"]: r for r in timesliced_rows(P)}
    assert [rows[i]["cutoff_slice"] for i in range(3)] == [0, 1, 2]
    assert rows[3]["cutoff_slice"] is None and rows[3]["reason"]
    assert timesliced_rows({}) == []


def hinge_row(name: str, cut: int, rng, slope: float = 0.05, se: float = 0.01) -> LossRow:
    """Slice means flat at 2.0 up to slice ``cut``, then rising by ``slope`` per year, noise of ``se``."""
    t = np.arange(10.0)
    means = 2.0 + slope * np.maximum(0.0, t - cut) + rng.normal(0.0, se, 10)
    return LossRow(name, means, stderr=np.full(10, se))


def test_planted_hinge_lands_in_its_interval():
    est = hinge_cutoff(hinge_row("a", CUT, np.random.default_rng(4)), SLICES, B=300)
    assert est.found and est.method == HINGE and est.over == OVER_ITEMS
    assert est.estimate == "2018" and (est.before, est.after) == ("2018", "2019")
    assert est.lo <= "2018" <= est.hi and est.criterion > 0
    assert est.change == pytest.approx(0.05, abs=0.02)  # the slope per year


def test_planted_hinge_against_a_reference_with_paired_documents():
    rng = np.random.default_rng(5)
    difficulty = [rng.normal(0, 0.5, 150) + 0.3 * (j == 7) for j in range(10)]
    ref = LossRow("ref", None, docs=[2.0 + d for d in difficulty])
    rise = [0.04 * max(0, j - CUT) for j in range(10)]
    row = LossRow("a", None, docs=[2.0 + d + rise[j] + rng.normal(0, 0.05, 150) for j, d in enumerate(difficulty)])
    est = hinge_cutoff(row, SLICES, ref, B=300)
    assert est.method == HINGE_REFERENCE and est.over == OVER_DOCUMENTS_PAIRED
    assert est.estimate == "2018" and est.lo <= "2018" <= est.hi


def test_hinge_without_change_finds_no_cutoff():
    flat = hinge_row("flat", 99, np.random.default_rng(6), slope=0.0)
    est = hinge_cutoff(flat, SLICES, B=300)
    assert not est.found and est.lo is None and "does not beat no change" in est.reason and est.criterion <= 0
    itself = hinge_cutoff(flat, SLICES, flat, B=100)
    assert not itself.found and "constant" in itself.reason


def test_hinge_falls_back_to_the_jump_under_four_slices_and_the_rule_is_chosen_by_name():
    row = LossRow("m", [1.0, 1.0, 1.5])
    assert hinge_cutoff(row, list("abc")).method == JUMP
    planted = hinge_row("a", CUT, np.random.default_rng(7))
    assert slice_cutoff(planted, SLICES, B=100, rule="hinge").method == HINGE
    assert slice_cutoff(planted, SLICES, B=100, rule="jump").method == JUMP
    assert slice_cutoff(planted, SLICES, B=100).method == {"hinge": HINGE, "jump": JUMP}[DEFAULT_RULE]
    with pytest.raises(ValueError, match="rule"):
        slice_cutoff(planted, SLICES, rule="median")


def test_slice_times_in_years():
    assert slice_times(["201301", "201307", "201401"]).tolist() == [2013.0, 2013.5, 2014.0]
    assert slice_times(["2018", "2020"]).tolist() == [2018.0, 2020.0]
    assert slice_times([0, 2, 5]).tolist() == [0.0, 2.0, 5.0]
    assert slice_times(["early", "late"]).tolist() == [0.0, 1.0]


def test_resolved_year_of_a_planted_checkpoint():
    """60 facts over 2016..2021 with a value per year; the checkpoint gives each fact's 2019 value, so a fact
    matches the years whose value equals its 2019 one (those before a change in 2020 or 2021 too)."""
    rng = np.random.default_rng(8)
    years = list(range(2016, 2022))
    changes = rng.integers(2017, 2022, size=60)  # the year each fact's value changed
    matches = np.array([[float((y < c) == (2019 < c)) for y in years] for c in changes])
    matches[rng.random(matches.shape) < 0.1] = np.nan  # some facts held no value some years
    est = resolved_year(matches, years, B=300)
    assert est.method == RESOLVED and est.n == 60 and est.estimate == 2019 and est.lo <= 2019 <= est.hi
    assert not resolved_year(np.zeros((0, 3)), [1, 2, 3], B=10).found


def test_timesliced_rows_with_the_examples_carry_an_interval():
    """Checkpoint i has learned slices 0..i (NLL about 2 there, 3 after), 40 examples per slice."""
    rng = np.random.default_rng(9)
    tokens = np.full(40, 10.0)
    noise = {j: rng.normal(0, 0.2, 40) for j in range(4)}
    items = {i: {j: ((np.where(j <= i, 2.0, 3.0) + noise[j]) * tokens, tokens) for j in range(4)} for i in range(4)}
    P = {str(i): {str(j): float(np.mean(items[i][j][0]) / 10) for j in range(4)} for i in range(4)}
    rows = {r["checkpoint"]: r for r in timesliced_rows(P, B=200, items=items)}
    for i in range(3):
        assert rows[i]["cutoff_slice"] == i and rows[i]["lo"] <= i <= rows[i]["hi"]
    assert rows[3]["cutoff_slice"] is None and rows[3]["reason"]
