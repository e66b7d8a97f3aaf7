"""``evolve-data export-general-tasks``: offline lm-eval tasks of general English from the shipped texts (last
word, LAMBADA's form; next sentence, HellaSwag's form), checked by hand on a small text, and loaded by
lm-evaluation-harness's own task manager."""

from __future__ import annotations

import importlib.util
import json

import pytest

from evolve_train.cli.data import main
from evolve_train.export.general_tasks import documents, last_word_records, next_sentence_records

TEXT = """The old bridge over the river was built from grey stone in the last century.
Children cross it every morning on their way to the school. Short one here.

Bread needs flour, water, salt and yeast before it goes into a hot oven.
The baker wakes up at four to start the first batch of the day!

Trains leave the station every hour, and the last one departs just before midnight.
"""


def test_documents_sentences_and_the_records_by_hand():
    docs = documents(TEXT)
    assert [len(doc) for doc in docs] == [3, 2, 1]
    assert docs[0][2] == "Short one here."
    words = last_word_records(docs)
    assert words[0] == {
        "context": "The old bridge over the river was built from grey stone in the last",
        "target": " century",
    }
    assert {"context": "The baker wakes up at four to start the first batch of the", "target": " day"} in words
    assert len(words) == 5  # "Short one here." has fewer than 8 words
    pairs = next_sentence_records(docs)
    assert len(pairs) == 3  # two pairs in the first document, one in the second, none in the third
    for record, (context, truth) in zip(
        pairs, [(docs[0][0], docs[0][1]), (docs[0][1], docs[0][2]), (docs[1][0], docs[1][1])]
    ):
        assert record["context"] == context and record["choices"][record["label"]] == truth
        assert len(record["choices"]) == 4 and len(set(record["choices"])) == 4
    assert next_sentence_records(docs) == pairs  # seeded


def test_the_command_writes_tasks_data_and_a_manifest(tmp_path, capsys):
    text = tmp_path / "mytext.txt"
    text.write_text(TEXT, encoding="utf-8")
    out = tmp_path / "tasks"
    assert main(["export-general-tasks", "--out", str(out), "--text", str(text)]) in (0, None)
    manifest = json.loads((out / "general_tasks.json").read_text())
    assert manifest["tasks"] == {
        "general_last_word_mytext": {"text": "mytext", "documents": 5},
        "general_next_sentence_mytext": {"text": "mytext", "documents": 3},
    }
    assert "2 tasks ->" in capsys.readouterr().out
    assert str(out / "data" / "general_last_word_mytext.jsonl") in (out / "general_last_word_mytext.yaml").read_text()


@pytest.mark.skipif(importlib.util.find_spec("lm_eval") is None, reason="lm-evaluation-harness is not installed")
def test_lm_eval_loads_the_shipped_texts_tasks(tmp_path):
    from lm_eval.tasks import TaskManager, get_task_dict

    out = tmp_path / "tasks"
    assert main(["export-general-tasks", "--out", str(out)]) in (0, None)
    names = sorted(json.loads((out / "general_tasks.json").read_text())["tasks"])
    assert names == [
        f"general_{kind}_{text}" for kind in ("last_word", "next_sentence") for text in ("general", "python_docs")
    ]
    tasks = get_task_dict(names, TaskManager(include_path=str(out)))
    for name in names:
        docs = list(tasks[name].test_docs())
        assert len(docs) > 20, name
