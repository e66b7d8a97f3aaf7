"""Training files as users have them (files, folders, globs; ``.txt`` documents), the objective of each step
(``data.objective=auto``; an explicit objective that does not fit a step's data) and steps without data: what
cannot train stops with an error naming the step, never a spin. Every test that builds a run has a deadline of
its own (the failure mode was a step that looped forever without batches)."""

from __future__ import annotations

from pathlib import Path

import pytest

from evolve_train.config import DataConfig
from evolve_train.data.objective import check_objectives, corpus_objective, slice_objective, step_objective
from evolve_train.data.schema import TimeStep, Timeline
from evolve_train.data.timeline import build_timeline
from evolve_train.errors import ConfigError, DataError
from evolve_train.run import train
from helpers import deadline, tiny_cfg
from helpers.data import issue_layout, write, write_csv, write_jsonl


PAIRS = [
    {"input": "The CEO of Acme is <mask>.", "output": "Ann Lee"},
    {"input": "Bolt is in <mask>.", "output": "Oslo"},
]


TEXTS = [{"text": "Acme named Cy Diaz its CEO."}, {"text": "Bolt moved to Paris."}]


def qa_file(root: Path) -> Path:
    return write_jsonl(
        root / "qa.jsonl",
        [
            {"id": "q0", "question": "Who is the CEO of Acme?", "answers": "Ann Lee", "timestamp": "2019"},
            {"id": "q1", "question": "Where is Bolt?", "answers": "Oslo", "timestamp": "2019"},
        ],
    )


def timeline_of(root: Path, train_files: dict, **settings) -> Timeline:
    settings.setdefault("heldout_share", 0.0)
    return build_timeline(
        DataConfig(kind="temporal_qa", root=str(root), train_files=train_files, eval_files=["qa.jsonl"], **settings)
    )


def step(index=0, pairs=(), texts=(), files=()) -> TimeStep:
    return TimeStep(index=index, name=str(2019 + index), pairs=list(pairs), texts=list(texts), files=list(files))


def test_folders_globs_and_txt_files_become_each_steps_corpus(tmp_path):
    qa_file(tmp_path)
    write(tmp_path / "2019" / "b.txt", "Bolt is in Oslo.\n\nBolt makes bikes.\n")
    write(tmp_path / "2019" / "a.txt", "\ufeffAcme is led by Ann Lee.\n")
    write(tmp_path / "2019" / "notes.md", "not a training file")
    write(tmp_path / "2019" / ".hidden.txt", "left out")
    write(tmp_path / "2019" / "deeper" / "c.txt", "not read: a folder is not recursive")
    write_jsonl(tmp_path / "2019" / "more.jsonl", [{"text": "Acme is in Rome.", "doc_id": "acme-rome"}])
    write(tmp_path / "2020" / "x" / "d.txt", "Acme named Cy Diaz its CEO.")
    write(tmp_path / "2020" / "e.txt", "Bolt moved to Paris.")
    write_csv(tmp_path / "pairs_2021.csv", PAIRS)
    timeline = timeline_of(
        tmp_path,
        {"2019": ["2019"], "2020": ["2020/**/*.txt"], "2021": ["pairs_2021.csv", "pairs_*.csv", "pairs_2021.csv"]},
    )
    first, second, third = timeline.steps
    assert [(d["doc_id"], d["text"]) for d in first.texts] == [
        ("a", "Acme is led by Ann Lee."),  # sorted by name; the BOM and the surrounding whitespace dropped
        ("b", "Bolt is in Oslo.\n\nBolt makes bikes."),  # one document per file by default
        ("acme-rome", "Acme is in Rome."),
    ]
    assert [Path(f).name for f in first.files] == ["a.txt", "b.txt", "more.jsonl"]
    assert [d["doc_id"] for d in second.texts] == ["e", "x/d"]  # named relative to the glob's fixed part
    assert list(third.pairs) == PAIRS and len(third.files) == 1  # a file named twice is read once
    assert not first.pairs and not second.pairs and not third.texts


