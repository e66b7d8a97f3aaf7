"""DyKnow's dated Wikidata facts as a timeline (``data=dyknow [data.root=DIR]``; docs/data.md, "DyKnow").

``DIR`` holds DyKnow's ``grc_generated.json`` (``qa_generated.json`` and ``passages.json`` optional); without
``data.root`` it is the copy ``evolve-data fetch-data dyknow`` fetched into the cache (:mod:`.dyknow_fetch`).
The reading and the answer syntax are in :mod:`.dyknow_facts`. From ``data.dyknow``:

* **States.** At each cut date (``cuts``) a fact's state is the set of its values valid on that day (several =
  aliases of one fact: any of them is a right answer, EM/F1 take the best alias). Step k's name is cut k
  as written; the cut is also the date in the texts (``dates``, or ``data.time_prefix``'s prefix).
* **Corpora** (as the embedded world's): step 0 states every fact with a value at cut 0; step k is the diff,
  the entities with a fact whose state differs from cut k−1's, each with all its facts at cut k (the
  unchanged ones restated). One document per entity and trained wording (``train_wordings``; a fact's other
  prompts are held out), a sentence ``<cloze> <value>.`` per value in a seeded order, plus one masked-entity
  pair per sentence (``input`` = the cloze and ``<mask>``, ``output`` = the value). With ``passages`` the
  Wikipedia paragraphs matching a value of the step's state join the corpus. ``data.keep_history`` keeps every
  earlier step's corpus too (``data/transforms.py``).
* **Eval sets** (the item contract of ``data/qa_items.py``), asked in the fact's first trained wording, dated:
  ``unchanged`` (the same non-empty state at every cut; asked as of cut 0), ``new_k`` (first value at cut k),
  ``updated_k`` (a value valid at cut k−1 ended by cut k and the fact has a value at cut k; gold = every value
  at cut k) and ``outdated_k`` (the same questions, gold = the values that ended), each pair sharing a
  ``pair_id``; ``paired_k`` as the world's (``world_probes.py``): the question as of cut k−1 (gold = the
  values that ended) and as of cut k (gold = the values that began), undated (``now``), and a seeded sample of
  unchanged facts as of cut k (``stable``). Every item carries ``extra.variants`` (the held-out wordings,
  then the question form of ``qa_generated.json``, dated as the question), ``extra.variant_wordings`` (their
  prompt names), ``extra.cloze`` / ``extra.ts_template`` (timestamp ablation) and the fact in ``extra``.
  ``split``: dev for a seeded ``dev_share`` of the facts, all items of a fact alike.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Optional

from evolve_train.config import DataConfig, DyKnowConfig
from evolve_train.data.dates import PREFIX_FORMAT, dated, dated_template, training_text
from evolve_train.data.loaders.dyknow_facts import FACTS_FILE, Fact, FactKey, read_facts, read_passages
from evolve_train.data.loaders.dyknow_fetch import default_root, missing_hint
from evolve_train.data.schema import EvalSet, TimeStep, Timeline
from evolve_train.data.timestamps import parse_timestamp
from evolve_train.data.world_probes import PAIRED_KIND, choice_options
from evolve_train.errors import ConfigError, DataError

MASK = "<mask>"
State = tuple[str, ...]


@dataclass
class Wording:
    question: str
    """Name of the prompt the fact's questions are asked in (its first trained wording)."""
    trained: list[str]
    heldout: list[str]


@dataclass
class Plan:
    """The facts' states at the cuts, and what each step's corpus and sets hold."""

    facts: list[Fact]
    cuts: list[str]
    states: list[dict[FactKey, State]]
    wordings: dict[FactKey, Wording]
    form: str
    prefix_format: str
    dyknow: DyKnowConfig

    def entities(self, step: int) -> list[tuple[str, str]]:
        """(category, entity) whose documents step ``step``'s corpus holds."""
        keys = [f.key for f in self.facts if self.states[step][f.key]]
        if step > 0:
            keys = [f.key for f in self.facts if self.states[step][f.key] != self.states[step - 1][f.key]]
        return sorted({(c, e) for c, e, _ in keys})

    def changed(self, step: int) -> list[Fact]:
        """Facts of ``updated_<step>``: a value of cut step−1 ended and the fact has one at cut step."""
        before, now = self.states[step - 1], self.states[step]
        return [f for f in self.facts if now[f.key] and set(before[f.key]) - set(now[f.key])]

    def new(self, step: int) -> list[Fact]:
        """Facts of ``new_<step>``: no value at any earlier cut, one at cut ``step``."""
        return [
            f for f in self.facts if self.states[step][f.key] and not any(state[f.key] for state in self.states[:step])
        ]

    def unchanged(self) -> list[Fact]:
        return [
            f
            for f in self.facts
            if self.states[0][f.key] and all(state[f.key] == self.states[0][f.key] for state in self.states)
        ]


