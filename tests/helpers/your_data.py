"""A small corpus in the layout of docs/your_data.md: a folder per year of ``.txt`` documents and a dated QA
JSONL, made from the embedded world (fictional organisations whose facts change from year to year).

    python tests/helpers/your_data.py DIR      # writes DIR/2018/*.txt, DIR/2019/*.txt, DIR/2020/*.txt, DIR/qa.jsonl

The first year's folder holds every organisation's documents, each later year's the documents of the
organisations that changed or were founded that year. Each fact is asked once per year its value begins
(``timestamp``: the year), so a changed fact gives an Updated item (and its Outdated twin) by the automatic
pairing of the same question (docs/data.md, "Generic timestamped QA").
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from evolve_train.config import WorldConfig
from evolve_train.data.relations import RELATIONS_BY_NAME
from evolve_train.data.world import generate_world, step_corpus

# A shipped recipe at a size a CPU trains in seconds: the same recipe, overrides for size only.
SHRINK = [
    "model.name_or_path=null",
    "model.n_layer=1",
    "model.n_embd=32",
    "model.n_head=2",
    "model.n_kv_head=1",
    "model.n_inner=64",
    "model.n_positions=128",
    "model.vocab_size=300",
    "trainer.seq_len=64",
    "trainer.tokens_per_batch=256",
    "trainer.tokens_per_step0=1024",
    "trainer.tokens_per_step=512",
    "trainer.warmup_steps=1",
    "trainer.num_threads=1",
    "eval.heldout_text=[general]",
    "logger.backends=[disk]",
]
"""Size only: a tiny model built from config (no download), rows of 64 tokens, about one optimizer step a time step."""
YEARS = ("2018", "2019", "2020")
"""The yearly folders write_your_data writes."""


WORLD = WorldConfig(seed=0, n_entities=10, n_steps=3, new_entities_per_step=2, n_people=10, n_cities=10, dates="inline")


def write_your_data(root: Path, world_config: WorldConfig = WORLD) -> dict:
    """Write the layout under ``root``; returns the counts (documents per year, QA items)."""
    root = Path(root)
    world = generate_world(world_config)
    counts: dict = {"documents": {}, "items": 0}
    for step, year in enumerate(world.years):
        folder = root / str(year)
        folder.mkdir(parents=True, exist_ok=True)
        texts = step_corpus(world, step)[1]
        for doc in texts:
            name = doc["doc_id"].replace("#", "-").replace(" ", "_")
            (folder / f"{name}.txt").write_text(doc["text"] + "\n", encoding="utf-8")
        counts["documents"][str(year)] = len(texts)
    rows = []
    for step, year in enumerate(world.years):
        before = world.states[step - 1] if step else {}
        for (org, relation), value in sorted(world.states[step].items()):
            if step and before.get((org, relation)) == value:
                continue  # asked in the year its value began
            rows.append(
                {
                    "id": f"{org}/{relation}/{year}",
                    "question": RELATIONS_BY_NAME[relation].question.format(e=org),
                    "answers": [value],
                    "timestamp": str(year),
                }
            )
    (root / "qa.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    counts["items"] = len(rows)
    counts["years"] = [str(year) for year in world.years]
    return counts


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/helpers/your_data.py DIR")
    print(json.dumps(write_your_data(Path(sys.argv[1]))))
