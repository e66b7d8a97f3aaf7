"""The ``paired`` (docs/metrics.md#4-paired-temporal-metrics) and ``ablation`` (§5) evaluators on hand-built items and predictions.

The model is replaced by generations filled into the context's cache, so every number is hand-computed.
"""

import pytest

from evolve_train.config import EvalConfig
from evolve_train.data.timeline import EvalSet, Timeline, TimeStep
from evolve_train.evaluation.evaluator import EvalContext, evaluate_checkpoint
from evolve_train.evaluation.evaluators.ablation import retimestamped

YEARS = ("2018", "2019", "2020")


def probe(key, entity, year, answer, *, pair=None, stable=False, by_step=None):
    cloze = f"The director of {entity} is"
    extra = {"entity": entity, "cloze": cloze}
    if year is not None:
        extra["ts_template"] = "As of {timestamp}, the director of " + entity + " is"
    if by_step is not None:
        extra["answers_by_step"] = by_step
    question = cloze if year is None else extra["ts_template"].format(timestamp=year)
    return {
        "id": key,
        "question": question,
        "answers": [answer],
        "set": "paired",
        "step": 1,
        "timestamp": year,
        "pair_id": pair,
        "stable": stable,
        "extra": extra,
    }


def context(items, answers, checkpoint=1, **cfg):
    timeline = Timeline(
        steps=[TimeStep(0, "2018"), TimeStep(1, "2019"), TimeStep(2, "2020")],
        eval_sets=[EvalSet("paired_1", "paired", 1, items)],
    )
    ctx = EvalContext(timeline=timeline, checkpoint=checkpoint, cfg=EvalConfig(**cfg), run_dir=None)
    ctx._answers.update(answers)  # the "model": any prompt not listed here would need a real model
    return ctx


ITEMS = [
    probe("p1-old", "Acme", "2018", "Ann", pair="p1"),
    probe("p1-new", "Acme", "2019", "Bob", pair="p1"),
    probe("p2-old", "Brix", "2018", "Cal", pair="p2"),
    probe("p2-new", "Brix", "2019", "Dee", pair="p2"),
    probe("stable", "Cora", "2019", "Eve", stable=True),
    probe("now", "Acme", None, "Bob", by_step={"1": ["Bob"], "2": ["Fay"]}),
]
GENERATIONS = {
    "As of 2018, the director of Acme is": " Ann\nmore",  # right (cut at the newline)
    "As of 2019, the director of Acme is": " Bob",  # right -> pair 1 adopted
    "As of 2018, the director of Brix is": " Dee",  # the newer answer: a confusion
    "As of 2019, the director of Brix is": " Dee",  # right, but pair 2 is not adopted
    "As of 2019, the director of Cora is": " Eve",  # stable, right
    "The director of Acme is": " Bob",
}


def paired_rows(checkpoint=1, **cfg):
    rows = evaluate_checkpoint(context(ITEMS, GENERATIONS, checkpoint, evaluators=["paired"], **cfg))
    return {r["set_name"]: r for r in rows if r["group"] == "paired"}


def test_paired_metrics_hand_computed():
    row = paired_rows()["paired_1"]
    assert (row["checkpoint"], row["set"], row["set_step"]) == (1, "paired", 1)
    assert row["n_pairs"] == 2
    assert row["update_adoption"] == 0.5  # pair 1 both right; pair 2 old wrong
    assert row["confusion_index"] == 0.25  # (p2-old == g_new) + 0 crossings the other way, over 2*2
    assert row["pair_asymmetry"] == 0.5  # pair 2 has exactly one right
    assert row["time_accuracy"] == {"2018": {"em": 0.5, "n": 2}, "2019": {"em": 1.0, "n": 3}}
    assert row["old_knowledge_retention"] == {"em": 1.0, "n": 1}
    assert row["now"] == {"em": 1.0, "n": 1}  # at checkpoint 1 the latest answer is Bob
    assert paired_rows()["all"]["update_adoption"] == 0.5


def test_question_without_timestamp_is_scored_against_the_answer_at_the_checkpoint():
    assert paired_rows(checkpoint=2)["paired_1"]["now"] == {"em": 0.0, "n": 1}  # by step 2 it is Fay


def test_time_slices_from_config():
    row = paired_rows(time_slices={"before_2019": [None, "2019"], "from_2019": ["2019", None]})["paired_1"]
    assert row["time_accuracy"] == {"before_2019": {"em": 0.5, "n": 2}, "from_2019": {"em": 1.0, "n": 3}}


def test_no_pairs_gives_null_metrics_not_zero():
    rows = evaluate_checkpoint(context([ITEMS[4]], GENERATIONS, evaluators=["paired"]))
    row = rows[0]
    assert row["n_pairs"] == 0 and row["update_adoption"] is None and row["confusion_index"] is None


# ---------------------------------------------------------------- §5 ablation


def history_items():
    """One fact with a different answer each year, asked as of every year."""
    values = dict(zip(YEARS, ("Ann", "Bob", "Cal")))
    return [probe(f"acme-{y}", "Acme", y, values[y]) for y in YEARS], values


def all_prompts(answer_for):
    prompts = {f"As of {y}, the director of Acme is": answer_for(y) for y in YEARS}
    prompts["The director of Acme is"] = answer_for(None)
    return {p: " " + a for p, a in prompts.items()}


def ablation_row(answer_for, **cfg):
    items, _ = history_items()
    rows = evaluate_checkpoint(context(items, all_prompts(answer_for), evaluators=["ablation"], **cfg))
    return next(r for r in rows if r["group"] == "ablation" and r["set_name"] == "all")


def test_a_model_that_reads_the_timestamp():
    _, values = history_items()
    row = ablation_row(lambda year: values[year or "2020"])
    # true: 3/3; shuffled: another year always has another answer, 0/3; none answers 2020's: 1/3
    assert (row["true"], row["shuffled"], row["none"], row["n"]) == (1.0, 0.0, pytest.approx(1 / 3), 3)
    assert row["timestamp_reliance"] == 1.0
    assert row["timestamp_invariance"] == 0.0
    assert row["k"] == 2  # the data has only two other timestamps for each question


def test_a_model_that_ignores_time():
    row = ablation_row(lambda year: "Cal")
    # every group is right exactly on the 2020 question
    assert row["true"] == row["shuffled"] == row["none"] == pytest.approx(1 / 3)
    assert row["timestamp_reliance"] == 0.0
    assert row["timestamp_invariance"] == 1.0


def test_retimestamped_prompts():
    item = probe("x", "Acme", "2019", "Bob")
    assert retimestamped(item, "2018") == "As of 2018, the director of Acme is"
    assert retimestamped(item, None) == "The director of Acme is"
    loaded = {
        "id": "y",
        "question": "Who led Acme in February 07, 2021?",
        "answers": ["Bob"],
        "timestamp": "February 07, 2021",
    }
    assert retimestamped(loaded, "2019") == "Who led Acme in 2019?"
    assert retimestamped(loaded, None) == "Who led Acme?"
