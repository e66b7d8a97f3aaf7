"""The five EvolveBench dimensions of the embedded world (docs/metrics.md#6-the-five-dimensions): ``dimension_<k>`` probe sets.

Each item carries ``dimension``, ``options`` (gold + distractors, ``gold_index``), an open-form gold and
``extra.variants`` (held-out phrasings). What each dimension asks is in :func:`dimension_set` and
docs/evaluation.md; ``world_timeline.add_probes`` appends the sets to the timeline.
"""

from __future__ import annotations

import random

from evolve_train.data.relations import RELATIONS_BY_NAME
from evolve_train.data.schema import EvalSet
from evolve_train.data.world import World
from evolve_train.data.world_probes import (
    DIMENSION_KIND,
    N_PER_DIMENSION,
    choice_options,
    probe,
    slug,
    values_of,
    with_timestamp,
)
from evolve_train.data.world_releases import RELEASE_HELDOUT_VERSION, RELEASE_HELDOUT_YEAR, Releases


def _version_items(world: World, releases: Releases, step: int, rng: random.Random) -> list[dict]:
    """version_awareness: which version a toolkit released in a given year (a dated corpus fact)."""
    name, year = f"{DIMENSION_KIND}_{step}", str(world.years[step])
    items = []
    for org in releases.sample_released(step, N_PER_DIMENSION, rng):
        version = releases.versions[step][org]
        low = max(1, version - rng.randint(0, 3))
        options = [str(v) for v in range(low, low + 4)]
        question = f"In {year}, {org} released version"
        variants = [t.split("{v}")[0].format(e=org, y=year).rstrip() for t in RELEASE_HELDOUT_VERSION]
        items.append(
            probe(
                world,
                name,
                DIMENSION_KIND,
                step,
                f"{slug(org)}/version_awareness",
                question,
                [str(version)],
                timestamp=year,
                dimension="version_awareness",
                options=options,
                extra={"entity": org, "variants": variants},
            )
        )
    return items


def _localization_items(world: World, releases: Releases, step: int, rng: random.Random) -> list[dict]:
    """time_localization: the year a dated statement (a toolkit release) belongs to."""
    name, year = f"{DIMENSION_KIND}_{step}", str(world.years[step])
    years = [str(y) for y in world.years]
    while len(years) < 3:
        years.append(str(int(years[-1]) + 1))
    items = []
    for org in releases.sample_released(step, N_PER_DIMENSION, rng):
        version = releases.versions[step][org]
        question = f"Version {version} of the {org} toolkit came out in"
        variants = [t.split("{y}")[0].format(e=org, v=version).rstrip() for t in RELEASE_HELDOUT_YEAR]
        items.append(
            probe(
                world,
                name,
                DIMENSION_KIND,
                step,
                f"{slug(org)}/time_localization",
                question,
                [year],
                dimension="time_localization",
                options=list(years),
                extra={"entity": org, "variants": variants},
            )
        )
    return items


def _ordering_items(world: World, step: int, rng: random.Random) -> list[dict]:
    """event_ordering: which of two organisations was founded first (step 0: among the initial ones, later:
    a newly founded one against an older one), and which of two directors came first (changes of the step)."""
    name, state = f"{DIMENSION_KIND}_{step}", world.states[step]
    alive = sorted(org for org, first in world.founded_at.items() if first <= step)
    fresh = sorted(org for org, first in world.founded_at.items() if first == step)
    items = []
    budget = N_PER_DIMENSION if step == 0 else N_PER_DIMENSION // 2
    for _ in range(budget * 4 if fresh else 0):  # no organisation founded at this step: no comparison
        if len(items) >= budget:
            break
        a, b = rng.choice(fresh), rng.choice(alive)
        ya, yb = int(state[(a, "founded")]), int(state[(b, "founded")])
        if a == b or ya == yb:
            continue
        first, options = (a if ya < yb else b), [a, b] if rng.random() < 0.5 else [b, a]
        key = f"{slug(a)}+{slug(b)}/founded_first"
        if any(item["id"].endswith(key) for item in items):
            continue
        items.append(
            probe(
                world,
                name,
                DIMENSION_KIND,
                step,
                key,
                f"Of {options[0]} and {options[1]}, the one founded first is",
                [first],
                dimension="event_ordering",
                options=options,
                extra={
                    "kind": "founded_first",
                    "variants": [
                        f"Between {options[0]} and {options[1]}, the older organisation is",
                        f"Which was founded earlier, {options[0]} or {options[1]}? It was",
                    ],
                },
            )
        )
    directors = [c for c in world.changes[step] if c.relation == "director"]
    for change in rng.sample(directors, min(len(directors), N_PER_DIMENSION - len(items))):
        options = [change.old, change.new] if rng.random() < 0.5 else [change.new, change.old]
        items.append(
            probe(
                world,
                name,
                DIMENSION_KIND,
                step,
                f"{slug(change.entity)}/director_first",
                f"Of {options[0]} and {options[1]}, the earlier director of {change.entity} is",
                [change.old],
                dimension="event_ordering",
                options=options,
                extra={
                    "kind": "director_first",
                    "entity": change.entity,
                    "variants": [
                        f"Between {options[0]} and {options[1]}, {change.entity} was led first by",
                        f"Who directed {change.entity} before the other, {options[0]} or {options[1]}? It was",
                    ],
                },
            )
        )
    return items