def test_paragraph_documents(tmp_path):
    qa_file(tmp_path)
    write(tmp_path / "2019" / "a.txt", "First block,\nstill first.\n\n\n  \nSecond block.\r\n\r\nThird.")
    timeline = timeline_of(tmp_path, {"2019": ["2019"]}, txt_documents="paragraph")
    assert [(d["doc_id"], d["text"]) for d in timeline.steps[0].texts] == [
        ("a#1", "First block,\nstill first."),
        ("a#2", "Second block."),
        ("a#3", "Third."),
    ]
    whole = timeline_of(tmp_path, {"2019": ["2019"]})
    assert len(whole.steps[0].texts) == 1  # the default: the file is one document
    with pytest.raises(ConfigError, match="data.txt_documents must be one of file, paragraph"):
        DataConfig(txt_documents="sentence")


def test_the_txt_split_is_part_of_the_corpus_cache_key(tmp_path):
    qa_file(tmp_path)
    write(tmp_path / "2019" / "a.txt", "One.\n\nTwo.")
    cache = tmp_path / "cache"
    whole = timeline_of(tmp_path, {"2019": ["2019"]}, cache_dir=str(cache))
    blocks = timeline_of(tmp_path, {"2019": ["2019"]}, cache_dir=str(cache), txt_documents="paragraph")
    again = timeline_of(tmp_path, {"2019": ["2019"]}, cache_dir=str(cache), txt_documents="paragraph")
    assert (len(whole.steps[0].texts), len(blocks.steps[0].texts), len(again.steps[0].texts)) == (1, 2, 2)
    assert whole.steps[0].texts.fingerprint != blocks.steps[0].texts.fingerprint
    assert len(list((cache / "corpora").glob("[!.]*[!k]"))) == 2  # two entries (and their locks)


@pytest.mark.parametrize(
    "entry, needle",
    [
        ("empty_folder", "step 2019: folder 'empty_folder' holds no training file (.txt, .jsonl, .csv"),
        ("nothing/*.txt", "step 2019: 'nothing/*.txt' matches no training file"),
        (
            "empty_folder/*.md",
            "step 2019: 'empty_folder/*.md' matches no training file (.txt, .jsonl, .csv, .jsonl.gz, .jsonl.zst, .parquet); it matches 1 other paths",
        ),
        ("absent.jsonl", "missing file: training file of step 2019 not found"),
    ],
)
def test_an_entry_that_matches_nothing_names_the_step_and_the_pattern(tmp_path, entry, needle):
    qa_file(tmp_path)
    write(tmp_path / "empty_folder" / "readme.md", "no training file here")
    with pytest.raises(DataError) as caught:
        timeline_of(tmp_path, {"2019": [entry]})
    message = str(caught.value)
    assert needle in message and "field 'data.train_files.2019'" in message
    assert str(tmp_path / entry) in message


def test_a_step_whose_files_hold_no_record_is_refused_naming_them(tmp_path):
    qa_file(tmp_path)
    write(tmp_path / "2019" / "a.txt", "Acme is led by Ann Lee.")
    write(tmp_path / "2020" / "blank.txt", "\n  \n")
    write(tmp_path / "2020" / "empty.txt", "")
    with pytest.raises(DataError) as caught:
        timeline_of(tmp_path, {"2019": ["2019"], "2020": ["2020"]})
    message = str(caught.value)
    assert "step 2020: its 2 training file(s) hold no record" in message
    assert "blank.txt" in message and "empty.txt" in message and "data.train_files.2020" in message


def test_auto_resolves_per_step_from_the_data():
    pairs, texts, mixed, empty = step(0, PAIRS), step(1, texts=TEXTS), step(2, PAIRS, TEXTS), step(3)
    assert step_objective("auto", pairs) == "masked_entity" and step_objective("auto", texts) == "clm"
    assert corpus_objective("auto", mixed) is None and corpus_objective("auto", empty) is None
    assert corpus_objective("clm", pairs) == "clm"  # explicit: as given (step_objective checks it fits)
    with pytest.raises(ConfigError, match=r"time step 2 \(2021\) holds both masked-entity pairs \(2\) and documents"):
        step_objective("auto", mixed)
    with pytest.raises(ConfigError, match="set data.objective=masked_entity .* or data.objective=clm"):
        step_objective("auto", mixed)
    with pytest.raises(ConfigError, match=r"time step 3 \(2022\) has no training data"):
        step_objective("auto", empty)
    assert step_objective("masked_entity", mixed) == "masked_entity"  # the embedded world's case
    assert step_objective("clm", mixed) == "clm"


