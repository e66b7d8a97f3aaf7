"""The embedded evolving world: a seeded, fictional timeline of facts with known ground truth.

Organisations have a director and a headquarters (facts that change between time steps) and a
founding year (a stable fact). Step 0 is the initial snapshot; every later step changes a share of
the changeable facts and founds new organisations. From the fact states the world derives

* per step, the training corpus: ``data.world.docs_per_entity`` differently worded documents per
  organisation (knowledge augmentation, Physics of LMs 3.1: document 0 in each relation's probe wording,
  the others in distinct wordings of the relation's bank drawn per organisation and step; sentence order
  shuffled per document; the full name in every sentence), as plain text and as masked-entity pairs (one
  per sentence, EvolvingQA layout: ``input`` with the value masked, ``output`` = the value). Every
  document and pair carries its snapshot's date in the form ``data.world.dates`` (``data/dates.py``).
  A later step's corpus is the *diff*: documents of organisations that changed or are new, restating
  their unchanged facts too;
* the eval sets of docs/metrics.md#2-evolvingqa-splits: Unchanged (one set), New_k, Updated_k and Outdated_k.

Split questions are cloze prompts in the probe wording of a relation (an "efficacy" probe, as
knowledge-editing evaluations call it), dated like the corpus: Unchanged as of the first year, New_k,
Updated_k and Outdated_k (the same questions as Updated_k) as of step k's year; with ``dates=none`` they
are undated. The held-out wordings never occur in a corpus.

``python -m evolve_train.data.world --out DIR`` writes everything as JSONL for inspection.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path

from evolve_train.config import WorldConfig
from evolve_train.data.dates import PREFIX_FORMAT, check_form, dated, training_text
from evolve_train.data.names import NameFactory
from evolve_train.data.relations import RELATIONS, RELATIONS_BY_NAME, Relation

MASK = "<mask>"
FactKey = tuple[str, str]  # (organisation, relation name)


@dataclass
class Change:
    entity: str
    relation: str
    old: str
    new: str


@dataclass
class World:
    config: WorldConfig
    years: list[int]
    states: list[dict[FactKey, str]]
    """Fact state after each step's snapshot (F_t of docs/metrics.md#2-evolvingqa-splits)."""
    changes: list[list[Change]]
    """Facts whose value changed at each step (empty at step 0)."""
    founded_at: dict[str, int] = field(default_factory=dict)
    """Step at which each organisation first appears."""
    dates: str = "none"
    """Date form of the corpora and probes (``data.world.dates``; ``data.time_prefix`` sets ``prefix``)."""
    prefix_format: str = PREFIX_FORMAT
    """The ``prefix`` form's format (``data.time_prefix_format``)."""

    def stamp(self, text: str, step: int, entity: str | None = None) -> str:
        """A training text of step ``step`` carrying its date (unchanged when ``dates`` is ``none``)."""
        return training_text(text, str(self.years[step]), self.dates, entity, self.prefix_format)