def _evolution_items(world: World, step: int, rng: random.Random) -> list[dict]:
    """knowledge_evolution: given the fact at one year, its value at the other (forward: the new value given
    the old one; backward: the old given the new)."""
    name = f"{DIMENSION_KIND}_{step}"
    y_old, y_new = str(world.years[step - 1]), str(world.years[step])
    changes = world.changes[step]
    items = []
    for index, change in enumerate(rng.sample(changes, min(len(changes), N_PER_DIMENSION))):
        relation = RELATIONS_BY_NAME[change.relation]
        forward = index % 2 == 0
        (y_known, known), (y_asked, gold) = (
            ((y_old, change.old), (y_new, change.new)) if forward else ((y_new, change.new), (y_old, change.old))
        )

        def prompt(template: str) -> str:
            stated = with_timestamp(relation.sentence(template, change.entity, known), change.entity, y_known, world)
            asked = with_timestamp(relation.cloze(template, change.entity), change.entity, y_asked, world)
            return f"{stated} {asked}"

        options = choice_options(rng, [change.old, change.new], values_of(world, relation))
        direction = "forward" if forward else "backward"
        items.append(
            probe(
                world,
                name,
                DIMENSION_KIND,
                step,
                f"{slug(change.entity)}/{change.relation}/knowledge_evolution",
                prompt(relation.statements[0]),
                [gold],
                timestamp=y_asked,
                dimension="knowledge_evolution",
                options=options,
                extra={
                    "entity": change.entity,
                    "relation": change.relation,
                    "direction": direction,
                    "variants": [prompt(t) for t in relation.heldout],
                },
            )
        )
    return items


def member_series(world: World, org: str) -> dict[int, int]:
    """A clearly monotone yearly member count of ``org``, from two years before the timeline to one after."""
    rng = random.Random(f"{world.config.seed}-members-{org}")
    sign = rng.choice((1, -1))
    count = rng.randint(300, 900)
    series = {}
    for year in range(world.years[0] - 2, world.years[-1] + 2):
        series[year] = count
        count += sign * rng.randint(15, 60)
    return series


def _trend_items(world: World, step: int, rng: random.Random) -> list[dict]:
    """trend_extrapolation: three yearly member counts in the prompt; the next year's direction."""
    name, year = f"{DIMENSION_KIND}_{step}", world.years[step]
    alive = sorted(org for org, first in world.founded_at.items() if first <= step)
    items = []
    for org in rng.sample(alive, min(len(alive), N_PER_DIMENSION // 2 + 4)):
        series = member_series(world, org)
        a, b, c = series[year - 2], series[year - 1], series[year]
        gold = "higher" if series[year + 1] > c else "lower"
        stem = f"{org} had {a} members in {year - 2}, {b} in {year - 1} and {c} in {year}."
        items.append(
            probe(
                world,
                name,
                DIMENSION_KIND,
                step,
                f"{slug(org)}/trend_extrapolation",
                f"{stem} In {year + 1}, its number of members will most likely be",
                [gold],
                timestamp=str(year),
                dimension="trend_extrapolation",
                options=["higher", "lower"],
                extra={
                    "entity": org,
                    "series": [a, b, c],
                    "variants": [
                        f"{stem} Next year, the member count of {org} will most likely be",
                        f"{stem} Compared with {year}, its membership in {year + 1} will most likely be",
                    ],
                },
            )
        )
    return items


def dimension_set(world: World, releases: Releases, step: int) -> EvalSet:
    """``dimension_<step>``: the five dimensions' questions about what step ``step`` introduced."""
    name = f"{DIMENSION_KIND}_{step}"
    rng = random.Random(f"{world.config.seed}-{name}")
    items = _version_items(world, releases, step, rng) + _localization_items(world, releases, step, rng)
    items += _ordering_items(world, step, rng)
    if step > 0:
        items += _evolution_items(world, step, rng)
    items += _trend_items(world, step, rng)
    return EvalSet(name=name, kind=DIMENSION_KIND, step=step, items=items)
