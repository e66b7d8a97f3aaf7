"""``refresh_private_set`` (docs/metrics.md#8-statistics-and-hygiene): drop the items every reference model answers right every time.

A saturated item no longer separates models; refreshing removes it from the private set so the set keeps
measuring something. The rule (docs/hygiene.md):

* A **reference** is a directory. A run dir (it has ``predictions/``): each checkpoint ``step_<k>`` with
  k >= 0 is one **attempt** (all its ``*.jsonl`` prediction files together), the last ``N`` checkpoints are
  used. Any other directory: each ``*.jsonl`` file in it is one attempt (repeated prediction files, e.g.
  sampled reruns), the last ``N`` by name. A single ``.jsonl`` file is a reference with one attempt.
  A reference with fewer than ``N`` attempts is an error.
* Prediction records are ``{"id", "prediction"}`` (the per-item files the evaluators write); each is
  re-scored against the **gold file's** answers with exact match (docs/metrics.md#1-answer-matching).
* An item is **dropped** iff, for every reference, each of its last ``N`` attempts holds a prediction for the
  item and every such prediction is right. An item a reference never answered is kept.

The kept gold records are written unchanged to ``--out``; ``<out>.note.json`` names the references (and
their attempts), the gold file, the rule, the counts, the dropped ids and the date.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Iterable, Mapping

from evolve_train.data.answers import exact_match
from evolve_train.data.qa_items import QAItem, _jsonl_records
from evolve_train.errors import DataError
from evolve_train.utils.io import atomic_write_text

RULE = (
    "dropped: items every reference answers right (exact match against the gold file's answers) in each "
    "of its last N attempts; attempt = a checkpoint of a run dir, or a prediction file"
)
_STEP = re.compile(r"^step_(-?\d+)$")

Attempt = dict[str, list[str]]
"""id -> the predictions of that attempt for the item (usually one)."""


def saturated_ids(golds: Mapping[str, list[str]], references: Iterable[list[Attempt]]) -> set[str]:
    """Ids answered right by every reference in every one of its attempts (see the module docstring)."""
    references = list(references)
    if not references:
        return set()
    saturated = set()
    for item_id, answers in golds.items():
        if all(
            attempts
            and all(
                item_id in attempt and attempt[item_id] and all(exact_match(p, answers) for p in attempt[item_id])
                for attempt in attempts
            )
            for attempts in references
        ):
            saturated.add(item_id)
    return saturated


def read_predictions(paths: Iterable[Path]) -> Attempt:
    """One attempt: every prediction record of the given files, by id."""
    attempt: Attempt = {}
    for path in paths:
        for number, record in _jsonl_records(path):
            if not isinstance(record, dict) or "id" not in record:
                raise DataError("expected a prediction record with an 'id'", file=str(path), line=number, field="id")
            if not isinstance(record.get("prediction"), str):
                raise DataError("missing 'prediction' (a string)", file=str(path), line=number, field="prediction")
            attempt.setdefault(str(record["id"]), []).append(record["prediction"])
    return attempt


def reference_attempts(reference: Path, n: int) -> tuple[list[str], list[Attempt]]:
    """The names and contents of the last ``n`` attempts of a reference."""
    reference = Path(reference)
    if reference.is_file():
        groups = [(reference.name, [reference])]
    elif (reference / "predictions").is_dir():
        steps = []
        for child in (reference / "predictions").iterdir():
            match = _STEP.match(child.name)
            if child.is_dir() and match and int(match.group(1)) >= 0:
                steps.append((int(match.group(1)), child))
        groups = [(f"checkpoint {k}", sorted(path.glob("*.jsonl"))) for k, path in sorted(steps)]
    elif reference.is_dir():
        groups = [(path.name, [path]) for path in sorted(reference.glob("*.jsonl"))]
    else:
        raise DataError(f"reference {reference}: no such file or directory")
    if len(groups) < n:
        raise DataError(
            f"reference {reference} has {len(groups)} attempt(s) (checkpoints with predictions, or "
            f"prediction files), fewer than --attempts {n}"
        )
    chosen = groups[len(groups) - n :]
    return [name for name, _ in chosen], [read_predictions(files) for _, files in chosen]


def refresh_private_set(gold: Path, references: list[Path], attempts: int, out: Path) -> dict:
    """Write the kept items of ``gold`` to ``out`` and the note to ``<out>.note.json``; returns the note."""
    if attempts < 1:
        raise DataError(f"--attempts must be >= 1, got {attempts}")
    if not references:
        raise DataError("no references given")
    gold, out = Path(gold), Path(out)
    records, golds = [], {}
    for number, record in _jsonl_records(gold):
        try:
            item = QAItem.from_dict(record)
        except DataError as err:
            raise DataError(err.reason, file=str(gold), line=number, field=err.field) from None
        if item.id in golds:
            raise DataError(f"duplicate id '{item.id}'", file=str(gold), line=number, field="id")
        golds[item.id] = item.answers
        records.append((item.id, record))
    if not records:
        raise DataError("empty file: no QA items", file=str(gold))
    used = []
    loaded = []
    for reference in references:
        names, contents = reference_attempts(reference, attempts)
        used.append({"path": str(reference), "attempts": names})
        loaded.append(contents)
    dropped = saturated_ids(golds, loaded)
    kept = [record for item_id, record in records if item_id not in dropped]
    atomic_write_text(out, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in kept))
    now = time.gmtime()
    note = {
        "date": time.strftime("%Y-%m-%d", now),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", now),
        "gold": str(gold),
        "out": str(out),
        "references": used,
        "attempts": attempts,
        "rule": RULE,
        "n_items": len(records),
        "n_kept": len(kept),
        "n_dropped": len(dropped),
        "dropped": [item_id for item_id, _ in records if item_id in dropped],
    }
    note_path = out.with_name(out.name + ".note.json")
    note_path.write_text(json.dumps(note, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return note


def add_arguments(parser) -> None:
    parser.add_argument(
        "--references",
        nargs="+",
        required=True,
        type=Path,
        metavar="RUN_DIR",
        help="reference run dirs (attempt = checkpoint), dirs of prediction files or prediction files",
    )
    parser.add_argument(
        "--attempts",
        type=int,
        required=True,
        metavar="N",
        help="attempts per reference: its last N checkpoints (or prediction files)",
    )
    parser.add_argument("--gold", required=True, type=Path, help="the private set (JSONL QA items)")
    parser.add_argument("--out", required=True, type=Path, help="kept items (JSONL); the note goes to <out>.note.json")


def run(args) -> int:
    note = refresh_private_set(args.gold, args.references, args.attempts, args.out)
    print(
        f"kept {note['n_kept']} of {note['n_items']} items ({note['n_dropped']} dropped: answered right by "
        f"all {len(note['references'])} reference(s) in each of their last {note['attempts']} attempt(s)) "
        f"-> {args.out}; note -> {args.out}.note.json"
    )
    return 0
