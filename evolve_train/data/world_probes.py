"""Probe sets of the embedded world beyond the four EvolvingQA splits.

``data/world_timeline.py`` builds the world's timeline from them (the dimension sets are in
``world_dimensions``, the dated toolkit releases in ``world_releases``):

* ``paired_<k>`` sets (kind ``paired``, :func:`paired_set`): for every fact changed at step k a pair of
  timestamped cloze questions (as of step k-1's year → old value, as of step k's year → new value, sharing
  a ``pair_id``), the same question without a timestamp (``role: now``, scored against the answer at the
  evaluated checkpoint, ``extra.answers_by_step``), and timestamped questions about a fixed sample of
  stable facts (``stable: true``) at the step's year;
* ``extra.variants`` of every world item (:func:`add_split_variants` for the splits): the same prompt in
  held-out wordings that never occur in a corpus (flip-rate and paraphrase-gap checks).

Timestamped prompts are asked in the world's date form (``data.world.dates``, ``data/dates.py``):
``"year: 2019 text: " + cloze`` (``prefix``) or ``"As of 2019, " + cloze`` (``inline``, and ``none``, whose
corpus is undated); ``extra.ts_template`` holds the prompt with a ``{timestamp}`` slot and ``extra.cloze``
the prompt without one (the §5 ablations).
"""

from __future__ import annotations

import random
from typing import Optional

from evolve_train.data.dates import PREFIX_FORMAT, dated, dated_template
from evolve_train.data.relations import RELATIONS_BY_NAME, Relation
from evolve_train.data.schema import EvalSet
from evolve_train.data.world import World, _split

PAIRED_KIND = "paired"
DIMENSION_KIND = "dimension"
PROBE_KINDS = (PAIRED_KIND, DIMENSION_KIND)
N_STABLE = 20
"""Stable facts asked with a timestamp at every step (old-knowledge retention)."""
N_PER_DIMENSION = 16
"""Most items of one dimension introduced at one step."""


def ts_template(cloze: str, entity: str, world: Optional[World] = None) -> str:
    """The cloze with a ``{timestamp}`` slot in the world's date form (``data/dates.py``; without a world, or
    with ``dates=none``, the inline form): "As of {timestamp}, the director of X is"."""
    form, prefix = (world.dates, world.prefix_format) if world is not None else ("none", PREFIX_FORMAT)
    return dated_template(cloze, form, entity, prefix)


def with_timestamp(cloze: str, entity: str, timestamp: str, world: Optional[World] = None) -> str:
    """The cloze asked as of ``timestamp`` (see :func:`ts_template`)."""
    form, prefix = (world.dates, world.prefix_format) if world is not None else ("none", PREFIX_FORMAT)
    return dated(cloze, timestamp, form, entity, prefix)


def probe(
    world: World,
    set_name: str,
    kind: str,
    step: int,
    key: str,
    question: str,
    answers: list[str],
    *,
    timestamp: Optional[str] = None,
    pair_id: Optional[str] = None,
    stable: bool = False,
    base_question: Optional[str] = None,
    dimension: Optional[str] = None,
    options: Optional[list[str]] = None,
    extra: Optional[dict] = None,
) -> dict:
    """One probe item in the QA item contract (id ``<set_name>/<key>``, dev/private split as the world's)."""
    item_id = f"{set_name}/{key}"
    item = {
        "id": item_id,
        "question": question,
        "answers": answers,
        "set": kind,
        "step": step,
        "timestamp": timestamp,
        "split": _split(item_id, world.config.dev_share),
        "pair_id": pair_id,
        "stable": stable,
        "base_question": base_question,
        "dimension": dimension,
        "options": options,
        "extra": extra or {},
    }
    if options is not None:
        item["gold_index"] = options.index(answers[0])
    return item


def slug(text: str) -> str:
    return text.lower().replace(" ", "-")


def values_of(world: World, relation: Relation) -> list[str]:
    """Every value the relation takes anywhere in the world (distractor pool)."""
    return sorted({value for state in world.states for (_, rel), value in state.items() if rel == relation.name})


def choice_options(rng: random.Random, golds: list[str], pool: list[str], n: int = 4) -> list[str]:
    """``golds`` plus distinct distractors from ``pool`` up to ``n`` options, in a seeded order."""
    distractors = [v for v in pool if v not in golds]
    options = list(dict.fromkeys(golds)) + rng.sample(distractors, min(len(distractors), n - len(set(golds))))
    rng.shuffle(options)
    return options


