"""Malformed input fails in ``build_timeline``, before the run dir exists, with one DataError naming
the file and the line (or row) and field. One test per failure kind and format."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from evolve_train.errors import ConfigError, DataError
from evolve_train.run import train
from helpers import tiny_cfg
from helpers.processes import ROOT

SAMPLE = ROOT / "data" / "evolvingqa_sample"


@pytest.fixture
def release(tmp_path: Path) -> Path:
    root = tmp_path / "release"
    shutil.copytree(SAMPLE, root)
    return root


def qa(root: Path, name: str) -> Path:
    return root / "finetune_qa" / name


def train_file(root: Path, step: str) -> Path:
    return root / "twiki_diffsets" / f"wikipedia_{step}.csv"


def rewrite(path: Path, edit) -> None:
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    path.write_text("".join(edit(lines)), encoding="utf-8")


def fails(tmp_path: Path, *overrides: str, error=DataError) -> str:
    """Run training, expect ``error``, and check that nothing was written to the run dir."""
    run_dir = tmp_path / "run"
    with pytest.raises(error) as info:
        train(tiny_cfg(run_dir, *overrides))
    assert not run_dir.exists(), "bad input must fail before the run dir is created"
    assert not (run_dir / "steps").exists() and not (run_dir / "metrics.jsonl").exists()
    return str(info.value)


def fails_release(tmp_path: Path, root: Path, *overrides: str, error=DataError) -> str:
    return fails(tmp_path, "data=evolvingqa", f"data.root={root}", *overrides, error=error)


# ------------------------------------------------------------------ EvolvingQA layout (CSV)


def test_missing_root_directory(tmp_path):
    message = fails_release(tmp_path, tmp_path / "nowhere")
    assert "nowhere" in message and "does not exist" in message


def test_missing_training_files(tmp_path, release):
    shutil.rmtree(release / "twiki_diffsets")
    message = fails_release(tmp_path, release)
    assert "wikipedia_<STEP>" in message and "missing file" in message


def test_missing_unchanged_eval_file(tmp_path, release):
    qa(release, "unchanged_eval.csv").unlink()
    message = fails_release(tmp_path, release)
    assert "unchanged_eval.csv" in message and "missing file" in message


def test_missing_column_in_training_csv(tmp_path, release):
    rewrite(train_file(release, "0102"), lambda lines: ["input,entity\n", *lines[1:]])
    message = fails_release(tmp_path, release)
    assert "wikipedia_0102.csv, line 1, field 'output'" in message and "missing column" in message


def test_missing_column_in_qa_csv(tmp_path, release):
    rewrite(qa(release, "new_0102.csv"), lambda lines: ["question,question_time,gold\n", *lines[1:]])
    message = fails_release(tmp_path, release)
    assert "new_0102.csv, line 1, field 'answer'" in message


def test_wrong_type_of_answer(tmp_path, release):
    rewrite(qa(release, "new_0203.csv"), lambda lines: [*lines[:3], 'Who?,"As of now, who?","[1, 2]"\n', *lines[4:]])
    message = fails_release(tmp_path, release)
    assert "new_0203.csv, line 4, field 'answer'" in message and "wrong type" in message


def test_empty_split(tmp_path, release):
    rewrite(qa(release, "new_0203.csv"), lambda lines: lines[:1])
    message = fails_release(tmp_path, release)
    assert "new_0203.csv, line 1" in message and "empty file" in message


def test_empty_training_file(tmp_path, release):
    rewrite(train_file(release, "0203"), lambda lines: lines[:1])
    message = fails_release(tmp_path, release)
    assert "wikipedia_0203.csv, line 1" in message and "empty file" in message


def test_duplicate_ids(tmp_path, release):
    def add_ids(lines):
        return ["id," + lines[0]] + [f"{'u1' if k < 3 else f'u{k}'},{line}" for k, line in enumerate(lines[1:], 1)]

    rewrite(qa(release, "unchanged_eval.csv"), add_ids)
    message = fails_release(tmp_path, release)
    assert "unchanged_eval.csv, line 3, field 'id'" in message and "duplicate id 'u1' (lines 2 and 3)" in message


def test_updated_item_without_outdated_answer(tmp_path, release):
    row = 'Who is the director of Qux?,"As of February 2023, who is the director of Qux?",,Nowhere\n'
    rewrite(qa(release, "edited_0102.csv"), lambda lines: [*lines[:4], row, *lines[4:]])
    message = fails_release(tmp_path, release)
    assert "edited_0102.csv, line 5, field 'answer1'" in message and "outdated answer" in message


def test_unparseable_timestamp(tmp_path, release):
    def add_timestamps(lines):
        stamps = ["2023-03-01"] * len(lines)
        stamps[6] = "sometime in spring"
        return [lines[0].rstrip("\n") + ",timestamp\n"] + [
            line.rstrip("\n") + f",{stamp}\n" for line, stamp in zip(lines[1:], stamps)
        ]

    rewrite(qa(release, "unchanged_eval.csv"), add_timestamps)
    message = fails_release(tmp_path, release)
    assert "unchanged_eval.csv, line 8, field 'timestamp'" in message and "unparseable timestamp" in message


def test_steps_out_of_order(tmp_path, release):
    message = fails_release(tmp_path, release, "data.steps=[20230101,'0203','0102']")
    assert "wikipedia_0203.csv" in message and "field 'data.steps'" in message and "out of order" in message


def test_missing_step_in_chain(tmp_path, release):
    train_file(release, "0102").unlink()
    message = fails_release(tmp_path, release)
    assert "wikipedia_0203.csv" in message and "starts at month 02" in message


def test_non_utf8_bytes_in_training_csv(tmp_path, release):
    path = train_file(release, "0102")
    lines = path.read_bytes().splitlines(keepends=True)
    lines[9] = lines[9].replace(b"is", b"\xff\xfe", 1)
    path.write_bytes(b"".join(lines))
    message = fails_release(tmp_path, release)
    assert "wikipedia_0102.csv, line 10" in message and "not valid UTF-8" in message


def test_non_utf8_bytes_in_qa_csv(tmp_path, release):
    path = qa(release, "edited_0203.csv")
    lines = path.read_bytes().splitlines(keepends=True)
    lines[2] = b"\xc3(" + lines[2]
    path.write_bytes(b"".join(lines))
    message = fails_release(tmp_path, release)
    assert "edited_0203.csv, line 3" in message and "not valid UTF-8" in message


def test_malformed_csv_row(tmp_path, release):
    rewrite(qa(release, "new_0102.csv"), lambda lines: [*lines[:5], "a,b,c,d,e\n", *lines[5:]])
    message = fails_release(tmp_path, release)
    assert "new_0102.csv, line 6" in message and "5 cells" in message


def test_training_input_without_mask(tmp_path, release):
    rewrite(train_file(release, "20230101"), lambda lines: [*lines[:7], "No mask here.,Entity\n", *lines[7:]])
    message = fails_release(tmp_path, release)
    assert "wikipedia_20230101.csv, line 8, field 'input'" in message and "no mask token" in message


def test_empty_question(tmp_path, release):
    rewrite(qa(release, "unchanged_eval.csv"), lambda lines: [*lines[:2], ",,Somewhere\n", *lines[2:]])
    message = fails_release(tmp_path, release)
    assert "unchanged_eval.csv, line 3, field 'question'" in message


def test_qa_set_for_a_step_without_training_data(tmp_path, release):
    shutil.copy(qa(release, "new_0203.csv"), qa(release, "new_0304.csv"))
    message = fails_release(tmp_path, release)
    assert "new_0304.csv" in message and "field 'step'" in message and "wikipedia_0304" in message


def test_two_training_files_for_one_step(tmp_path, release):
    shutil.copy(train_file(release, "0102"), release / "twiki_diffsets" / "wikipedia_0102_t5_small.csv")
    message = fails_release(tmp_path, release)
    assert "wikipedia_0102" in message and "two training files for step 0102" in message


def test_prompt_template_with_unknown_field(tmp_path, release):
    message = fails_release(tmp_path, release, "data.prompt_template='{question} ({year})'", error=ConfigError)
    assert "'year'" in message and "unchanged/L2" in message


# ------------------------------------------------------------------ generic timestamped QA (JSONL)


def _write_jsonl(path: Path, rows) -> Path:
    path.write_text(
        "".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows), encoding="utf-8"
    )
    return path


GOOD_ITEMS = [
    {
        "id": "a1",
        "question": "Who leads Acme?",
        "answers": ["Ann Lee"],
        "timestamp": "March 5, 2018",
        "pair_id": "acme",
    },
    {
        "id": "a2",
        "question": "Who leads Acme?",
        "answers": ["Bo Chan", "B. Chan"],
        "timestamp": "2019-03-05",
        "pair_id": "acme",
    },
    {"id": "z1", "question": "When was Zeta founded?", "answers": "2019", "timestamp": "2019-06"},
]


@pytest.fixture
def temporal(tmp_path: Path) -> Path:
    root = tmp_path / "tq"
    root.mkdir()
    _write_jsonl(root / "t2018.jsonl", [{"input": "Acme is led by <mask>.", "output": "Ann Lee"}])
    _write_jsonl(root / "t2019.jsonl", [{"text": "Acme is led by Bo Chan. Zeta was founded in 2019."}])
    _write_jsonl(root / "qa.jsonl", GOOD_ITEMS)
    return root


def fails_temporal(tmp_path: Path, root: Path, *overrides: str, eval_file: str = "qa.jsonl", error=DataError) -> str:
    return fails(
        tmp_path,
        "data=temporal_qa",
        f"data.root={root}",
        "+data.train_files.2018=[t2018.jsonl]",
        "+data.train_files.2019=[t2019.jsonl]",
        f"data.eval_files=[{eval_file}]",
        *overrides,
        error=error,
    )


def test_temporal_fixture_is_valid(tmp_path, temporal):
    from evolve_train.config import DataConfig
    from evolve_train.data.timeline import build_timeline

    timeline = build_timeline(
        DataConfig(
            kind="temporal_qa",
            root=str(temporal),
            eval_files=["qa.jsonl"],
            train_files={"2018": ["t2018.jsonl"], "2019": ["t2019.jsonl"]},
        )
    )
    assert [s.name for s in timeline.eval_sets] == ["new_1", "updated_1", "outdated_1", "paired_1"]


def test_jsonl_malformed_line(tmp_path, temporal):
    _write_jsonl(temporal / "qa.jsonl", [GOOD_ITEMS[0], '{"id": "x", "question": "Who?", answers: []}'])
    message = fails_temporal(tmp_path, temporal)
    assert "qa.jsonl, line 2" in message and "malformed JSON" in message


def test_jsonl_non_utf8(tmp_path, temporal):
    path = _write_jsonl(temporal / "qa.jsonl", GOOD_ITEMS)
    path.write_bytes(path.read_bytes().replace(b"Zeta", b"Z\xe9ta"))
    message = fails_temporal(tmp_path, temporal)
    assert "qa.jsonl, line 3" in message and "not valid UTF-8" in message


def test_jsonl_missing_field_through_mapping(tmp_path, temporal):
    _write_jsonl(
        temporal / "qa.jsonl",
        [{**GOOD_ITEMS[2], "gold": "2019"}, {k: v for k, v in GOOD_ITEMS[0].items() if k != "answers"}],
    )
    message = fails_temporal(tmp_path, temporal, "data.fields.answers=gold")
    assert "qa.jsonl, line 2, field 'gold'" in message and "missing required field 'gold'" in message


def test_jsonl_wrong_type(tmp_path, temporal):
    _write_jsonl(temporal / "qa.jsonl", [GOOD_ITEMS[2], {**GOOD_ITEMS[0], "answers": 5}])
    message = fails_temporal(tmp_path, temporal)
    assert "qa.jsonl, line 2, field 'answers'" in message and "wrong type" in message


def test_jsonl_duplicate_ids_across_files(tmp_path, temporal):
    _write_jsonl(temporal / "more.jsonl", [{**GOOD_ITEMS[2], "question": "Another?"}])
    message = fails_temporal(tmp_path, temporal, eval_file="qa.jsonl,more.jsonl")
    assert "more.jsonl, line 1, field 'id'" in message and "duplicate id 'z1'" in message


def test_jsonl_unparseable_timestamp(tmp_path, temporal):
    _write_jsonl(temporal / "qa.jsonl", [GOOD_ITEMS[2], {**GOOD_ITEMS[0], "timestamp": "Smarch 3, 2019"}])
    message = fails_temporal(tmp_path, temporal)
    assert "qa.jsonl, line 2, field 'timestamp'" in message and "unparseable timestamp" in message


def test_jsonl_updated_item_without_outdated_answer(tmp_path, temporal):
    _write_jsonl(temporal / "qa.jsonl", [GOOD_ITEMS[2], {**GOOD_ITEMS[1], "set": "updated", "step": 1}])
    message = fails_temporal(tmp_path, temporal)
    assert "qa.jsonl, line 2, field 'pair_id'" in message and "no outdated answer" in message


def test_temporal_steps_out_of_order(tmp_path, temporal):
    message = fails_temporal(tmp_path, temporal, "data.steps=['2019','2018']")
    assert "t2018.jsonl" in message and "field 'data.steps'" in message and "out of order" in message


def test_missing_eval_file(tmp_path, temporal):
    message = fails_temporal(tmp_path, temporal, eval_file="absent.jsonl")
    assert "absent.jsonl" in message and "missing file" in message


def test_training_jsonl_missing_output(tmp_path, temporal):
    _write_jsonl(
        temporal / "t2018.jsonl",
        [{"input": "Acme is led by <mask>.", "output": "Ann Lee"}, {"input": "Zeta is in <mask>."}],
    )
    message = fails_temporal(tmp_path, temporal)
    assert "t2018.jsonl, line 2, field 'output'" in message


def test_step_out_of_range(tmp_path, temporal):
    _write_jsonl(temporal / "qa.jsonl", [GOOD_ITEMS[2], {**GOOD_ITEMS[0], "step": 7, "pair_id": None}])
    message = fails_temporal(tmp_path, temporal)
    assert "qa.jsonl, line 2, field 'step'" in message and "step 7" in message


def test_empty_jsonl_eval_file(tmp_path, temporal):
    (temporal / "qa.jsonl").write_text("\n\n", encoding="utf-8")
    message = fails_temporal(tmp_path, temporal)
    assert "qa.jsonl" in message and "empty file" in message


# ------------------------------------------------------------------ EvolveBench-style events (JSON)

EVENT = {
    "id": "ev1",
    "dimension": "knowledge_evolution",
    "knowledge_event": "CEO of Acme",
    "questions": [
        {
            "text": "As of 2018, who is the CEO of Acme?",
            "timestamp": "2018",
            "correct": "Ann Lee",
            "distractors": ["Bo Chan"],
        },
        {
            "text": "As of 2019, who is the CEO of Acme?",
            "timestamp": "2019",
            "correct": "Bo Chan",
            "distractors": ["Ann Lee"],
        },
    ],
    "source": "news",
    "verification": "manual",
}


def _write_events(path: Path, events) -> Path:
    path.write_text(json.dumps(events, indent=2), encoding="utf-8")
    return path


def test_events_malformed_json(tmp_path, temporal):
    path = _write_events(temporal / "events.json", [EVENT])
    path.write_text(path.read_text().replace('"source": "news"', '"source": news'), encoding="utf-8")
    message = fails_temporal(tmp_path, temporal, eval_file="events.json")
    line = next(k for k, text in enumerate(path.read_text().splitlines(), 1) if '"source": news' in text)
    assert f"events.json, line {line}" in message and "malformed JSON" in message


def test_events_question_missing_correct(tmp_path, temporal):
    broken = json.loads(json.dumps(EVENT))
    del broken["questions"][1]["correct"]
    path = _write_events(temporal / "events.json", [dict(EVENT, id="ev0"), broken])
    starts = [k for k, text in enumerate(path.read_text().splitlines(), 1) if text == "  {"]
    message = fails_temporal(tmp_path, temporal, eval_file="events.json")
    assert f"events.json, line {starts[1]}, field 'questions[1].correct'" in message


def test_events_duplicate_id_jsonl(tmp_path, temporal):
    _write_jsonl(temporal / "events.jsonl", [EVENT, EVENT])
    message = fails_temporal(tmp_path, temporal, eval_file="events.jsonl")
    assert "events.jsonl, line 2, field 'id'" in message and "duplicate event id 'ev1'" in message


def test_events_unparseable_timestamp(tmp_path, temporal):
    broken = json.loads(json.dumps(EVENT))
    broken["questions"][0]["timestamp"] = "the year of the dragon"
    _write_jsonl(temporal / "events.jsonl", [broken])
    message = fails_temporal(tmp_path, temporal, eval_file="events.jsonl")
    assert "events.jsonl, line 1, field 'questions[0].timestamp'" in message


def test_unknown_data_kind_fails_while_composing_naming_the_key(tmp_path):
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException) as info:
        tiny_cfg(tmp_path / "run", "data.kind=wikipedia")
    assert "full_key: data.kind" in str(info.value.__cause__) and "temporal_qa" in str(info.value.__cause__)
    assert not (tmp_path / "run").exists()
