"""Data a test writes: QA releases in other layouts, training files as users have them."""

import json
from pathlib import Path
from evolve_train.config import WorldConfig
from evolve_train.data.relations import RELATIONS_BY_NAME
from evolve_train.data.world import generate_world, step_corpus
import csv
from evolve_train.data.loaders.common import read_training_file
from evolve_train.data.schema import TimeStep


FIELDS = {"id": "qid", "question": "edited_question", "answers": "gold", "timestamp": "asked_on"}


DATES = ["March 05, 2018", "2019-03-05"]


def world_release(root: Path) -> dict:
    """A two-step world written as generic timestamped QA in a non-default layout; returns counts."""
    world = generate_world(WorldConfig(n_entities=8, new_entities_per_step=3, n_people=8, n_cities=8, n_steps=2))
    for step, year in enumerate(world.years):
        write_jsonl(root / f"train_{year}.jsonl", step_corpus(world, step)[0])
    rows, counts = [], {"unchanged": 0, "new": 0, "updated": 0}
    for (org, rel), value in sorted(world.states[1].items()):
        question = RELATIONS_BY_NAME[rel].question.format(e=org)
        old = world.states[0].get((org, rel))

        def row(k, gold, when):
            return {
                "qid": f"{org}/{rel}/{k}",
                "edited_question": question,
                "gold": [gold, gold.upper()],
                "asked_on": when,
            }

        if old is None:
            rows.append(row(1, value, DATES[1]))
            counts["new"] += 1
        elif old != value:
            rows += [row(0, old, DATES[0]), row(1, value, DATES[1])]
            counts["updated"] += 1
        else:
            rows.append(row(0, value, DATES[0]))
            counts["unchanged"] += 1
    write_jsonl(root / "qa.jsonl", rows)
    return counts


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def write_jsonl(path: Path, rows) -> Path:
    return write(path, "".join(json.dumps(row) + "\n" for row in rows))


def write_csv(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["input", "output"])
        writer.writeheader()
        writer.writerows({"input": r["input"], "output": r["output"]} for r in rows)
    return path


def issue_layout(root: Path) -> list[str]:
    """Masked pairs (CSV) for one year and documents (JSONL) for the next, as docs/data.md's example."""
    root.mkdir(parents=True, exist_ok=True)
    world_release(root)  # qa.jsonl over the two years (and JSONL pairs we do not use)
    world = generate_world(WorldConfig(n_entities=8, new_entities_per_step=3, n_people=8, n_cities=8, n_steps=2))
    write_csv(root / "train_2018.csv", step_corpus(world, 0)[0])
    write_jsonl(root / "docs_2019.jsonl", step_corpus(world, 1)[1])
    return [
        "data=temporal_qa",
        f"data.root={root}",
        "+data.train_files.2018=[train_2018.csv]",
        "+data.train_files.2019=[docs_2019.jsonl]",
        "data.eval_files=[qa.jsonl]",
        *[f"data.fields.{key}={source}" for key, source in FIELDS.items()],
        "trainer.epochs_step0=1",
        "trainer.epochs=1",
        "eval.max_new_tokens=4",
        "eval.evaluators=[splits,slices]",
    ]


DOCS = [f"Document {k} says that the river {k % 7} flows past town {k * 3} in spring." * (1 + k % 4) for k in range(40)]


def step_of(path: Path, cache_dir=None) -> TimeStep:
    pairs, texts = read_training_file(path, cache_dir)
    return TimeStep(index=0, name="2019", pairs=pairs, texts=texts)