# ---------------------------------------------------------------- configuration


def parse_cuts(cuts: list) -> list[tuple[str, date]]:
    """(as written, day) of each cut; strictly increasing, else a ConfigError naming the cut."""
    parsed = []
    for k, cut in enumerate(cuts):
        text = str(cut).strip()
        try:
            day = parse_timestamp(text)
        except ValueError as err:
            raise ConfigError(f"data.dyknow.cuts[{k}]: {err} (give YYYY, YYYY-MM or YYYY-MM-DD)") from None
        if parsed and day <= parsed[-1][1]:
            raise ConfigError(
                f"data.dyknow.cuts must be strictly increasing: cut {k} ({text}) is not after "
                f"cut {k - 1} ({parsed[-1][0]})"
            )
        parsed.append((text, day))
    return parsed


def wording_of(fact: Fact, train: list[str]) -> Wording:
    """The fact's trained prompts (those named in ``train``, in that order; none: its first prompt) and the
    held-out rest, in the file's order."""
    trained = [name for name in train if name in fact.prompts] or [next(iter(fact.prompts))]
    return Wording(trained[0], trained, [name for name in fact.prompts if name not in trained])


def date_form(cfg: DataConfig) -> str:
    """``data.dyknow.dates``, or ``prefix`` with ``data.time_prefix=true`` (whatever ``dates`` says)."""
    return "prefix" if cfg.time_prefix else str(cfg.dyknow.dates)


def root_of(cfg: DataConfig) -> Path:
    """``data.root``, or (unset) the fetched copy's directory; a DataError saying how to fetch DyKnow when
    ``grc_generated.json`` is not there."""
    root = Path(cfg.root).expanduser() if cfg.root else default_root()
    if not (root / FACTS_FILE).is_file():
        raise DataError(missing_hint(root, default=not cfg.root), file=str(root / FACTS_FILE))
    return root


def plan_of(cfg: DataConfig) -> Plan:
    root = root_of(cfg)
    dyknow = cfg.dyknow
    cuts = parse_cuts(list(dyknow.cuts))
    facts = read_facts(root, list(dyknow.categories) if dyknow.categories is not None else None, qa=dyknow.qa_questions)
    states = [{f.key: f.state(day) for f in facts} for _, day in cuts]
    wordings = {f.key: wording_of(f, list(dyknow.train_wordings)) for f in facts}
    return Plan(
        facts,
        [text for text, _ in cuts],
        states,
        wordings,
        date_form(cfg),
        cfg.time_prefix_format or PREFIX_FORMAT,
        dyknow,
    )


# ---------------------------------------------------------------- corpora


def step_corpus(plan: Plan, step: int, passages: Optional[dict] = None) -> tuple[list[dict], list[dict]]:
    """Masked-entity pairs and documents of one step (see the module docstring), dated with cut ``step``."""
    cut, state = plan.cuts[step], plan.states[step]
    rng = random.Random(f"{plan.dyknow.split_seed}-dyknow-corpus-{step}")
    by_entity: dict[tuple[str, str], list[Fact]] = {}
    for fact in plan.facts:
        by_entity.setdefault((fact.category, fact.entity), []).append(fact)
    pairs, texts = [], []
    stamp = lambda text, entity: training_text(text, cut, plan.form, entity, plan.prefix_format)  # noqa: E731
    for category, entity in plan.entities(step):
        facts = [f for f in by_entity[(category, entity)] if state[f.key]]
        names = list(dict.fromkeys(n for f in facts for n in plan.wordings[f.key].trained))
        for number, name in enumerate(names):
            sentences = []
            for fact in facts:
                prompt = fact.prompts.get(name) if name in plan.wordings[fact.key].trained else None
                if prompt is None:
                    continue
                for value in state[fact.key]:
                    sentences.append(f"{prompt} {value}.")
                    pairs.append(
                        {
                            "input": stamp(f"{prompt} {MASK}.", entity),
                            "output": value,
                            "entity": entity,
                            "relation": fact.relation,
                            "wording": name,
                        }
                    )
            rng.shuffle(sentences)
            doc_id = f"{category}/{entity}" + (f"#{number}" if number else "")
            texts.append({"doc_id": doc_id, "text": stamp(" ".join(sentences), entity)})
        for fact in facts if passages else []:
            for k, (text, matched) in enumerate(passages.get(fact.key, [])):
                if set(matched) & set(state[fact.key]):
                    texts.append(
                        {"doc_id": f"{category}/{entity}/{fact.relation}/passage{k}", "text": stamp(text, text)}
                    )  # a passage keeps its first letter's case
    return pairs, texts