def generate_world(config: WorldConfig) -> World:
    """Generate the fact states of every step; same config, same world."""
    if config.n_steps < 1:
        raise ValueError(f"data.world.n_steps must be >= 1, got {config.n_steps}")
    if not 0.0 <= config.change_share <= 1.0:
        raise ValueError(f"data.world.change_share must be in [0, 1], got {config.change_share}")
    if config.docs_per_entity < 1:
        raise ValueError(f"data.world.docs_per_entity must be >= 1, got {config.docs_per_entity}")
    check_form(config.dates)
    rng = random.Random(config.seed)
    names = NameFactory(rng)
    founded_at: dict[str, int] = {}
    state: dict[FactKey, str] = {}

    pools = {"person": names.pool("person", config.n_people), "city": names.pool("city", config.n_cities)}

    def draw_value(relation: Relation, other_than: str | None = None) -> str:
        while True:
            if relation.value_kind in pools:
                value = rng.choice(pools[relation.value_kind])
            else:
                value = str(rng.randint(1900, 1999))
            if value != other_than:
                return value

    def found(step: int, count: int) -> None:
        for _ in range(count):
            org = names.organisation()
            founded_at[org] = step
            for relation in RELATIONS:
                state[(org, relation.name)] = draw_value(relation)

    found(0, config.n_entities)
    states, changes = [dict(state)], [[]]
    for step in range(1, config.n_steps):
        changeable = sorted(key for key in state if RELATIONS_BY_NAME[key[1]].changes)
        chosen = rng.sample(changeable, round(config.change_share * len(changeable)))
        step_changes = []
        for org, rel in sorted(chosen):
            new_value = draw_value(RELATIONS_BY_NAME[rel], other_than=state[(org, rel)])
            step_changes.append(Change(org, rel, state[(org, rel)], new_value))
            state[(org, rel)] = new_value
        found(step, config.new_entities_per_step)
        states.append(dict(state))
        changes.append(step_changes)
    years = [config.start_year + step for step in range(config.n_steps)]
    return World(config=config, years=years, states=states, changes=changes, founded_at=founded_at, dates=config.dates)


# ---------------------------------------------------------------- training corpora


def document_wordings(world: World, org: str, step: int) -> list[dict[str, str]]:
    """Per document of ``org`` at ``step``: relation name -> training wording. Document 0 uses each relation's
    probe wording (``statements[0]``); documents 1.. use distinct other wordings of the bank, drawn per
    organisation, step and relation (cycling through the bank when there are more documents than wordings)."""
    count = world.config.docs_per_entity
    rng = random.Random(f"{world.config.seed}-wordings-{step}-{org}")
    chosen: dict[str, list[str]] = {}
    for relation in RELATIONS:
        others = list(relation.statements[1:])
        rng.shuffle(others)
        picks = [relation.statements[0]]
        while len(picks) < count:
            picks += others[: count - len(picks)]
        chosen[relation.name] = picks
    return [{name: picks[d] for name, picks in chosen.items()} for d in range(count)]


def step_documents(world: World, step: int) -> list[str]:
    """Organisations whose document the step's snapshot diff contains (all of them at step 0)."""
    if step == 0:
        return sorted(org for org, first in world.founded_at.items() if first == 0)
    touched = {change.entity for change in world.changes[step]}
    touched |= {org for org, first in world.founded_at.items() if first == step}
    return sorted(touched)


def step_corpus(world: World, step: int) -> tuple[list[dict], list[dict]]:
    """Masked-entity pairs and plain-text documents of one step (diff corpus after step 0), dated."""
    state = world.states[step]
    rng = random.Random(f"{world.config.seed}-corpus-{step}")
    pairs, texts = [], []
    for org in step_documents(world, step):
        for number, wordings in enumerate(document_wordings(world, org, step)):
            sentences = []
            for relation in RELATIONS:
                value = state[(org, relation.name)]
                sentence = relation.sentence(wordings[relation.name], org, value)
                masked = relation.sentence(wordings[relation.name], org, MASK)
                pairs.append(
                    {"input": world.stamp(masked, step, org), "output": value, "entity": org, "relation": relation.name}
                )
                sentences.append(sentence)
            rng.shuffle(sentences)
            doc_id = org if number == 0 else f"{org}#{number}"
            texts.append({"doc_id": doc_id, "text": world.stamp(" ".join(sentences), step, org)})
    return pairs, texts


# ---------------------------------------------------------------- eval sets


def _item_id(set_name: str, org: str, relation: str) -> str:
    slug = org.lower().replace(" ", "-")
    return f"{set_name}/{slug}/{relation}"


