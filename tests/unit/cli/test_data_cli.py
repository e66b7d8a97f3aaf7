"""`evolve-data diff` and `evolve-data mask`: streaming snapshot diffs and masked-entity pairs."""

from __future__ import annotations

import csv
import json
import tracemalloc
from pathlib import Path

import pytest

from evolve_train.cli.data import diff_snapshots, main
from evolve_train.data.masking import capitalized_spans, masked_pairs


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_diff_writes_new_and_changed_documents(tmp_path):
    old = write_jsonl(
        tmp_path / "a.jsonl",
        [
            {"doc_id": "x", "text": "Ann leads Acme."},
            {"doc_id": "y", "text": "Same."},
            {"doc_id": "gone", "text": "Bye."},
        ],
    )
    new = write_jsonl(
        tmp_path / "b.jsonl",
        [
            {"doc_id": "y", "text": "Same."},
            {"doc_id": "x", "text": "Bo leads Acme."},
            {"doc_id": 7, "text": "Brand new."},
        ],
    )
    assert main(["diff", "--old", str(old), "--new", str(new), "--out", str(tmp_path / "d.jsonl")]) == 0
    assert read_jsonl(tmp_path / "d.jsonl") == [
        {"doc_id": "x", "text": "Bo leads Acme.", "change": "changed"},
        {"doc_id": "7", "text": "Brand new.", "change": "new"},
    ]


def test_diff_holds_hashes_not_texts(tmp_path):
    text = "word " * 400  # 2 KB per document, 2,000 documents: 4 MB per snapshot
    old = write_jsonl(tmp_path / "a.jsonl", [{"doc_id": f"d{k}", "text": f"{k} {text}"} for k in range(2000)])
    new = write_jsonl(
        tmp_path / "b.jsonl", [{"doc_id": f"d{k}", "text": f"{k + (k % 10 == 0)} {text}"} for k in range(2000)]
    )
    tracemalloc.start()
    counts = diff_snapshots(old, new, tmp_path / "d.jsonl")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert counts["changed"] == 200 and counts["new"] == 0
    assert peak < 1_000_000, f"peak {peak} bytes: the diff should not hold the 4 MB of old texts"


@pytest.mark.parametrize(
    "bad, where",
    [
        ('{"doc_id": "a", "text": "x"}\n{"doc_id": "a", "text": "y"}\n', "line 2, field 'doc_id'"),
        ('{"doc_id": "a", "text": "x"}\n{"doc_id": "b", text}\n', "line 2: malformed JSON"),
        ('{"doc_id": "a"}\n', "line 1, field 'text'"),
    ],
)
def test_diff_rejects_bad_snapshots(tmp_path, capsys, bad, where):
    old = tmp_path / "a.jsonl"
    old.write_text(bad, encoding="utf-8")
    new = write_jsonl(tmp_path / "b.jsonl", [{"doc_id": "a", "text": "x"}])
    out = tmp_path / "d.jsonl"
    assert main(["diff", "--old", str(old), "--new", str(new), "--out", str(out)]) == 2
    error = capsys.readouterr().err
    assert f"{old}, {where}" in error and not out.exists() and not list(tmp_path.glob("*.tmp"))


def test_mask_causal_jsonl_one_pair_per_entity(tmp_path):
    text = "Ann Lee leads Acme Corp. It was founded in 1990."
    source = write_jsonl(tmp_path / "x.jsonl", [{"text": text, "entities": [[0, 7], [14, 23], [43, 47]]}])
    assert main(["mask", "--in", str(source), "--out", str(tmp_path / "y.jsonl"), "--format", "causal"]) == 0
    assert read_jsonl(tmp_path / "y.jsonl") == [
        {"input": "<mask> leads Acme Corp.", "output": "Ann Lee"},
        {"input": "Ann Lee leads <mask>.", "output": "Acme Corp"},
        {"input": "It was founded in <mask>.", "output": "1990"},
    ]


def test_mask_t5_csv_is_the_evolvingqa_layout_and_loads(tmp_path):
    source = write_jsonl(tmp_path / "x.jsonl", [{"text": "Bo Chan leads Acme.", "entities": [[0, 7]]}])
    out = tmp_path / "wikipedia_0102.csv"
    assert main(["mask", "--in", str(source), "--out", str(out), "--format", "t5"]) == 0
    assert list(csv.DictReader(out.open(encoding="utf-8"))) == [
        {"input": "<extra_id_0> leads Acme.", "output": "Bo Chan"}
    ]
    from evolve_train.data.loaders.common import read_training_file

    assert read_training_file(out)[0] == [{"input": "<extra_id_0> leads Acme.", "output": "Bo Chan"}]


def test_mask_capitalized_heuristic():
    text = "The Rivera Museum opened in Lima. It hired Ann Lee in 2019. Visitors came."
    spans = [text[a:b] for a, b in capitalized_spans(text)]
    assert spans == ["The Rivera Museum", "Lima", "Ann Lee", "2019"]  # "It", "Visitors": sentence starts
    assert masked_pairs(text, capitalized_spans(text)[1:2], "<mask>") == [
        {"input": "The Rivera Museum opened in <mask>.", "output": "Lima"}
    ]
    assert capitalized_spans("w1234 x2019 in 2019") == [(15, 19)]  # digits inside words are not years


@pytest.mark.parametrize(
    "record, field",
    [
        ({"text": "Ann leads Acme.", "entities": [[4, 99]]}, "entities[0]"),
        ({"text": "Ann leads Acme.", "entities": [[5, 2]]}, "entities[0]"),
        ({"text": "Ann leads Acme.", "entities": "Ann"}, "entities"),
        ({"text": "Ann leads Acme."}, "entities"),
        ({"entities": []}, "text"),
    ],
)
def test_mask_rejects_bad_records(tmp_path, capsys, record, field):
    source = write_jsonl(tmp_path / "x.jsonl", [{"text": "Ok.", "entities": []}, record])
    out = tmp_path / "y.jsonl"
    assert main(["mask", "--in", str(source), "--out", str(out)]) == 2
    assert f"{source}, line 2, field '{field}'" in capsys.readouterr().err and not out.exists()


def test_refresh_slot_dispatches_to_its_hook(monkeypatch):
    import evolve_train.cli.data as cli

    calls = []
    monkeypatch.setattr(cli, "add_refresh_arguments", lambda parser: parser.add_argument("--gold"))
    monkeypatch.setattr(cli, "REFRESH_HOOK", lambda args: calls.append(args.gold) or 0)
    assert main(["refresh", "--gold", "g.jsonl"]) == 0 and calls == ["g.jsonl"]