# ---------------------------------------------------------------- paired (docs/metrics.md#4-paired-temporal-metrics/§5)


def _relational(
    world: World,
    set_name: str,
    step: int,
    org: str,
    relation: Relation,
    value: str,
    timestamp: Optional[str],
    role: str,
    options: list[str],
    pair_id: Optional[str] = None,
    stable: bool = False,
    answers_by_step: Optional[dict] = None,
) -> dict:
    cloze = relation.cloze(relation.statements[0], org)
    variants = [relation.cloze(t, org) for t in relation.heldout]
    extra = {"entity": org, "relation": relation.name, "role": role, "cloze": cloze}
    if timestamp is not None:
        extra["ts_template"] = ts_template(cloze, org, world)
        variants = [with_timestamp(v, org, timestamp, world) for v in variants]
        question = with_timestamp(cloze, org, timestamp, world)
    else:
        question = cloze
    extra["variants"] = variants
    if answers_by_step is not None:
        extra["answers_by_step"] = answers_by_step
    key = f"{slug(org)}/{relation.name}/{role}" + (f"/{timestamp}" if role == "stable" else "")
    return probe(
        world,
        set_name,
        PAIRED_KIND,
        step,
        key,
        question,
        [value],
        timestamp=timestamp,
        pair_id=pair_id,
        stable=stable,
        base_question=relation.question.format(e=org),
        options=options,
        extra=extra,
    )


def stable_facts(world: World, n: int = N_STABLE) -> list[tuple[str, str]]:
    """A fixed seeded sample of facts true at every step (of organisations alive at step 0)."""
    stable = sorted(key for key, value in world.states[0].items() if all(state[key] == value for state in world.states))
    return sorted(random.Random(f"{world.config.seed}-stable-probes").sample(stable, min(n, len(stable))))


def paired_set(world: World, step: int) -> EvalSet:
    """``paired_<step>``: old/new timestamped pairs of the step's changes, their no-timestamp question,
    and the stable sample asked as of the step's year."""
    name, years = f"{PAIRED_KIND}_{step}", [str(y) for y in world.years]
    rng = random.Random(f"{world.config.seed}-{name}")
    items = []
    for change in world.changes[step]:
        relation = RELATIONS_BY_NAME[change.relation]
        options = choice_options(rng, [change.old, change.new], values_of(world, relation))
        pair_id = f"{PAIRED_KIND}/{change.entity}/{change.relation}/{step}"
        items.append(
            _relational(
                world, name, step, change.entity, relation, change.old, years[step - 1], "old", options, pair_id
            )
        )
        items.append(
            _relational(world, name, step, change.entity, relation, change.new, years[step], "new", options, pair_id)
        )
        now = {str(s): [world.states[s][(change.entity, change.relation)]] for s in range(step, len(years))}
        items.append(
            _relational(
                world, name, step, change.entity, relation, change.new, None, "now", options, answers_by_step=now
            )
        )
    for org, rel in stable_facts(world):
        relation = RELATIONS_BY_NAME[rel]
        value = world.states[step][(org, rel)]
        options = choice_options(rng, [value], values_of(world, relation))
        items.append(_relational(world, name, step, org, relation, value, years[step], "stable", options, stable=True))
    return EvalSet(name=name, kind=PAIRED_KIND, step=step, items=items)


def add_split_variants(sets: list[EvalSet], world: Optional[World] = None) -> None:
    """Give each split item of the world ``extra.variants``: its question in the relation's held-out wordings
    (dated as the question is)."""
    for eval_set in sets:
        for item in eval_set.items:
            extra = item.setdefault("extra", {})
            relation = RELATIONS_BY_NAME.get(extra.get("relation", ""))
            if relation is None or "variants" in extra:
                continue
            variants = [relation.cloze(t, extra["entity"]) for t in relation.heldout]
            if world is not None and world.dates != "none" and item.get("timestamp") is not None:
                variants = [with_timestamp(v, extra["entity"], str(item["timestamp"]), world) for v in variants]
            extra["variants"] = variants


__all__ = [
    "PAIRED_KIND",
    "DIMENSION_KIND",
    "PROBE_KINDS",
    "paired_set",
    "stable_facts",
    "ts_template",
    "with_timestamp",
    "probe",
    "choice_options",
    "add_split_variants",
]
