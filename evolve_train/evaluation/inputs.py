"""What a run or an evaluation reads before anything is written: the timeline, the QA adaptation, and every check
of them (the private-leak check, the evaluators that can run on them: ``needs.py``, their own input checks). A bad
input fails here."""

from __future__ import annotations

from evolve_train.data.few_shot import with_few_shot
from evolve_train.data.timeline import build_timeline
from evolve_train.evaluation import evaluator  # noqa: F401  (registers every evaluator and its input check)
from evolve_train.evaluation.evaluators.hygiene import preflight as private_leak_check
from evolve_train.evaluation.needs import choose_evaluators
from evolve_train.evaluation.qa_adaptation import QAAdaptation
from evolve_train.evaluation.registry import PREFLIGHTS


def load_inputs(cfg, explicit: bool | None = None):
    """``(timeline, qa_adaptation)`` of the config (``qa_adaptation`` is ``None`` when off), checked;
    ``cfg.eval.evaluators`` becomes those whose needs are met (``explicit``: see ``needs.choose_evaluators``)."""
    timeline = with_few_shot(build_timeline(cfg.data), cfg.eval.few_shot)  # dev demonstrations
    choose_evaluators(cfg, timeline, explicit)  # corpora without QA items: the evaluators needing none
    qa_adaptation = QAAdaptation.from_config(cfg, timeline)
    private_leak_check(cfg, timeline, qa_adaptation)  # no private eval item in training/prompts
    for name in cfg.eval.evaluators:
        if name in PREFLIGHTS:  # e.g. passage files read now: a bad one fails before training
            PREFLIGHTS[name](cfg, timeline)
    return timeline, qa_adaptation
