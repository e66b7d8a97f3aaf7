"""Offline lm-evaluation-harness tasks of general English, built from the texts the package ships
(``evolve-data export-general-tasks``): a forgetting measure of general ability per checkpoint that needs no
download (``eval.lm_eval``; docs/evaluation.md). The texts are the held-out ones (``resources/SOURCE.md``):
``general``, a short everyday text, and ``python_docs``, ~25,000 words of the Python documentation's prose.

For each text, under ``out``:

* ``general_last_word_<text>``: LAMBADA's form. Every sentence of at least :data:`MIN_WORDS` words whose last
  word is alphabetic is a ``loglikelihood`` document: the sentence up to its last word as the context, the
  word (with its leading space) as the target; metrics ``acc`` (the word is the greedy continuation, token by
  token) and ``perplexity`` (per word).
* ``general_next_sentence_<text>``: HellaSwag's form. Every pair of consecutive sentences of one document is a
  ``multiple_choice`` document: the first sentence as the context, the second among :data:`DISTRACTORS` others
  drawn (seeded) from other documents; metrics ``acc`` and ``acc_norm``.
* ``data/<task>.jsonl`` and ``general_tasks.json`` (the manifest: tasks, document counts, the source texts).

The YAML names the data files by absolute path (lm-eval resolves ``data_files`` against its working
directory): export again after moving the directory.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import yaml

from evolve_train.evaluation.evaluators.heldout import SHIPPED
from evolve_train.utils.io import atomic_dir, jsonl_text, remove_stale_tmp

MIN_WORDS = 8
DISTRACTORS = 3
SEED = 0
MANIFEST = "general_tasks.json"
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(])")
_LAST_WORD = re.compile(r"^(?P<context>.*\S)(?P<word> [A-Za-z]+)(?P<end>[.!?]?[\"')]?)$", re.DOTALL)


def documents(text: str) -> list[list[str]]:
    """The text's documents (blank-line separated) as lists of sentences (whitespace folded)."""
    docs = []
    for block in re.split(r"\n\s*\n", text):
        flat = " ".join(block.split())
        if flat:
            docs.append([s.strip() for s in _SENTENCE_END.split(flat) if s.strip()])
    return docs


def last_word_records(docs: list[list[str]]) -> list[dict]:
    """``{"context", "target"}`` for every sentence of at least :data:`MIN_WORDS` words ending in a plain word."""
    records = []
    for sentence in (s for doc in docs for s in doc):
        match = _LAST_WORD.match(sentence)
        if match and len(sentence.split()) >= MIN_WORDS:
            records.append({"context": match.group("context"), "target": match.group("word")})
    return records


def next_sentence_records(docs: list[list[str]], seed: int = SEED) -> list[dict]:
    """``{"context", "choices", "label"}`` for every pair of consecutive sentences of a document; the
    distractors are sentences of other documents (none when the text has a single document)."""
    rng = random.Random(seed)
    owners = [(d, s) for d, doc in enumerate(docs) for s in doc]
    records = []
    for d, doc in enumerate(docs):
        others = [s for owner, s in owners if owner != d]
        if len(others) < DISTRACTORS:
            continue
        for first, second in zip(doc, doc[1:]):
            choices = [second, *rng.sample(others, DISTRACTORS)]
            rng.shuffle(choices)
            records.append({"context": first, "choices": choices, "label": choices.index(second)})
    return records


def _yaml(name: str, data: Path, body: dict) -> str:
    spec = {
        "task": name,
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(data.resolve())}},
        "test_split": "test",
        **body,
    }
    return yaml.safe_dump(spec, sort_keys=False, allow_unicode=True)


LAST_WORD = {
    "output_type": "loglikelihood",
    "doc_to_text": "{{context}}",
    "doc_to_target": "{{target}}",
    "metric_list": [
        {"metric": "perplexity", "aggregation": "perplexity", "higher_is_better": False},
        {"metric": "acc", "aggregation": "mean", "higher_is_better": True},
    ],
}
NEXT_SENTENCE = {
    "output_type": "multiple_choice",
    "doc_to_text": "{{context}}",
    "doc_to_choice": "{{choices}}",
    "doc_to_target": "label",
    "metric_list": [
        {"metric": "acc", "aggregation": "mean", "higher_is_better": True},
        {"metric": "acc_norm", "aggregation": "mean", "higher_is_better": True},
    ],
}


def export_general_tasks(out: Path, texts: dict[str, Path] | None = None) -> dict:
    """Write the tasks of ``texts`` (default: the shipped ones) into ``out`` (replaced as a whole); the
    manifest."""
    texts = dict(SHIPPED if texts is None else texts)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_tmp(out)
    manifest: dict = {"tasks": {}, "texts": {name: str(path) for name, path in texts.items()}}
    with atomic_dir(out) as staging:
        (staging / "data").mkdir()
        for text_name, path in texts.items():
            docs = documents(Path(path).read_text(encoding="utf-8"))
            for kind, records, body in (
                ("last_word", last_word_records(docs), LAST_WORD),
                ("next_sentence", next_sentence_records(docs), NEXT_SENTENCE),
            ):
                if not records:
                    continue
                task = f"general_{kind}_{text_name}"
                (staging / "data" / f"{task}.jsonl").write_text(jsonl_text(records), encoding="utf-8")
                final_data = out / "data" / f"{task}.jsonl"  # the YAML names the path after the rename
                (staging / f"{task}.yaml").write_text(_yaml(task, final_data, body), encoding="utf-8")
                manifest["tasks"][task] = {"text": text_name, "documents": len(records)}
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest
