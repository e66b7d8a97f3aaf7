"""Which of the listed evaluators can run: each declares what it needs (``register_evaluator(..., needs=...)``:
QA items, a held-out slice of the corpora, a held-out text, lm-eval tasks), and the run picks those whose needs
the data and the config meet.

A timeline of corpora without QA items (``data=temporal_qa`` with ``data.train_files`` and no
``data.eval_files``) is evaluated by what needs no questions: the time slices (``slices``), the held-out text
(``heldout``) and lm-eval tasks when set. The evaluators of ``eval.evaluators`` that cannot run are left out
with one log line saying why. An evaluator the user chose whose needs are unmet is a ConfigError naming it and what
it lacks, before training: every listed one when the command line sets ``eval.evaluators``, and always one that no
shipped eval group lists (``lm_eval``: an opt-in, :func:`opt_in_evaluators`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional, Sequence

from evolve_train.errors import ConfigError
from evolve_train.evaluation.registry import HELDOUT_TEXT, LM_EVAL_TASKS, NEEDS, QA_ITEMS, SLICES

log = logging.getLogger(__name__)
EVALUATORS_KEY = "eval.evaluators"


@dataclass
class Selection:
    """The evaluators that run (in their listed order) and, for each left out, what it lacks."""

    run: list[str]
    left_out: dict[str, str] = field(default_factory=dict)

    def line(self) -> str:
        """One line: which evaluators run, and why the others cannot."""
        running = ", ".join(self.run) or "none"
        if not self.left_out:
            return f"evaluators: {running}"
        why: dict[str, list[str]] = {}
        for name, lack in self.left_out.items():
            why.setdefault(lack, []).append(name)
        reasons = "; ".join(f"{', '.join(names)}: {lack}" for lack, names in why.items())
        return f"evaluators: {running} (not run: {reasons})"


def missing_inputs(cfg, timeline) -> dict[str, str]:
    """Need -> why it is unmet, for every need the data (``timeline``) and the config (``cfg``) do not meet."""
    missing = {}
    if not any(eval_set.items for eval_set in timeline.eval_sets):
        missing[QA_ITEMS] = "no QA items (data.eval_files)"
    if not any(len(step.heldout) for step in timeline.steps):
        missing[SLICES] = "no held-out slice (data.heldout_share=0, or no step of two or more examples)"
    if not list(cfg.eval.heldout_text):
        missing[HELDOUT_TEXT] = "no held-out text (eval.heldout_text)"
    if not list(cfg.eval.lm_eval.tasks):
        missing[LM_EVAL_TASKS] = "eval.lm_eval.tasks: empty (list the lm-eval tasks to score)"
    return missing


def select_evaluators(
    names: Sequence[str], missing: dict[str, str], explicit: bool = False, opt_in: Iterable[str] = ()
) -> Selection:
    """The evaluators of ``names`` whose needs are met (``missing``: :func:`missing_inputs`). One that cannot run
    is a ConfigError naming it and what it lacks when ``explicit`` (the user listed ``names`` themselves) or when
    it is one of ``opt_in``."""
    run, left_out = [], {}
    chosen = set(opt_in)
    for name in names:
        lacks = [missing[need] for need in NEEDS.get(name, ()) if need in missing]
        if lacks and (explicit or name in chosen):
            raise ConfigError(f"{EVALUATORS_KEY} lists '{name}', which cannot run: {'; '.join(lacks)}")
        if lacks:
            left_out[name] = "; ".join(lacks)
        else:
            run.append(name)
    return Selection(run, left_out)


def opt_in_evaluators(config_dir: Optional[Path] = None) -> set[str]:
    """The evaluators no shipped eval group (``configs/eval/*.yaml``) lists: listing one is always a choice."""
    from omegaconf import OmegaConf

    from evolve_train.compose import CONFIG_DIR

    shipped: set[str] = set()
    for path in sorted(Path(config_dir or CONFIG_DIR, "eval").glob("*.yaml")):
        shipped.update(str(name) for name in OmegaConf.load(path).get("evaluators") or [])
    return set(NEEDS) - shipped


def listed_evaluators(overrides: Sequence[str]) -> bool:
    """Whether command-line ``overrides`` set ``eval.evaluators`` themselves (``+``/``++`` forms too)."""
    return any(str(arg).lstrip("+~").split("=", 1)[0] == EVALUATORS_KEY for arg in overrides)


def command_lists_evaluators() -> bool:
    """Whether this Hydra run's command line sets ``eval.evaluators`` (false outside a Hydra run)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return False
    return listed_evaluators(list(HydraConfig.get().overrides.task))


def choose_evaluators(cfg, timeline, explicit: Optional[bool] = None) -> Selection:
    """Pick the evaluators of ``eval.evaluators`` that can run on ``timeline`` (``cfg.eval.evaluators`` becomes
    that list) and log which run and why the others cannot. ``explicit`` (default: the command line sets
    ``eval.evaluators``): an unmet need of a listed evaluator is an error (of an opt-in one, always)."""
    explicit = command_lists_evaluators() if explicit is None else explicit
    selection = select_evaluators(
        list(cfg.eval.evaluators), missing_inputs(cfg, timeline), explicit, opt_in_evaluators()
    )
    cfg.eval.evaluators = list(selection.run)
    log.info(selection.line())
    return selection