# ---------------------------------------------------------------- eval sets


def fact_split(fact: Fact, dyknow: DyKnowConfig) -> str:
    """dev for a seeded ``dev_share`` of the facts (every item of a fact in the same split)."""
    digest = hashlib.sha256(f"{dyknow.split_seed}/{'/'.join(fact.key)}".encode()).hexdigest()
    return "dev" if int(digest[:8], 16) / 0xFFFFFFFF < dyknow.dev_share else "private"


def slug(fact: Fact) -> str:
    return "/".join(part.replace(" ", "_") for part in fact.key if part)


def _question(plan: Plan, fact: Fact, cloze: str, timestamp: Optional[str]) -> str:
    if timestamp is None or plan.form == "none":
        return cloze
    return dated(cloze, timestamp, plan.form, fact.entity, plan.prefix_format)


def item(
    plan: Plan,
    set_name: str,
    kind: str,
    step: Optional[int],
    fact: Fact,
    answers: State,
    timestamp: Optional[str],
    ask_dated: bool = True,
    *,
    key: str = "",
    pair_id: Optional[str] = None,
    stable: bool = False,
    extra: Optional[dict] = None,
) -> dict:
    """One eval item about ``fact`` (see the module docstring); ``timestamp`` = the cut whose state it asks
    (``ask_dated`` false: an undated question, as the world's undated items, still timestamped)."""
    wording = plan.wordings[fact.key]
    cloze = fact.prompts[wording.question]
    asked = timestamp if ask_dated else None
    variants = [fact.prompts[name] for name in wording.heldout] + fact.questions[:1]
    names = list(wording.heldout) + (["qa_generated"] if fact.questions else [])
    info = {
        "category": fact.category,
        "entity": fact.entity,
        "relation": fact.relation,
        "wording": wording.question,
        "cloze": cloze,
        "variants": [_question(plan, fact, v, asked) for v in variants],
        "variant_wordings": names,
        **(extra or {}),
    }
    if asked is not None and plan.form != "none":
        info["ts_template"] = dated_template(cloze, plan.form, fact.entity, plan.prefix_format)
    item_id = f"{set_name}/{slug(fact)}" + (f"/{key}" if key else "")
    return {
        "id": item_id,
        "question": _question(plan, fact, cloze, asked),
        "answers": list(answers),
        "set": kind,
        "step": step,
        "timestamp": timestamp,
        "split": fact_split(fact, plan.dyknow),
        "pair_id": pair_id,
        "stable": stable,
        "base_question": fact.questions[0] if fact.questions else cloze,
        "extra": info,
    }


def split_sets(plan: Plan) -> list[EvalSet]:
    """Unchanged, and New_k / Updated_k / Outdated_k of every step k >= 1."""
    dated_world = plan.form != "none"
    last = len(plan.cuts) - 1
    sets = [
        EvalSet(
            "unchanged",
            "unchanged",
            None,
            [
                item(
                    plan,
                    "unchanged",
                    "unchanged",
                    None,
                    f,
                    plan.states[0][f.key],
                    plan.cuts[0] if dated_world else plan.cuts[last],
                    stable=True,
                )
                for f in plan.unchanged()
            ],
        )
    ]
    for k in range(1, len(plan.cuts)):
        now, before = plan.states[k], plan.states[k - 1]
        sets.append(
            EvalSet(
                f"new_{k}",
                "new",
                k,
                [item(plan, f"new_{k}", "new", k, f, now[f.key], plan.cuts[k]) for f in plan.new(k)],
            )
        )
        updated, outdated = [], []
        for f in plan.changed(k):
            pair = f"{slug(f)}/{k}"
            ended = tuple(v for v in before[f.key] if v not in now[f.key])
            updated.append(item(plan, f"updated_{k}", "updated", k, f, now[f.key], plan.cuts[k], pair_id=pair))
            outdated.append(
                item(
                    plan,
                    f"outdated_{k}",
                    "outdated",
                    k,
                    f,
                    ended,
                    plan.cuts[k] if dated_world else plan.cuts[k - 1],
                    pair_id=pair,
                )
            )
        sets += [EvalSet(f"updated_{k}", "updated", k, updated), EvalSet(f"outdated_{k}", "outdated", k, outdated)]
    return sets


