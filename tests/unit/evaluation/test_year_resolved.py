"""Year-resolved answers (docs/metrics.md "Year-resolved answers"): which year's value a checkpoint picks.

A hand-built timeline holds one fact with three values over three years (and one with two), answered by a
scripted model whose picks per checkpoint are fixed; the rows must equal the hand computation. A tiny run on the
embedded world then gets the rows at every checkpoint and the report draws the checkpoint x year heatmap.
"""

from __future__ import annotations


import pytest

from evolve_train.config import EvalConfig
from evolve_train.data.schema import EvalSet, Timeline
from evolve_train.evaluation.context import EvalContext
from evolve_train.evaluation.evaluators.years import changed_facts, year_resolved_evaluator


HEAD, CITY = "The head of Acme is", "The city of Zed is"


def item(set_name, step, cloze, value, year, role):
    template = "As of {timestamp}, " + cloze[0].lower() + cloze[1:]
    return {
        "id": f"{set_name}/{cloze}/{role}",
        "question": template.format(timestamp=year),
        "answers": [value],
        "set": "paired",
        "step": step,
        "timestamp": year,
        "extra": {"cloze": cloze, "ts_template": template, "role": role},
    }


def hand_timeline() -> Timeline:
    """HEAD: A (2018), B (2019), C (2020); CITY: X (2019), Y (2020); a stable fact (one value) is left out."""
    paired_1 = [item("paired_1", 1, HEAD, "A", "2018", "old"), item("paired_1", 1, HEAD, "B", "2019", "new")]
    paired_2 = [
        item("paired_2", 2, HEAD, "B", "2019", "old"),
        item("paired_2", 2, HEAD, "C", "2020", "new"),
        item("paired_2", 2, CITY, "X", "2019", "old"),
        item("paired_2", 2, CITY, "Y", "2020", "new"),
        item("paired_2", 2, "The sea is", "wet", "2020", "stable"),
    ]
    return Timeline(
        steps=[], eval_sets=[EvalSet("paired_1", "paired", 1, paired_1), EvalSet("paired_2", "paired", 2, paired_2)]
    )


# the scripted model: checkpoint -> (undated question or (question, year)) -> the option it picks
PICKS = {
    0: {
        HEAD: "A",
        CITY: "X",
        (HEAD, "2018"): "A",
        (HEAD, "2019"): "A",
        (HEAD, "2020"): "A",
        (CITY, "2019"): "X",
        (CITY, "2020"): "X",
    },
    1: {
        HEAD: "B",
        CITY: "X",
        (HEAD, "2018"): "A",
        (HEAD, "2019"): "B",
        (HEAD, "2020"): "B",
        (CITY, "2019"): "X",
        (CITY, "2020"): "X",
    },
    2: {
        HEAD: "C",
        CITY: "Y",
        (HEAD, "2018"): "A",
        (HEAD, "2019"): "B",
        (HEAD, "2020"): "C",
        (CITY, "2019"): "X",
        (CITY, "2020"): "Y",
    },
}


# by hand: share_undated[year] = facts whose undated pick is that year's value / facts with a value that year
EXPECTED = {
    0: {"2018": (1, 1.0, 1.0), "2019": (2, 0.5, 0.5), "2020": (2, 0.0, 0.0), "all": (2018, 2, 2 / 5)},
    1: {"2018": (1, 0.0, 1.0), "2019": (2, 1.0, 1.0), "2020": (2, 0.0, 0.0), "all": (2019, 2, 3 / 5)},
    2: {"2018": (1, 0.0, 1.0), "2019": (2, 0.0, 1.0), "2020": (2, 1.0, 1.0), "all": (2020, 2, 1.0)},
}


def scripted_ctx(timeline: Timeline, checkpoint: int, asked: list) -> EvalContext:
    ctx = EvalContext(timeline=timeline, checkpoint=checkpoint, cfg=EvalConfig())

    def option_scores(questions):
        asked.extend(questions)
        out = []
        for prompt, options in questions:
            cloze = HEAD if "acme" in prompt.lower() else CITY
            year = prompt[len("As of ") : len("As of ") + 4] if prompt.startswith("As of ") else None
            choice = PICKS[checkpoint][cloze if year is None else (cloze, year)]
            out.append([0.0 if option == choice else -5.0 for option in options])
        return out

    ctx.option_scores = option_scores
    return ctx


def test_facts_are_the_changed_ones_with_their_values_in_year_order():
    facts = {f.key: f for f in changed_facts(hand_timeline().eval_sets)}
    assert set(facts) == {HEAD, CITY}
    assert facts[HEAD].values == {"2018": "A", "2019": "B", "2020": "C"} and facts[HEAD].options == ["A", "B", "C"]
    assert facts[CITY].options == ["X", "Y"]


@pytest.mark.parametrize("checkpoint", [0, 1, 2])
def test_shares_equal_the_hand_computation(checkpoint):
    asked: list = []
    rows = year_resolved_evaluator(scripted_ctx(hand_timeline(), checkpoint, asked))
    got = {}
    for r in rows:
        assert (r["group"], r["checkpoint"]) == ("year_resolved", checkpoint)
        if r["set_name"] == "all":
            got["all"] = (r["knowledge_year"], r["n"], r["dated_acc"])
        else:
            got[r["set_name"]] = (r["n"], r["share_undated"], r["dated_acc"])
    assert got.keys() == EXPECTED[checkpoint].keys()
    for key, values in EXPECTED[checkpoint].items():
        assert got[key] == pytest.approx(values), key
    # each fact asked undated and with each of its years' dates, its values as the options
    assert sorted(asked) == sorted(
        [(HEAD, ["A", "B", "C"]), (CITY, ["X", "Y"])]
        + [(f"As of {y}, the head of Acme is", ["A", "B", "C"]) for y in ("2018", "2019", "2020")]
        + [(f"As of {y}, the city of Zed is", ["X", "Y"]) for y in ("2019", "2020")]
    )


def test_a_timeline_without_changed_facts_gives_no_rows():
    timeline = Timeline(steps=[], eval_sets=[EvalSet("unchanged", "unchanged", None, [])])
    assert year_resolved_evaluator(scripted_ctx(timeline, 0, [])) == []


@pytest.mark.parametrize("checkpoint", [0, 1, 2])
def test_the_knowledge_year_carries_its_bootstrap_interval(checkpoint):
    (summary,) = [
        r for r in year_resolved_evaluator(scripted_ctx(hand_timeline(), checkpoint, [])) if r["set_name"] == "all"
    ]
    lo, hi = summary["knowledge_year_ci"]
    assert lo <= summary["knowledge_year"] <= hi and {lo, hi} <= {2018, 2019, 2020}
