"""EvolveBench-style event files: one knowledge event, asked at several timestamps.

An event (a JSON array of events, ``{"events": [...]}``, or JSONL with one event per line)::

    {"id": "ev1", "dimension": "knowledge_evolution", "knowledge_event": "CEO of Acme",
     "questions": [{"text": "As of 2019, who is the CEO of Acme?", "timestamp": "2019",
                    "correct": "Ann Lee", "distractors": ["Bo Chan", "Cy Diaz"]}, ...],
     "source": "...", "verification": "..."}

Each question becomes an open-form item (``<event>/<k>``; ``correct`` may be a string or a list of
aliases) and, when it has distractors, a multiple-choice item (``<event>/<k>/mc``) whose options are the
correct answer and the distractors in a fixed seeded order, with ``gold_index``. The items of one event
share ``base_question`` (``event:<id>``), so docs/metrics.md#4-paired-temporal-metrics pairs consecutive timestamps with different
answers; when every consecutive answer differs they also carry an explicit ``pair_id``.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, Iterator

from evolve_train.data.loaders.common import require_file
from evolve_train.data.qa_items import QAItem, _decoded_lines, _jsonl_records
from evolve_train.data.timestamps import parse_timestamp
from evolve_train.errors import DataError

EVENT_KEYS = ("knowledge_event", "questions")
_QUESTION_FIELDS = {
    "question": "text",
    "answers": "correct",
    "timestamp": "timestamp",
    "options": "distractors",
    "dimension": "dimension",
    "id": "id",
}


def looks_like_events(record: Any) -> bool:
    """Whether a decoded record is an event (it has ``questions`` and ``knowledge_event``)."""
    return isinstance(record, dict) and all(key in record for key in EVENT_KEYS)


def _array_records(path: Path) -> Iterator[tuple[int, Any]]:
    """(line where the element starts, element) of a JSON file holding an array (or ``{"events": [...]}``)."""
    text = "".join(line for _, line in _decoded_lines(path))
    try:
        document = json.loads(text)
    except json.JSONDecodeError as err:
        raise DataError(f"malformed JSON: {err.msg} (column {err.colno})", file=str(path), line=err.lineno) from None
    if isinstance(document, dict) and isinstance(document.get("events"), list):
        start = text.index("[", text.index('"events"'))
    elif isinstance(document, list):
        start = text.index("[")
    else:
        raise DataError('expected a JSON array of events (or {"events": [...]})', file=str(path), line=1)
    decoder, position = json.JSONDecoder(), start + 1
    while True:
        while position < len(text) and text[position] in " \t\r\n,":
            position += 1
        if position >= len(text) or text[position] == "]":
            return
        record, end = decoder.raw_decode(text, position)
        yield text.count("\n", 0, position) + 1, record
        position = end


def numbered_events(path: str | Path) -> Iterator[tuple[int, Any]]:
    path = require_file(Path(path), "event file")
    first = next((t for _, t in _decoded_lines(path) if t.strip()), "")
    return _array_records(path) if first.lstrip().startswith("[") or path.suffix == ".json" else _jsonl_records(path)


def _str_field(value: Any, name: str, allow_int: bool = False) -> str:
    if allow_int and isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str) or not value.strip():
        raise DataError(
            "wrong type: expected a non-empty string" if not isinstance(value, str) else "empty value", field=name
        )
    return value


def _event_items(event: Any, default_split: str, forms: tuple[str, ...]) -> list[QAItem]:
    if not isinstance(event, dict):
        raise DataError(f"expected a JSON object (an event), got {type(event).__name__}")
    for key in ("id", *EVENT_KEYS):
        if key not in event:
            raise DataError(f"missing required field '{key}'", field=key)
    event_id = _str_field(event["id"], "id", allow_int=True)
    knowledge = _str_field(event["knowledge_event"], "knowledge_event")
    dimension = event.get("dimension")
    if dimension is not None:
        _str_field(dimension, "dimension")
    questions = event["questions"]
    if not isinstance(questions, list) or not questions:
        raise DataError("wrong type: expected a non-empty list of questions", field="questions")
    rows = []
    for k, question in enumerate(questions):
        where = f"questions[{k}]"
        if not isinstance(question, dict):
            raise DataError("wrong type: expected an object", field=where)
        for key in ("text", "timestamp", "correct"):
            if key not in question:
                raise DataError(f"missing required field '{key}'", field=f"{where}.{key}")
        distractors = question.get("distractors", [])
        if not isinstance(distractors, list) or not all(isinstance(d, str) and d.strip() for d in distractors):
            raise DataError("wrong type: expected a list of non-empty strings", field=f"{where}.distractors")
        record = {
            "id": f"{event_id}/{k}",
            "question": question["text"],
            "answers": question["correct"],
            "timestamp": question["timestamp"],
            "dimension": dimension,
            "split": event.get("split"),
            "base_question": f"event:{event_id}",
            "knowledge_event": knowledge,
            "source": event.get("source"),
            "verification": event.get("verification"),
        }
        try:
            item = QAItem.from_dict(record, default_split=default_split)
        except DataError as err:
            name = _QUESTION_FIELDS.get(err.field, err.field)
            raise DataError(err.reason, field=f"{where}.{name}" if name != "dimension" else name) from None
        rows.append((item, distractors))
    ordered = sorted(rows, key=lambda row: parse_timestamp(row[0].timestamp))
    golds = [frozenset(a.strip().lower() for a in item.answers) for item, _ in ordered]
    chained = len(ordered) > 1 and all(a.isdisjoint(b) for a, b in zip(golds, golds[1:]))
    items: list[QAItem] = []
    for item, distractors in rows:
        if chained:
            item.pair_id = event_id
        if "open" in forms:
            items.append(item)
        if "mc" in forms and distractors:
            options = [item.answers[0], *distractors]
            random.Random(f"{item.id}/mc").shuffle(options)
            items.append(
                QAItem(
                    id=f"{item.id}/mc",
                    question=item.question,
                    answers=[item.answers[0]],
                    timestamp=item.timestamp,
                    split=item.split,
                    dimension=item.dimension,
                    options=options,
                    gold_index=options.index(item.answers[0]),
                    pair_id=f"{event_id}/mc" if chained else None,
                    base_question=f"event:{event_id}/mc",
                    extra=dict(item.extra),
                )
            )
    return items


def read_events(
    path: str | Path, default_split: str = "private", forms: tuple[str, ...] = ("open", "mc")
) -> list[tuple[int, QAItem]]:
    """(line of the event, item) for every question of every event in ``path`` (JSON or JSONL).

    ``forms`` selects open-form (``open``) and multiple-choice (``mc``) items. DataError names the file,
    the event's line and the field (``questions[k].timestamp`` ...) of malformed JSON, a missing or mistyped
    field, an unparseable timestamp or a duplicate event id.
    """
    path = Path(path)
    seen: dict[str, int] = {}
    out: list[tuple[int, QAItem]] = []
    for number, event in numbered_events(path):
        try:
            items = _event_items(event, default_split, forms)
        except DataError as err:
            raise DataError(err.reason, file=str(path), line=number, field=err.field) from None
        event_id = str(event["id"])
        if event_id in seen:
            raise DataError(
                f"duplicate event id '{event_id}' (lines {seen[event_id]} and {number})",
                file=str(path),
                line=number,
                field="id",
            )
        seen[event_id] = number
        out += [(number, item) for item in items]
    if not seen:
        raise DataError("empty file: no events", file=str(path))
    return out
