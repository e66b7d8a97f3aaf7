"""The timeline: per time step a training corpus, and the eval sets introduced at each step.

Every data source (the embedded world, the EvolvingQA release layout, generic timestamped QA, DyKnow) is
turned into a :class:`Timeline` before any training starts, so bad input fails early. The types live in
:mod:`evolve_train.data.schema` (re-exported here); :func:`build_timeline` picks the loader of
``data.kind`` and applies the loader-independent transforms of :mod:`evolve_train.data.transforms`
(``data.time_prefix``, ``data.keep_history``).
"""

from __future__ import annotations

from evolve_train.config import DataConfig
from evolve_train.data.loaders.dyknow import dyknow_timeline
from evolve_train.data.loaders.evolvingqa import evolvingqa_timeline
from evolve_train.data.loaders.temporal_qa import temporal_qa_timeline
from evolve_train.data.objective import OBJECTIVES
from evolve_train.data.schema import SET_KINDS, EvalSet, TimeStep, Timeline
from evolve_train.data.transforms import apply_transforms
from evolve_train.data.world_timeline import world_timeline
from evolve_train.errors import ConfigError

__all__ = ["SET_KINDS", "EvalSet", "TimeStep", "Timeline", "LOADERS", "build_timeline", "check_prompts"]

LOADERS = {
    "synthetic_world": world_timeline,
    "evolvingqa": evolvingqa_timeline,
    "temporal_qa": temporal_qa_timeline,
    "dyknow": dyknow_timeline,
}


def check_prompts(timeline: Timeline) -> None:
    """Format every eval item with the prompt template now, so a missing field fails before training."""
    for eval_set in timeline.eval_sets:
        for item in eval_set.items:
            try:
                timeline.prompt(item)
            except (KeyError, IndexError, ValueError) as err:
                raise ConfigError(
                    f"data.prompt_template {timeline.prompt_template!r} uses {err}, which item "
                    f"'{item.get('id')}' of eval set {eval_set.name} does not have"
                ) from None


def build_timeline(cfg: DataConfig) -> Timeline:
    """Build (and validate) the timeline named by ``data.kind``, with the transforms of ``data``."""
    if cfg.objective not in OBJECTIVES:
        raise ConfigError(f"data.objective: unknown objective '{cfg.objective}' (known: {', '.join(OBJECTIVES)})")
    try:
        loader = LOADERS[cfg.kind]
    except KeyError:
        raise ConfigError(f"data.kind: unknown data source '{cfg.kind}' (known: {', '.join(LOADERS)})") from None
    timeline = apply_transforms(loader(cfg), cfg)
    if not timeline.steps:
        raise ConfigError("the timeline has no time steps")
    check_prompts(timeline)
    return timeline
