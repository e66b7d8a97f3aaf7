"""The QA item contract (docs/data.md) and its JSONL/CSV reader."""

import json

import pytest

from evolve_train.data.qa_items import QAItem, iter_numbered_qa_items, read_qa_items
from evolve_train.errors import ConfigError, DataError


def write_jsonl(path, records):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records), encoding="utf-8")
    return path


def ok(id="q1", **kw):
    return {"id": id, "question": "As of 2019, who leads Acme?", "answers": ["Ann"], **kw}


def test_reads_contract_fields_and_keeps_the_rest(tmp_path):
    path = write_jsonl(
        tmp_path / "gold.jsonl",
        [
            ok(
                timestamp="2019",
                set="updated",
                step=2,
                split="dev",
                pair_id=7,
                dimension="version_awareness",
                stable=False,
                source="wiki",
            ),
            "",  # blank lines are skipped
            {"id": 5, "question": "Which city?", "answers": "Oslo", "options": ["Rome", "Oslo"]},
        ],
    )
    first, second = read_qa_items(path)
    assert (first.id, first.answers, first.timestamp, first.set, first.step, first.split) == (
        "q1",
        ["Ann"],
        "2019",
        "updated",
        2,
        "dev",
    )
    assert (first.pair_id, first.stable, first.extra) == ("7", False, {"source": "wiki"})
    assert (second.id, second.answers, second.split) == ("5", ["Oslo"], "private")  # string answer → list
    assert second.gold_index == 1  # derived: the option equal to an answer


def test_to_dict_from_dict_round_trip():
    item = QAItem(
        id="q",
        question="Q?",
        answers=["a", "b"],
        timestamp="2020",
        options=["a", "c"],
        gold_index=0,
        extra={"note": "x"},
    )
    record = item.to_dict()
    assert record == {
        "id": "q",
        "question": "Q?",
        "answers": ["a", "b"],
        "timestamp": "2020",
        "split": "private",
        "options": ["a", "c"],
        "gold_index": 0,
        "note": "x",
    }
    assert QAItem.from_dict(record) == item


def test_field_mapping_for_other_layouts(tmp_path):
    path = write_jsonl(
        tmp_path / "evolvingqa.jsonl",
        [
            {
                "id": "e1",
                "question": "original wording",
                "edited_question": "In 2021, who leads Acme?",
                "answer": "Bob",
                "date": "2021",
            }
        ],
    )
    [item] = read_qa_items(path, {"question": "edited_question", "answers": "answer", "timestamp": "date"})
    assert (item.question, item.answers, item.timestamp) == ("In 2021, who leads Acme?", ["Bob"], "2021")
    assert item.extra == {"question": "original wording"}
    with pytest.raises(
        DataError,
        match=r"line 1, field 'edited_question': missing required field "
        r"'edited_question' \(mapped to 'question'\)",
    ):
        read_qa_items(
            write_jsonl(tmp_path / "m.jsonl", [{"id": "e1", "answer": "Bob"}]),
            {"question": "edited_question", "answers": "answer"},
        )
    with pytest.raises(ConfigError, match="unknown QA item field"):
        read_qa_items(path, {"qestion": "edited_question"})


def test_csv_with_mapping_and_row_line_numbers(tmp_path):
    path = tmp_path / "gold.csv"
    path.write_text(
        "id,edited_question,answer,step,stable,options\n"
        'c1,"Who leads\nAcme?",Ann,3,true,\n'  # a quoted newline: this row spans lines 2-3
        'c2,Who founded Acme?,"[""1990"", ""MCMXC""]",,,\n'
        'c3,Which city?,Oslo,,,"[""Rome"", ""Oslo""]"\n'
        "c1,Dup?,x,,,\n",
        encoding="utf-8",
    )
    mapping = {"question": "edited_question", "answers": "answer"}
    items = iter_numbered_qa_items(path, mapping)
    line, first = next(items)
    assert (line, first.question, first.step, first.stable) == (2, "Who leads\nAcme?", 3, True)
    line, second = next(items)
    assert (line, second.answers, second.step) == (4, ["1990", "MCMXC"], None)  # JSON list cell → aliases
    line, third = next(items)
    assert (line, third.options, third.gold_index) == (5, ["Rome", "Oslo"], 1)
    with pytest.raises(DataError, match=r"gold.csv, line 6, field 'id': duplicate id 'c1' \(lines 2 and 6\)"):
        next(items)


def test_reader_streams_items_before_a_later_error(tmp_path):
    path = write_jsonl(tmp_path / "g.jsonl", [ok("q1"), "{not json"])
    items = iter_numbered_qa_items(path)
    assert next(items)[1].id == "q1"
    with pytest.raises(DataError, match="line 2"):
        next(items)


@pytest.mark.parametrize(
    "records, line, field, reason",
    [
        ([ok("q1"), '{"id": "q2", "question": '], 2, None, "malformed JSON"),
        (["[1, 2]"], 1, None, "expected a JSON object"),
        ([ok("q1"), {"id": "q2", "question": "Q?"}], 2, "answers", "missing required field 'answers'"),
        ([{"question": "Q?", "answers": ["a"]}], 1, "id", "missing required field 'id'"),
        ([ok("q1", question=5)], 1, "question", "wrong type"),
        ([ok("q1", answers=[1, 2])], 1, "answers", "wrong type"),
        ([ok("q1", step="three")], 1, "step", "wrong type"),
        ([ok("q1", stable="maybe")], 1, "stable", "wrong type"),
        ([ok("q1", answers=[])], 1, "answers", "empty answers"),
        ([ok("q1", answers=["  "])], 1, "answers", "empty answers"),
        ([ok("q1"), ok("q2"), ok("q1")], 3, "id", "duplicate id 'q1' (lines 1 and 3)"),
        ([ok("q1"), ok("q2", timestamp="someday")], 2, "timestamp", "unparseable timestamp 'someday'"),
        ([ok("q1", split="test")], 1, "split", "split must be one of"),
        ([ok("q1", options=["x", "y"])], 1, "gold_index", "no option equals an answer"),
        ([ok("q1", options=["Ann", "y"], gold_index=2)], 1, "gold_index", "out of range"),
    ],
)
def test_validation_errors_name_file_line_and_field(tmp_path, records, line, field, reason):
    path = write_jsonl(tmp_path / "bad.jsonl", records)
    with pytest.raises(DataError) as caught:
        read_qa_items(path)
    error = caught.value
    assert (error.line, error.field) == (line, field)
    assert reason in error.reason
    assert str(path) in str(error) and f"line {line}" in str(error)


def test_non_utf8_bytes_name_the_line(tmp_path):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(json.dumps(ok("q1")).encode() + b"\n" + '{"id": "q2", "question": "Café?"}'.encode("latin-1"))
    with pytest.raises(DataError, match=r"latin1.jsonl, line 2: not valid UTF-8"):
        read_qa_items(path)


@pytest.mark.parametrize(
    "name, content", [("e.jsonl", ""), ("blank.jsonl", "\n  \n"), ("h.csv", "id,question,answers\n")]
)
def test_empty_files_are_errors(tmp_path, name, content):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataError, match=rf"{name}: empty file"):
        read_qa_items(path)
