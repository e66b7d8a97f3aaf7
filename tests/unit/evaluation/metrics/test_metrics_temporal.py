"""docs/metrics.md#4-paired-temporal-metrics paired temporal metrics, §5 timestamp ablation and §6 dimensions."""

import pytest

from evolve_train.data.qa_items import QAItem
from evolve_train.evaluation.metrics import (
    accuracy_per_dimension,
    build_pairs,
    confusion_index,
    dimension_summary,
    draw_other_timestamps,
    error_share,
    explicit_pairs,
    old_knowledge_retention,
    pair_asymmetry,
    shuffled_timestamp,
    stable_items,
    time_accuracy,
    timestamp_ablation,
    timestamp_invariance,
    update_adoption,
)
from evolve_train.evaluation.metrics.stats import bootstrap_mean_ci, paired_bootstrap_diff
from evolve_train.evaluation.metrics.temporal import adoption_per_pair, confusion_per_pair


def item(id, question, answers, timestamp=None, **kw):
    return QAItem(id=id, question=question, answers=answers, timestamp=timestamp, **kw)


def ids(pairs):
    return [(old.id, new.id) for old, new in pairs]


# -- automatic pairing ------------------------------------------------------------------------------------------

ACME = [  # file order differs from time order on purpose
    item("q2", "As of 2020, who leads Acme?", ["Bob Stone", "Bob"], "2020"),
    item("q3", "In February 07, 2021, who leads Acme?", ["Cy Moss"], "February 07, 2021"),
    item("q1", "As of 2019, who leads Acme?", ["Ann Lee"], "2019"),
    item("q4", "Who leads Acme? (2021-02-07)", ["Dee"], "2021-02-07"),  # same day as q3, later in the file
    item("q5", "As of 2022, who leads Acme?", ["cy moss"], "2022"),  # same normalized alias as q3
    item("now", "Who leads Acme?", ["Cy Moss"]),  # no timestamp: never paired
]


def test_build_pairs_orders_by_timestamp_and_drops_later_ties():
    # time order: q1 (2019-01-01), q2 (2020-01-01), q3 (2021-02-07; q4 dropped: same day, later in file), q5
    # q1/q2 disjoint → pair; q2/q3 disjoint → pair; q3/q5 share "cy moss" → no pair
    assert ids(build_pairs(ACME)) == [("q1", "q2"), ("q2", "q3")]


def test_build_pairs_tie_goes_to_the_first_in_file_order():
    swapped = [ACME[0], ACME[3], ACME[2], ACME[1], ACME[4]]  # q4 now comes before q3
    # q4 ("Dee") takes part: q2/q4 pair, q4/q5 disjoint ("dee" vs "cy moss") → pair
    assert ids(build_pairs(swapped)) == [("q1", "q2"), ("q2", "q4"), ("q4", "q5")]


def test_year_and_year_month_are_first_day_of_period():
    items = [
        item("m", "In 2021-03, who chairs Zed?", ["X"], "2021-03"),  # 2021-03-01
        item("y", "In 2021, who chairs Zed?", ["Y"], "2021"),  # 2021-01-01
        item("d", "On 2021-03-01, who chairs Zed?", ["Z"], "2021-03-01"),  # ties with "m", later in file
    ]
    assert ids(build_pairs(items)) == [("y", "m")]


def test_base_question_field_groups_differently_worded_questions():
    items = [
        item("a", "Who was the CEO of Acme in 2019?", ["Ann"], "2019", base_question="acme ceo"),
        item("b", "Right now (2020), Acme's chief executive is?", ["Bob"], "2020", base_question="acme ceo"),
        item("c", "In 2019, who ran Kite?", ["Ann", "Cy"], "2019"),
        item("d", "In 2020, who ran Kite?", ["Cy", "Dee"], "2020"),  # shares "cy" with c: not disjoint
    ]
    assert ids(build_pairs(items)) == [("a", "b")]


def test_explicit_pair_ids_are_ordered_by_timestamp():
    items = [
        item("n", "q new", ["B"], "2021", pair_id="p"),
        item("o", "q old", ["A"], "2019", pair_id="p"),
        item("single", "q", ["C"], "2019", pair_id="lonely"),
    ]
    assert ids(explicit_pairs(items)) == [("o", "n")]


# -- update adoption, confusion, asymmetry --------------------------------------------------------------------