def _pool(plan: Plan, fact: Fact) -> list[str]:
    """Distractors: every value of the category's facts with the same relation (``""`` for all its facts)."""
    return sorted(
        {
            v.text
            for f in plan.facts
            if f.category == fact.category and (f.relation == fact.relation or not fact.relation)
            for v in f.values
        }
    )


def _options(rng: random.Random, golds: list[str], plan: Plan, fact: Fact) -> list[str]:
    """The golds and distractors of the category (4 options, or one distractor more than the golds)."""
    golds = list(dict.fromkeys(golds))
    return choice_options(rng, golds, _pool(plan, fact), n=max(4, len(golds) + 1))


def paired_set(plan: Plan, step: int) -> EvalSet:
    """``paired_<step>`` as the world's (``world_probes.paired_set``), on the facts changed at ``step``."""
    name = f"{PAIRED_KIND}_{step}"
    rng = random.Random(f"{plan.dyknow.split_seed}-dyknow-{name}")
    items = []
    for fact in plan.changed(step) if step > 0 else []:
        before, now = plan.states[step - 1][fact.key], plan.states[step][fact.key]
        ended, began = [v for v in before if v not in now], [v for v in now if v not in before]
        if not began:
            continue
        options = _options(rng, ended + list(now), plan, fact)
        pair = f"{PAIRED_KIND}/{slug(fact)}/{step}"
        common = {"options": options}
        items.append(
            item(
                plan,
                name,
                PAIRED_KIND,
                step,
                fact,
                tuple(ended),
                plan.cuts[step - 1],
                key="old",
                pair_id=pair,
                extra={"role": "old", **common},
            )
        )
        items.append(
            item(
                plan,
                name,
                PAIRED_KIND,
                step,
                fact,
                tuple(began),
                plan.cuts[step],
                key="new",
                pair_id=pair,
                extra={"role": "new", **common},
            )
        )
        by_step = {str(s): list(plan.states[s][fact.key]) for s in range(step, len(plan.cuts))}
        items.append(
            item(
                plan,
                name,
                PAIRED_KIND,
                step,
                fact,
                now,
                None,
                key="now",
                extra={"role": "now", "answers_by_step": by_step, **common},
            )
        )
    unchanged = plan.unchanged()
    sample = sorted(
        random.Random(f"{plan.dyknow.split_seed}-dyknow-stable").sample(
            range(len(unchanged)), min(plan.dyknow.stable_probes, len(unchanged))
        )
    )
    for index in sample:
        fact = unchanged[index]
        value = plan.states[step][fact.key]
        items.append(
            item(
                plan,
                name,
                PAIRED_KIND,
                step,
                fact,
                value,
                plan.cuts[step],
                key=f"stable/{plan.cuts[step]}",
                stable=True,
                extra={"role": "stable", "options": _options(rng, list(value), plan, fact)},
            )
        )
    for probe in items:  # the choice evaluators read options and gold_index at the top level
        probe["options"] = probe["extra"].pop("options")
        probe["gold_index"] = probe["options"].index(probe["answers"][0])
    return EvalSet(name, PAIRED_KIND, step, items)


def dyknow_timeline(cfg: DataConfig) -> Timeline:
    """Build and validate the DyKnow timeline (see the module docstring)."""
    plan = plan_of(cfg)
    passages = read_passages(root_of(cfg)) if plan.dyknow.passages else None
    steps = []
    for k, cut in enumerate(plan.cuts):
        pairs, texts = step_corpus(plan, k, passages)
        steps.append(TimeStep(index=k, name=cut, pairs=pairs, texts=texts))
    if not steps[0].pairs:
        raise DataError(
            f"no fact of data.root has a value at the first cut ({plan.cuts[0]}): choose a later data.dyknow.cuts[0]",
            file=str(root_of(cfg) / FACTS_FILE),
        )
    sets = split_sets(plan) + [paired_set(plan, k) for k in range(len(plan.cuts))]
    return Timeline(steps=steps, eval_sets=sets, prompt_template=cfg.prompt_template)
