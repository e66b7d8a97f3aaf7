"""Training files as users have them (files, folders, globs; ``.txt`` documents), the objective of each step
(``data.objective=auto``; an explicit objective that does not fit a step's data) and steps without data: what
cannot train stops with an error naming the step, never a spin. Every test that builds a run has a deadline of
its own (the failure mode was a step that looped forever without batches)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path


from helpers.dyknow import write_fixture
from evolve_train.errors import ConfigError, DataError
from evolve_train.run import train
from helpers import deadline, tiny_cfg
from helpers.data import issue_layout, write, write_jsonl
from helpers.processes import ROOT


SAMPLE = ROOT / "data" / "evolvingqa_sample"


def qa_file(root: Path) -> Path:
    return write_jsonl(
        root / "qa.jsonl",
        [
            {"id": "q0", "question": "Who is the CEO of Acme?", "answers": "Ann Lee", "timestamp": "2019"},
            {"id": "q1", "question": "Where is Bolt?", "answers": "Oslo", "timestamp": "2019"},
        ],
    )


def test_pairs_then_documents_train_both_steps_under_the_default_objective(tmp_path):
    run_dir = tmp_path / "run"
    with deadline(300):
        train(tiny_cfg(run_dir, *issue_layout(tmp_path / "data")))
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert (run_dir / "steps" / "0").is_dir() and (run_dir / "steps" / "1").is_dir()
    splits = {(r["checkpoint"], r["set_name"]) for r in rows if r.get("group") == "splits"}
    assert (1, "updated_1") in splits
    slices = {(r["checkpoint"], r["set_name"]) for r in rows if r.get("group") == "slices"}
    assert {(1, "slice_0"), (1, "slice_1")} <= slices  # each slice encoded in its step's objective


def test_no_loader_lets_a_step_without_data_reach_training(tmp_path):
    """A step with nothing to train, per loader: each stops before its first optimizer step of that step."""
    failures = {}
    # temporal_qa: a year of blank .txt files
    data = tmp_path / "temporal_qa"
    qa_file(data)
    write(data / "2019" / "a.txt", "Acme is led by Ann Lee.")
    write(data / "2020" / "blank.txt", "\n\n")
    # evolvingqa: a diff set of the release with a header and no rows; another whose diff set is documents
    empty_release, texts_release = tmp_path / "evolvingqa_empty", tmp_path / "evolvingqa_texts"
    for release in (empty_release, texts_release):
        shutil.copytree(SAMPLE, release)
    write((empty_release / "twiki_diffsets" / "wikipedia_0102.csv"), "input,output\n")
    (texts_release / "twiki_diffsets" / "wikipedia_0102.csv").unlink()
    write((texts_release / "twiki_diffsets" / "wikipedia_0102.csv"), "text\nAcme moved to Rome.\n")
    dyknow = write_fixture(tmp_path / "dyknow")
    events = write_jsonl(
        tmp_path / "events" / "events.jsonl",
        [
            {
                "id": "ev1",
                "dimension": "knowledge_evolution",
                "knowledge_event": "Acme changes CEO",
                "questions": [{"text": "Who leads Acme?", "timestamp": "2019", "correct": "Ann Lee"}],
            }
        ],
    )
    cases = {
        "temporal_qa": (
            DataError,
            "step 2020: its 1 training file(s) hold no record",
            [
                "data=temporal_qa",
                f"data.root={data}",
                "+data.train_files.2019=[2019]",
                "+data.train_files.2020=[2020]",
                "data.eval_files=[qa.jsonl]",
            ],
        ),
        "evolvingqa (no rows)": (
            DataError,
            "empty file: no rows after the header",
            ["data=evolvingqa", f"data.root={empty_release}"],
        ),
        "evolvingqa (documents, masked_entity)": (
            ConfigError,
            "data.objective=masked_entity, but time step 1 (0102)",
            ["data=evolvingqa", f"data.root={texts_release}"],
        ),
        "dyknow (a cut where nothing changed)": (
            ConfigError,
            "has no training data",
            ["data=dyknow", f"data.root={dyknow}", "data.dyknow.cuts=[2005,2005-06]"],
        ),
        "evolvebench (events, no training files)": (
            ConfigError,
            "data.train_files: no training files",
            ["data=temporal_qa", f"data.root={events.parent}", "data.eval_files=[events.jsonl]"],
        ),
        "synthetic_world (a step without changes)": (
            ConfigError,
            "has no training data",
            ["data.world.seed=2", "data.world.change_share=0", "data.world.new_entities_per_step=0"],
        ),
    }
    for name, (error, needle, overrides) in cases.items():
        run_dir = tmp_path / "runs" / name.split()[0]
        with deadline(180):
            try:
                train(tiny_cfg(run_dir, *overrides, "trainer.epochs_step0=1", "trainer.epochs=1"))
            except error as err:
                if needle not in str(err):
                    failures[name] = f"wrong message: {err}"
            except Exception as err:  # noqa: BLE001 (collected, reported together)
                failures[name] = f"{type(err).__name__}: {err}"
            else:
                failures[name] = "trained"
    assert not failures, failures