def _split(item_id: str, dev_share: float) -> str:
    bucket = int(hashlib.sha256(item_id.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return "dev" if bucket < dev_share else "private"


def _item(
    world: World,
    set_name: str,
    set_kind: str,
    set_step,
    org: str,
    relation: Relation,
    gold: str,
    year_step: int,
    asked_step: int,
    stable: bool = False,
) -> dict:
    """A split item. Undated world: the undated cloze, ``timestamp`` = the year its gold holds (``year_step``).
    Dated world: the cloze asked as of ``asked_step``'s year in the corpus's date form, which is then its
    ``timestamp`` (Outdated_k asks Updated_k's question, so its timestamp is step k's year)."""
    item_id = _item_id(set_name, org, relation.name)
    cloze = relation.cloze(relation.statements[0], org)
    timestamp = str(world.years[year_step if world.dates == "none" else asked_step])
    return {
        "id": item_id,
        "question": cloze if world.dates == "none" else dated(cloze, timestamp, world.dates, org, world.prefix_format),
        "answers": [gold],
        "set": set_kind,
        "step": set_step,
        "timestamp": timestamp,
        "split": _split(item_id, world.config.dev_share),
        "pair_id": f"{org}/{relation.name}/{set_step}" if set_kind in ("updated", "outdated") else None,
        "stable": stable,
        "base_question": relation.question.format(e=org),
        "extra": {"entity": org, "relation": relation.name},
    }


def eval_sets(world: World) -> dict[str, list[dict]]:
    """Unchanged, and New_k / Updated_k / Outdated_k for every step k >= 1 (docs/metrics.md#2-evolvingqa-splits)."""
    last = len(world.states) - 1
    sets: dict[str, list[dict]] = {"unchanged": []}
    for (org, rel), value in sorted(world.states[0].items()):
        if all(state[(org, rel)] == value for state in world.states):
            relation = RELATIONS_BY_NAME[rel]
            sets["unchanged"].append(
                _item(world, "unchanged", "unchanged", None, org, relation, value, last, 0, stable=True)
            )
    for step in range(1, len(world.states)):
        new_orgs = sorted(org for org, first in world.founded_at.items() if first == step)
        sets[f"new_{step}"] = [
            _item(
                world, f"new_{step}", "new", step, org, relation, world.states[step][(org, relation.name)], step, step
            )
            for org in new_orgs
            for relation in RELATIONS
        ]
        sets[f"updated_{step}"], sets[f"outdated_{step}"] = [], []
        for change in world.changes[step]:
            relation = RELATIONS_BY_NAME[change.relation]
            sets[f"updated_{step}"].append(
                _item(world, f"updated_{step}", "updated", step, change.entity, relation, change.new, step, step)
            )
            sets[f"outdated_{step}"].append(
                _item(world, f"outdated_{step}", "outdated", step, change.entity, relation, change.old, step - 1, step)
            )
    return sets


# ---------------------------------------------------------------- export


def write_world(world: World, out: Path) -> None:
    """Write the world as JSONL files (sorted keys, so the same seed gives byte-identical files)."""
    out.mkdir(parents=True, exist_ok=True)

    def dump(path: Path, rows) -> None:
        with path.open("w", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row, sort_keys=True, ensure_ascii=False) + "\n")

    for step in range(len(world.states)):
        pairs, texts = step_corpus(world, step)
        dump(out / f"train_step{step}_pairs.jsonl", pairs)
        dump(out / f"train_step{step}_text.jsonl", texts)
    for name, items in eval_sets(world).items():
        dump(out / f"eval_{name}.jsonl", items)
    meta = {
        "config": asdict(world.config),
        "years": world.years,
        "n_facts": [len(state) for state in world.states],
        "n_changes": [len(c) for c in world.changes],
    }
    (out / "world.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="Write the embedded evolving world as JSONL files.")
    parser.add_argument("--out", required=True, type=Path, help="output directory")
    for name, default in asdict(WorldConfig()).items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(default), default=default)
    args = vars(parser.parse_args(argv))
    out = args.pop("out")
    world = generate_world(WorldConfig(**args))
    write_world(world, out)
    print(f"wrote {len(world.states)} steps to {out}")


if __name__ == "__main__":
    main()
