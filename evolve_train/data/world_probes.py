"""Probe sets of the embedded world beyond the four EvolvingQA splits, and the one corpus extension they need.

``add_probes(world, steps, sets)`` (called once by ``timeline.world_timeline``) leaves the world's fact
generation and its corpora untouched and

* extends each step's corpus with **dated toolkit releases** (:mod:`world_releases`): a share of the
  organisations publish a numbered toolkit; at step 0 every toolkit states its version and at each later
  step about half of them release the next one. Each release is a time-scoped fact ("In 2019, X released
  version 3 of its toolkit.") that stays true forever — the versioned knowledge of ``version_awareness``
  and ``time_localization``;
* appends ``paired_<k>`` sets (kind ``paired``): for every fact changed at step k a pair of timestamped
  cloze questions ("As of 2018, the director of X is" → old value, "As of 2019, ..." → new value, sharing
  a ``pair_id``), the same question without a timestamp (``role: now``, scored against the answer at the
  evaluated checkpoint, ``extra.answers_by_step``), and timestamped questions about a fixed sample of
  stable facts (``stable: true``) at the step's year;
* appends ``dimension_<k>`` sets (kind ``dimension``): questions of the five EvolveBench dimensions, each
  with ``options`` (gold + distractors) for multiple-choice scoring and an open-form gold;
* gives every world item (splits included) ``extra.variants``: the same prompt in held-out phrasings that
  never occur in a corpus (flip-rate and contamination checks).

Timestamped prompts keep the world's cloze form: ``"As of <year>, " + cloze``; ``extra.ts_template`` holds
the prompt with a ``{timestamp}`` slot and ``extra.cloze`` the prompt without one (the §5 ablations).
"""

from __future__ import annotations

import random
from typing import Optional

from evolve_train.data.relations import RELATIONS_BY_NAME, Relation
from evolve_train.data.timeline import EvalSet, TimeStep
from evolve_train.data.world import World, _split
from evolve_train.data.world_releases import generate_releases, release_corpus

PAIRED_KIND = "paired"
DIMENSION_KIND = "dimension"
PROBE_KINDS = (PAIRED_KIND, DIMENSION_KIND)
TS_PREFIX = "As of {timestamp}, "
N_STABLE = 20
"""Stable facts asked with a timestamp at every step (old-knowledge retention)."""
N_PER_DIMENSION = 16
"""Most items of one dimension introduced at one step."""


def lower_first(text: str, entity: str) -> str:
    """``text`` with its first letter lowercased unless it starts with the entity's (proper) name."""
    return text if text.startswith(entity) or not text else text[0].lower() + text[1:]


def ts_template(cloze: str, entity: str) -> str:
    """The cloze with a leading ``{timestamp}`` slot: "As of {timestamp}, the director of X is"."""
    return TS_PREFIX + lower_first(cloze, entity).replace("{", "{{").replace("}", "}}")


def with_timestamp(cloze: str, entity: str, timestamp: str) -> str:
    """The cloze asked as of ``timestamp``."""
    return ts_template(cloze, entity).format(timestamp=timestamp)


def probe(world: World, set_name: str, kind: str, step: int, key: str, question: str, answers: list[str],
          *, timestamp: Optional[str] = None, pair_id: Optional[str] = None, stable: bool = False,
          base_question: Optional[str] = None, dimension: Optional[str] = None,
          options: Optional[list[str]] = None, extra: Optional[dict] = None) -> dict:
    """One probe item in the QA item contract (id ``<set_name>/<key>``, dev/private split as the world's)."""
    item_id = f"{set_name}/{key}"
    item = {"id": item_id, "question": question, "answers": answers, "set": kind, "step": step,
            "timestamp": timestamp, "split": _split(item_id, world.config.dev_share), "pair_id": pair_id,
            "stable": stable, "base_question": base_question, "dimension": dimension, "options": options,
            "extra": extra or {}}
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


# ---------------------------------------------------------------- paired (METRICS.md §4/§5)

def _relational(world: World, set_name: str, step: int, org: str, relation: Relation, value: str,
                timestamp: Optional[str], role: str, options: list[str], pair_id: Optional[str] = None,
                stable: bool = False, answers_by_step: Optional[dict] = None) -> dict:
    cloze = relation.cloze(relation.statements[0], org)
    variants = [relation.cloze(t, org) for t in relation.heldout]
    extra = {"entity": org, "relation": relation.name, "role": role, "cloze": cloze}
    if timestamp is not None:
        extra["ts_template"] = ts_template(cloze, org)
        variants = [with_timestamp(v, org, timestamp) for v in variants]
        question = with_timestamp(cloze, org, timestamp)
    else:
        question = cloze
    extra["variants"] = variants
    if answers_by_step is not None:
        extra["answers_by_step"] = answers_by_step
    key = f"{slug(org)}/{relation.name}/{role}" + (f"/{timestamp}" if role == "stable" else "")
    return probe(world, set_name, PAIRED_KIND, step, key, question, [value], timestamp=timestamp,
                 pair_id=pair_id, stable=stable, base_question=relation.question.format(e=org), options=options,
                 extra=extra)


def stable_facts(world: World, n: int = N_STABLE) -> list[tuple[str, str]]:
    """A fixed seeded sample of facts true at every step (of organisations alive at step 0)."""
    stable = sorted(key for key, value in world.states[0].items()
                    if all(state[key] == value for state in world.states))
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
        items.append(_relational(world, name, step, change.entity, relation, change.old, years[step - 1], "old",
                                 options, pair_id))
        items.append(_relational(world, name, step, change.entity, relation, change.new, years[step], "new",
                                 options, pair_id))
        now = {str(s): [world.states[s][(change.entity, change.relation)]] for s in range(step, len(years))}
        items.append(_relational(world, name, step, change.entity, relation, change.new, None, "now",
                                 options, answers_by_step=now))
    for org, rel in stable_facts(world):
        relation = RELATIONS_BY_NAME[rel]
        value = world.states[step][(org, rel)]
        options = choice_options(rng, [value], values_of(world, relation))
        items.append(_relational(world, name, step, org, relation, value, years[step], "stable", options,
                                 stable=True))
    return EvalSet(name=name, kind=PAIRED_KIND, step=step, items=items)


# ---------------------------------------------------------------- the hook

def add_split_variants(sets: list[EvalSet]) -> None:
    """Give each split item of the world ``extra.variants``: its cloze in the relation's held-out phrasings."""
    for eval_set in sets:
        for item in eval_set.items:
            extra = item.setdefault("extra", {})
            relation = RELATIONS_BY_NAME.get(extra.get("relation", ""))
            if relation is not None and "variants" not in extra:
                extra["variants"] = [relation.cloze(t, extra["entity"]) for t in relation.heldout]


def add_probes(world: World, steps: list[TimeStep], sets: list[EvalSet]) -> None:
    """Extend the steps' corpora with the toolkit releases and append the paired and dimension sets."""
    from evolve_train.data.world_dimensions import dimension_set

    releases = generate_releases(world)
    for step in steps:
        pairs, texts = release_corpus(world, releases, step.index)
        step.pairs.extend(pairs)
        step.texts.extend(texts)
    add_split_variants(sets)
    for step in range(len(world.states)):
        sets.append(paired_set(world, step))
        sets.append(dimension_set(world, releases, step))


__all__ = ["PAIRED_KIND", "DIMENSION_KIND", "PROBE_KINDS", "add_probes", "paired_set", "stable_facts",
           "ts_template", "with_timestamp", "probe", "choice_options"]