PAIRS = [
    (item(f"o{k}", "q", [old], "2019"), item(f"n{k}", "q", [new], "2020"))
    for k, (old, new) in enumerate([("Ann", "Bob"), ("Cy", "Dee"), ("Eve", "Fay"), ("Gus", "Hal")], 1)
]
PREDICTIONS = {
    "o1": "Ann",
    "n1": "Bob",  # both right
    "o2": "Dee",
    "n2": "Dee",  # old question answered with the new answer
    "o3": "Eve",
    "n3": "Eve",  # new question answered with the old answer
    "o4": "Gus",
    "n4": "zzz",
}  # one right, one wrong, but no confusion


def test_update_adoption_needs_both_right():
    assert update_adoption(PAIRS, PREDICTIONS) == pytest.approx(1 / 4)


def test_confusion_index_counts_the_other_periods_answer():
    # EM(p_old, g_new): pair 2 → 1; EM(p_new, g_old): pair 3 → 1; (1 + 1) / (2·4) = 0.25
    assert confusion_index(PAIRS, PREDICTIONS) == pytest.approx(0.25)


def test_pair_asymmetry_is_the_pseudo_code_count():
    # exactly one right: pairs 2, 3, 4 → 3/4 (differs from the confusion index)
    assert pair_asymmetry(PAIRS, PREDICTIONS) == pytest.approx(0.75)


def test_no_pairs_gives_none():
    assert build_pairs([item("x", "As of 2019, q?", ["A"], "2019")]) == []
    assert update_adoption([], {}) is None
    assert confusion_index([], {}) is None
    assert pair_asymmetry([], {}) is None


def test_missing_prediction_names_the_item():
    with pytest.raises(ValueError, match="'n1'"):
        update_adoption(PAIRS[:1], {"o1": "Ann"})


# -- time accuracy and retention -------------------------------------------------------------------------------

TIMED = [
    item("a", "q a", ["x"], "2019"),
    item("b", "q b", ["y"], "2019-05-03"),
    item("c", "q c", ["z"], "February 07, 2021"),
    item("d", "q d", ["w"]),
]
TIMED_PREDICTIONS = {"a": "x", "b": "wrong", "c": "z", "d": "w"}


def test_time_accuracy_default_one_slice_per_year():
    # 2019: a right, b wrong → 0.5 (n 2); 2021: c right (n 1); d has no timestamp; no 2020 slice by default
    assert time_accuracy(TIMED, TIMED_PREDICTIONS) == {"2019": {"em": 0.5, "n": 2}, "2021": {"em": 1.0, "n": 1}}


def test_time_accuracy_configured_slices_with_an_empty_one():
    slices = {"early": ("2019", "2020"), "gap": ("2020", "2021"), "late": ("2021", None)}
    assert time_accuracy(TIMED, TIMED_PREDICTIONS, slices) == {
        "early": {"em": 0.5, "n": 2},
        "gap": {"em": None, "n": 0},
        "late": {"em": 1.0, "n": 1},
    }


def test_retention_uses_the_stable_flag_when_present():
    items = [
        item("s1", "q1", ["a"], "2019", stable=True),
        item("s2", "q2", ["b"], "2020", stable=True),
        item("u", "q3", ["c"], "2020", stable=False),
    ]
    assert old_knowledge_retention(items, {"s1": "a", "s2": "nope", "u": "c"}) == {"em": 0.5, "n": 2}
    nothing_stable = [item("u", "q3", ["c"], "2020", stable=False)]
    assert old_knowledge_retention(nothing_stable, {"u": "c"}) == {"em": None, "n": 0}


def test_retention_infers_stable_groups_without_a_flag():
    items = [
        item("f19", "As of 2019, when was Acme founded?", ["1990"], "2019"),
        item("f21", "As of 2021, when was Acme founded?", ["1990."], "2021"),  # same normalized set
        item("c19", "As of 2019, who leads Acme?", ["Ann"], "2019"),
        item("c21", "As of 2021, who leads Acme?", ["Bob"], "2021"),  # changed: not stable
        item("o1", "As of 2019, where is Kite?", ["Oslo"], "2019"),
        item("o2", "In 2019, where is Kite?", ["Oslo"], "2019"),  # one distinct timestamp: not stable
        item("p1", "As of 2019, who owns Zed?", ["Ann", "A. Lee"], "2019"),
        item("p2", "As of 2020, who owns Zed?", ["Ann"], "2020"),  # alias sets differ: not stable
    ]
    assert [i.id for i in stable_items(items)] == ["f19", "f21"]
    predictions = {i.id: "1990" for i in items} | {"f21": "1991"}
    assert old_knowledge_retention(items, predictions) == {"em": 0.5, "n": 2}


# -- §5 timestamp ablation -------------------------------------------------------------------------------------


