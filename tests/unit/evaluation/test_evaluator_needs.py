"""The evaluators a run picks by what they need (evolve_train/evaluation/needs.py): a timeline of corpora without
QA items keeps ``slices``, ``heldout`` and ``lm_eval`` (tasks set) and says why the others cannot run; an
evaluator the command line lists itself whose needs are unmet is an error naming it and what it lacks."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from evolve_train.data.schema import EvalSet, TimeStep, Timeline
from evolve_train.errors import ConfigError
from evolve_train.evaluation import evaluator  # noqa: F401  (registers every evaluator and its needs)
from evolve_train.evaluation.needs import (
    choose_evaluators,
    listed_evaluators,
    missing_inputs,
    opt_in_evaluators,
    select_evaluators,
)
from evolve_train.evaluation.registry import EVALUATORS, HELDOUT_TEXT, LM_EVAL_TASKS, NEEDS, QA_ITEMS, SLICES

DEFAULT = ["splits", "matrix", "paired", "ablation", "dimensions", "calibration", "paraphrase_gap", "flip_rate"]
DEFAULT += ["heldout", "slices"]


def cfg(evaluators=DEFAULT, heldout_text=("general",), tasks=()):
    lm_eval = SimpleNamespace(tasks=list(tasks))
    return SimpleNamespace(
        eval=SimpleNamespace(evaluators=list(evaluators), heldout_text=list(heldout_text), lm_eval=lm_eval)
    )


def timeline(qa: bool = False, heldout: bool = True) -> Timeline:
    steps = [
        TimeStep(index=k, name=str(2018 + k), texts=[{"text": "a"}] * 3, heldout=[{"text": "b"}] if heldout else [])
        for k in range(3)
    ]
    sets = [EvalSet("unchanged", "unchanged", None, [{"id": "q", "question": "?", "answers": ["a"]}])] if qa else []
    return Timeline(steps=steps, eval_sets=sets)


def test_every_evaluator_declares_its_needs():
    assert set(NEEDS) == set(EVALUATORS)
    assert NEEDS["slices"] == (SLICES,) and NEEDS["heldout"] == (HELDOUT_TEXT,)
    assert NEEDS["lm_eval"] == (LM_EVAL_TASKS,)
    assert all(NEEDS[name] == (QA_ITEMS,) for name in DEFAULT[:-2])


def test_corpora_without_questions_keep_what_needs_none():
    selection = select_evaluators(DEFAULT, missing_inputs(cfg(), timeline(qa=False)))
    assert selection.run == ["heldout", "slices"]
    assert set(selection.left_out) == set(DEFAULT[:-2])
    line = selection.line()
    assert line.startswith("evaluators: heldout, slices (not run: ")
    assert line.count("no QA items (data.eval_files)") == 1  # one reason, its evaluators grouped


def test_everything_runs_when_every_need_is_met():
    selection = select_evaluators([*DEFAULT, "lm_eval"], missing_inputs(cfg(tasks=["arc_easy"]), timeline(qa=True)))
    assert selection.run == [*DEFAULT, "lm_eval"] and not selection.left_out
    assert selection.line() == "evaluators: " + ", ".join([*DEFAULT, "lm_eval"])


def test_each_unmet_need_is_named():
    missing = missing_inputs(cfg(heldout_text=()), timeline(qa=True, heldout=False))
    selection = select_evaluators(["splits", "heldout", "slices", "lm_eval"], missing)
    assert selection.run == ["splits"]
    assert "eval.heldout_text" in selection.left_out["heldout"]
    assert "data.heldout_share" in selection.left_out["slices"]
    assert "eval.lm_eval.tasks" in selection.left_out["lm_eval"]


def test_a_listed_evaluator_that_cannot_run_is_an_error():
    with pytest.raises(ConfigError, match=r"eval\.evaluators lists 'splits', which cannot run: no QA items"):
        select_evaluators(["splits", "slices"], missing_inputs(cfg(), timeline()), explicit=True)
    assert select_evaluators(["slices"], missing_inputs(cfg(), timeline()), explicit=True).run == ["slices"]


def test_choose_sets_the_run_list_and_logs_one_line(caplog):
    config = cfg()
    with caplog.at_level("INFO", logger="evolve_train.evaluation.needs"):
        choose_evaluators(config, timeline(), explicit=False)
    assert config.eval.evaluators == ["heldout", "slices"]
    assert [r.message for r in caplog.records if r.message.startswith("evaluators:")] == [
        "evaluators: heldout, slices (not run: " + ", ".join(DEFAULT[:-2]) + ": no QA items (data.eval_files))"
    ]


@pytest.mark.parametrize(
    "overrides, listed",
    [
        (["eval.evaluators=[slices]"], True),
        (["+eval.evaluators=[slices]"], True),
        (["++eval.evaluators=[slices]"], True),
        (["eval=full", "eval.heldout_text=[general]"], False),
        ([], False),
    ],
)
def test_listed_on_the_command_line(overrides, listed):
    assert listed_evaluators(overrides) is listed


def test_an_opt_in_evaluator_that_cannot_run_is_an_error_even_from_a_config():
    assert opt_in_evaluators() >= {"lm_eval"} and not opt_in_evaluators() & set(DEFAULT)
    with pytest.raises(ConfigError, match=r"lists 'lm_eval', which cannot run: eval\.lm_eval\.tasks: empty"):
        select_evaluators(["splits", "lm_eval"], missing_inputs(cfg(), timeline(qa=True)), opt_in=opt_in_evaluators())
    kept = select_evaluators(["splits", "heldout"], missing_inputs(cfg(heldout_text=()), timeline(qa=True)))
    assert kept.run == ["splits"]  # a shipped default whose need is unmet is only left out
