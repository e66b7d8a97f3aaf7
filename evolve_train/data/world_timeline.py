"""The embedded world as a :class:`~evolve_train.data.schema.Timeline` (``data.kind=synthetic_world``).

The world's fact states and corpora (``world.py``), extended with the dated toolkit releases
(``world_releases.py``); its four EvolvingQA splits, with held-out variants, plus the ``paired_<k>``
(``world_probes.py``) and ``dimension_<k>`` (``world_dimensions.py``) probe sets of every step.
``data.time_prefix=true`` is the world's ``prefix`` date form (``data.world.dates=prefix``).
"""

from __future__ import annotations

from evolve_train.config import DataConfig
from evolve_train.data.schema import EvalSet, TimeStep, Timeline
from evolve_train.data.world import World, eval_sets, generate_world, step_corpus
from evolve_train.data.world_dimensions import dimension_set
from evolve_train.data.world_probes import add_split_variants, paired_set
from evolve_train.data.world_releases import generate_releases, release_corpus
from evolve_train.errors import ConfigError


def world_of(cfg: DataConfig) -> World:
    """The world of ``data.world`` in the date form of ``data.world.dates`` / ``data.time_prefix``."""
    world = generate_world(cfg.world)
    world.prefix_format = cfg.time_prefix_format
    if cfg.time_prefix:
        if cfg.world.dates not in ("none", "prefix"):
            raise ConfigError(
                f"data.time_prefix=true asks for the prefix date form, but data.world.dates is "
                f"'{cfg.world.dates}': set one of them"
            )
        world.dates = "prefix"
    return world


def add_probes(world: World, steps: list[TimeStep], sets: list[EvalSet]) -> None:
    """Extend the steps' corpora with the toolkit releases; give the splits their held-out variants; append
    the paired and dimension sets of every step."""
    releases = generate_releases(world)
    for step in steps:
        pairs, texts = release_corpus(world, releases, step.index)
        step.pairs.extend(pairs)
        step.texts.extend(texts)
    add_split_variants(sets, world)
    for step in range(len(world.states)):
        sets.append(paired_set(world, step))
        sets.append(dimension_set(world, releases, step))


def world_timeline(cfg: DataConfig) -> Timeline:
    world = world_of(cfg)
    steps = []
    for index, year in enumerate(world.years):
        pairs, texts = step_corpus(world, index)
        steps.append(TimeStep(index=index, name=str(year), pairs=pairs, texts=texts))
    sets = [
        EvalSet(
            name=name,
            kind=items[0]["set"] if items else name.split("_")[0],
            step=None if name == "unchanged" else int(name.rsplit("_", 1)[1]),
            items=items,
        )
        for name, items in eval_sets(world).items()
    ]
    add_probes(world, steps, sets)
    return Timeline(steps=steps, eval_sets=sets, prompt_template=cfg.prompt_template)