def test_timestamp_ablation_scores_every_group_against_the_true_gold():
    items = [item(f"t{k}", "q", [gold], "2019") for k, gold in enumerate("abcd")] + [item("u", "q", ["e"])]
    true = {"t0": "a", "t1": "b", "t2": "c", "t3": "x"}  # 3/4
    shuffled = {"t0": "a", "t1": "x", "t2": "x", "t3": "x"}  # 1/4
    none = {"t0": "a", "t1": "b", "t2": "x", "t3": "x"}  # 2/4
    result = timestamp_ablation(items, true, shuffled, none)
    ci = result.pop("timestamp_reliance_ci")
    assert result == {"true": 0.75, "shuffled": 0.25, "none": 0.5, "n": 4, "timestamp_reliance": 0.5}
    # the paired bootstrap of the same 0/1 vectors (t0 right in both, t1-t2 right only with the true date)
    direct = paired_bootstrap_diff([1, 1, 1, 0], [1, 0, 0, 0])
    assert ci == [direct["ci_low"], direct["ci_high"]] and ci[0] <= 0.5 <= ci[1] and ci[0] < ci[1]


def test_bootstrap_mean_ci_brackets_the_mean_and_narrows_with_more_items():
    assert bootstrap_mean_ci([]) is None
    assert bootstrap_mean_ci([1, 1, 1]) == [1.0, 1.0]  # no variation, no width
    few = bootstrap_mean_ci([0, 1] * 10)
    many = bootstrap_mean_ci([0, 1] * 1000)
    assert few[0] < 0.5 < few[1] and many[0] < 0.5 < many[1]
    assert many[1] - many[0] < (few[1] - few[0]) / 5  # ~1/sqrt(100) of the width
    assert bootstrap_mean_ci([0, 1] * 10, seed=0) == few  # fixed for a seed


def test_per_pair_outcomes_average_to_the_pair_metrics():
    adopted, crossed = adoption_per_pair(PAIRS, PREDICTIONS), confusion_per_pair(PAIRS, PREDICTIONS)
    assert len(adopted) == len(crossed) == len(PAIRS)
    assert sum(adopted) / len(adopted) == update_adoption(PAIRS, PREDICTIONS)
    assert sum(crossed) / len(crossed) == confusion_index(PAIRS, PREDICTIONS)


def test_timestamp_invariance_compares_normalized_predictions():
    original = {"a": "Paris", "b": "Rome"}
    replaced = {"a": ["paris.", "The Paris", "PARIS"], "b": ["Rome", "Milan", "Rome"]}
    assert timestamp_invariance(original, replaced) == 0.5  # a unchanged, b flips once
    with pytest.raises(ValueError, match="'b'"):
        timestamp_invariance(original, {"a": ["Paris"]})


def test_shuffled_timestamp_differs_from_its_own_and_is_seeded():
    pool = ["2019", "2020", "2021", "2019-01-01"]  # "2019-01-01" is the same day as "2019"
    draws = {shuffled_timestamp("2019", pool, seed=0, key=f"q{k}") for k in range(40)}
    assert draws == {"2020", "2021"}  # never its own day, and not a constant
    assert shuffled_timestamp("2019", pool, seed=3, key="q1") == shuffled_timestamp("2019", pool[::-1], 3, "q1")
    assert sorted(draw_other_timestamps("2020", pool, k=3, key="x")) == ["2019", "2019-01-01", "2021"]
    with pytest.raises(ValueError, match="other than '2019'"):
        shuffled_timestamp("2019", ["2019", "2019-01-01"])


# -- §6 dimensions ---------------------------------------------------------------------------------------------


def test_accuracy_per_dimension_and_error_share():
    dims = ["version_awareness", "version_awareness", "event_ordering", "event_ordering", None]
    correct = [1, 0, 0, 0, 0]  # the item without a dimension is left out
    assert accuracy_per_dimension(dims, correct) == {
        "event_ordering": {"em": 0.0, "n": 2},
        "version_awareness": {"em": 0.5, "n": 2},
    }
    # 3 wrong answers with a dimension: 1 in version_awareness, 2 in event_ordering
    assert error_share(dims, correct) == {
        "event_ordering": pytest.approx(2 / 3),
        "version_awareness": pytest.approx(1 / 3),
    }
    assert dimension_summary(dims, correct)["event_ordering"]["error_share"] == pytest.approx(2 / 3)


def test_error_share_with_no_errors_is_none():
    assert error_share(["event_ordering"], [1]) == {"event_ordering": None}
    with pytest.raises(ValueError):
        error_share(["event_ordering"], [1, 0])
