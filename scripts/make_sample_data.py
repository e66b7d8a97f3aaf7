"""Regenerate ``data/evolvingqa_sample/``: a small EvolvingQA-layout release made from the embedded world.

    python scripts/make_sample_data.py [--out data/evolvingqa_sample]

The world's three yearly snapshots are labelled like the release's months: the initial full snapshot
``20230101`` and the diffs ``0102`` and ``0203``. Written files (all CSV, as the release):

* ``twiki_diffsets/wikipedia_<STEP>.csv`` — masked-entity pairs ``input`` (entity replaced by
  ``<extra_id_0>``), ``output``: the world's undated corpus, every fact in five wordings of its bank;
* ``finetune_qa/unchanged_eval.csv`` and ``unchanged_train.csv`` — the Unchanged facts split in two halves
  (eval / QA-adaptation train; no question in both), ``question``, ``question_time``, ``answer``;
* ``finetune_qa/new_<STEP>.csv`` — ``question``, ``question_time``, ``answer``;
* ``finetune_qa/edited_<STEP>.csv`` — ``question``, ``question_time``, ``answer1`` (outdated), ``answer2``.

The same world seed gives byte-identical files.
"""

from __future__ import annotations

import argparse
import csv
import io
from pathlib import Path

from evolve_train.config import WorldConfig
from evolve_train.data.relations import RELATIONS_BY_NAME
from evolve_train.data.world import MASK, eval_sets, generate_world, step_corpus

SAMPLE_WORLD = WorldConfig(
    seed=0,
    n_entities=30,
    n_steps=3,
    change_share=0.25,
    new_entities_per_step=6,
    n_people=20,
    n_cities=20,
    start_year=2018,
    dates="none",
    docs_per_entity=5,
)
"""Undated, as the release's Wikipedia diffs; each fact in five wordings (knowledge augmentation)."""
STEP_NAMES = ["20230101", "0102", "0203"]
MONTHS = ["January", "February", "March"]
SENTINEL = "<extra_id_0>"


def _write_csv(path: Path, header: list[str], rows: list[list[str]]) -> None:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(buffer.getvalue(), encoding="utf-8")


def _questions(item: dict, step: int) -> tuple[str, str]:
    """(question, time-prompted question) of a world item."""
    relation = RELATIONS_BY_NAME[item["extra"]["relation"]]
    question = relation.question.format(e=item["extra"]["entity"])
    return question, f"As of {MONTHS[step]} 2023, {question[0].lower()}{question[1:]}"


def make_sample(out: Path) -> list[Path]:
    world = generate_world(SAMPLE_WORLD)
    written = []
    for step, name in enumerate(STEP_NAMES):
        pairs, _ = step_corpus(world, step)
        path = out / "twiki_diffsets" / f"wikipedia_{name}.csv"
        _write_csv(path, ["input", "output"], [[p["input"].replace(MASK, SENTINEL), p["output"]] for p in pairs])
        written.append(path)
    sets = eval_sets(world)
    last = len(STEP_NAMES) - 1
    unchanged = [[*_questions(item, last), item["answers"][0]] for item in sets["unchanged"]]
    for name, rows in (("unchanged_eval", unchanged[0::2]), ("unchanged_train", unchanged[1::2])):
        path = out / "finetune_qa" / f"{name}.csv"
        _write_csv(path, ["question", "question_time", "answer"], rows)
        written.append(path)
    for step in range(1, len(STEP_NAMES)):
        name = STEP_NAMES[step]
        new = [[*_questions(item, step), item["answers"][0]] for item in sets[f"new_{step}"]]
        path = out / "finetune_qa" / f"new_{name}.csv"
        _write_csv(path, ["question", "question_time", "answer"], new)
        written.append(path)
        edited = [
            [*_questions(new_item, step), old_item["answers"][0], new_item["answers"][0]]
            for new_item, old_item in zip(sets[f"updated_{step}"], sets[f"outdated_{step}"])
        ]
        path = out / "finetune_qa" / f"edited_{name}.csv"
        _write_csv(path, ["question", "question_time", "answer1", "answer2"], edited)
        written.append(path)
    return written


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "data" / "evolvingqa_sample")
    args = parser.parse_args(argv)
    written = make_sample(args.out)
    total = sum(path.stat().st_size for path in written)
    print(f"wrote {len(written)} files ({total / 1024:.1f} KB) to {args.out}")


if __name__ == "__main__":
    main()