def test_an_explicit_objective_that_does_not_fit_names_the_step_its_files_and_the_fix():
    texts = step(1, texts=TEXTS, files=["/data/docs_2020.jsonl"])
    with pytest.raises(ConfigError) as caught:
        step_objective("masked_entity", texts)
    message = str(caught.value)
    assert "data.objective=masked_entity, but time step 1 (2020) (files: /data/docs_2020.jsonl)" in message
    assert "no masked-entity pairs, only 2 documents: set data.objective=auto" in message
    with pytest.raises(ConfigError, match=r"data.objective=clm, but time step 0 \(2019\) has no documents"):
        step_objective("clm", step(0, PAIRS))
    timeline = Timeline(steps=[step(0, PAIRS), texts], eval_sets=[])
    with pytest.raises(ConfigError, match="data.objective=masked_entity, but time step 1"):
        check_objectives(DataConfig(kind="synthetic_world", objective="masked_entity"), timeline)
    assert check_objectives(DataConfig(kind="synthetic_world"), timeline) == ["masked_entity", "clm"]


def test_check_objectives_refuses_documents_for_t5_and_replay_across_objectives():
    cfg = tiny_cfg("/nonexistent", "data.objective=auto")
    from omegaconf import OmegaConf

    run = OmegaConf.to_object(cfg)
    timeline = Timeline(steps=[step(0, PAIRS), step(1, texts=TEXTS)], eval_sets=[])
    assert check_objectives(run, timeline) == ["masked_entity", "clm"]
    run.model.arch = "t5"
    with pytest.raises(ConfigError, match=r"a seq2seq model \(model.arch=t5\) trains on masked-entity pairs"):
        check_objectives(run, timeline)
    run.model.arch = "gpt2"
    run.method.strategies = ["full", "replay"]
    with pytest.raises(ConfigError, match="method.strategies has replay, which mixes earlier steps' rows"):
        check_objectives(run, timeline)
    same = Timeline(steps=[step(0, texts=TEXTS), step(1, texts=TEXTS)], eval_sets=[])
    assert check_objectives(run, same) == ["clm", "clm"]


def test_held_out_slices_follow_each_steps_objective(tmp_path):
    qa_file(tmp_path)
    write_csv(tmp_path / "pairs.csv", PAIRS * 5)
    write_jsonl(tmp_path / "docs.jsonl", TEXTS * 5)
    timeline = timeline_of(tmp_path, {"2019": ["pairs.csv"], "2020": ["docs.jsonl"]}, heldout_share=0.2)
    first, second = timeline.steps
    assert (len(first.pairs), len(first.heldout), len(second.texts), len(second.heldout)) == (8, 2, 8, 2)
    assert all("input" in record for record in first.heldout) and all("text" in r for r in second.heldout)
    assert [slice_objective("auto", s) for s in timeline.steps] == ["masked_entity", "clm"]
    assert slice_objective("masked_entity", second) == "masked_entity"  # explicit: as before


def test_the_demo_world_keeps_its_objective():
    from omegaconf import OmegaConf

    assert DataConfig().objective == "auto"  # the schema's default
    run = OmegaConf.to_object(tiny_cfg("/nonexistent"))
    assert run.data.kind == "synthetic_world" and run.data.objective == "masked_entity"  # configs/data: as before
    temporal = OmegaConf.to_object(tiny_cfg("/nonexistent", "data=temporal_qa"))
    assert temporal.data.objective == "auto"
    world = build_timeline(run.data)
    assert all(len(s.pairs) and len(s.texts) for s in world.steps)  # two corpora: auto would refuse, so explicit
    assert check_objectives(run, world) == ["masked_entity"] * len(world.steps)


def test_pairs_then_documents_under_masked_entity_stop_with_the_config_error(tmp_path):
    run_dir = tmp_path / "run"
    with deadline(180), pytest.raises(ConfigError) as caught:
        train(tiny_cfg(run_dir, *issue_layout(tmp_path / "data"), "data.objective=masked_entity"))
    message = str(caught.value)
    assert "data.objective=masked_entity, but time step 1 (2019)" in message and "docs_2019.jsonl" in message
    assert "set data.objective=auto" in message
