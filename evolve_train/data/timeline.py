"""The timeline: per time step a training corpus, and the eval sets introduced at each step.

Every data source (the embedded world, the EvolvingQA release layout, generic timestamped QA) is
turned into a :class:`Timeline` before any training starts, so bad input fails early.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from evolve_train.config import DataConfig
from evolve_train.errors import ConfigError

SET_KINDS = ("unchanged", "new", "updated", "outdated")


@dataclass
class TimeStep:
    index: int
    name: str
    """Human name of the snapshot (a year, a month code such as ``0901``)."""
    pairs: list[dict] = field(default_factory=list)
    """Masked-entity training pairs: ``input`` (value replaced by a mask token) and ``output``."""
    texts: list[dict] = field(default_factory=list)
    """Plain-text documents: ``text`` (and ``doc_id``)."""


@dataclass
class EvalSet:
    name: str
    """Unique name, e.g. ``unchanged`` or ``updated_2``."""
    kind: str
    """One of ``unchanged``, ``new``, ``updated``, ``outdated`` (or a loader-specific kind)."""
    step: Optional[int]
    """Step that introduced the set (``None`` for Unchanged, evaluated at every checkpoint)."""
    items: list[dict]
    """QA items following the contract of DESIGN.md (``id``, ``question``, ``answers``, ...)."""


@dataclass
class Timeline:
    steps: list[TimeStep]
    eval_sets: list[EvalSet]
    prompt_template: str = "{question}"
    """How a QA item becomes a prompt."""

    def sets_for_checkpoint(self, checkpoint: int, forward_transfer: bool = False) -> list[EvalSet]:
        """Sets evaluated on the checkpoint saved after ``checkpoint``: every set introduced so far."""
        horizon = checkpoint + 1 if forward_transfer else checkpoint
        return [s for s in self.eval_sets if s.step is None or s.step <= horizon]

    def prompt(self, item: dict) -> str:
        return self.prompt_template.format(**item)


def world_timeline(cfg: DataConfig) -> Timeline:
    from evolve_train.data.world import eval_sets, generate_world, step_corpus
    from evolve_train.data.world_probes import add_probes

    world = generate_world(cfg.world)
    steps = []
    for index, year in enumerate(world.years):
        pairs, texts = step_corpus(world, index)
        steps.append(TimeStep(index=index, name=str(year), pairs=pairs, texts=texts))
    sets = [EvalSet(name=name, kind=items[0]["set"] if items else name.split("_")[0],
                    step=None if name == "unchanged" else int(name.rsplit("_", 1)[1]), items=items)
            for name, items in eval_sets(world).items()]
    add_probes(world, steps, sets)  # toolkit releases in the corpora; paired and dimension sets (world_probes)
    return Timeline(steps=steps, eval_sets=sets, prompt_template=cfg.prompt_template)


def evolvingqa_timeline(cfg: DataConfig) -> Timeline:
    """The EvolvingQA release layout (``evolve_train/data/loaders/evolvingqa.py``)."""
    from evolve_train.data.loaders.evolvingqa import evolvingqa_timeline as load

    return load(cfg)


def temporal_qa_timeline(cfg: DataConfig) -> Timeline:
    """Generic timestamped QA items and per-step training files (``evolve_train/data/loaders/temporal_qa.py``)."""
    from evolve_train.data.loaders.temporal_qa import temporal_qa_timeline as load

    return load(cfg)


LOADERS = {"synthetic_world": world_timeline, "evolvingqa": evolvingqa_timeline,
           "temporal_qa": temporal_qa_timeline}


def check_prompts(timeline: Timeline) -> None:
    """Format every eval item with the prompt template now, so a missing field fails before training."""
    for eval_set in timeline.eval_sets:
        for item in eval_set.items:
            try:
                timeline.prompt(item)
            except (KeyError, IndexError, ValueError) as err:
                raise ConfigError(f"data.prompt_template {timeline.prompt_template!r} uses {err}, which item "
                                  f"'{item.get('id')}' of eval set {eval_set.name} does not have") from None


def build_timeline(cfg: DataConfig) -> Timeline:
    """Build (and validate) the timeline named by ``data.kind``."""
    if cfg.objective not in ("masked_entity", "clm"):
        raise ConfigError(f"data.objective: unknown objective '{cfg.objective}' (known: masked_entity, clm)")
    try:
        loader = LOADERS[cfg.kind]
    except KeyError:
        raise ConfigError(f"data.kind: unknown data source '{cfg.kind}' (known: {', '.join(LOADERS)})") from None
    timeline = loader(cfg)
    if not timeline.steps:
        raise ConfigError("the timeline has no time steps")
    check_prompts(timeline)
    return timeline
