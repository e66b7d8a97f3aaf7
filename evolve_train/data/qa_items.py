"""The timestamped QA item contract (docs/data.md, "Generic timestamped QA") and its reader.

One item per JSONL line (or CSV row). Other layouts load through a field mapping
``{contract_name: source_name}``, e.g. ``{"question": "edited_question", "answers": "answer"}``.
"""

from __future__ import annotations

import contextlib
import csv
import json
from dataclasses import dataclass, field, fields as dataclass_fields
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional

from evolve_train.data.timestamps import parse_timestamp
from evolve_train.errors import ConfigError, DataError

SPLITS = ("dev", "private")
REQUIRED_FIELDS = ("id", "question", "answers")


@dataclass
class QAItem:
    """One evaluation question; `answers` is a list of aliases of the gold answer."""

    id: str
    question: str
    answers: list[str]
    set: Optional[str] = None
    step: Optional[int] = None
    timestamp: Optional[str] = None
    split: str = "private"
    pair_id: Optional[str] = None
    dimension: Optional[str] = None
    options: Optional[list[str]] = None
    gold_index: Optional[int] = None
    stable: Optional[bool] = None
    base_question: Optional[str] = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The contract's JSON object: fields that are set, with `extra` keys at the top level."""
        contract = {f.name: getattr(self, f.name) for f in dataclass_fields(self) if f.name != "extra"}
        contract = {k: v for k, v in contract.items() if v is not None}
        return {**{k: v for k, v in self.extra.items() if k not in contract}, **contract}

    @classmethod
    def from_dict(
        cls, record: Mapping[str, Any], fields: Optional[Mapping[str, str]] = None, default_split: str = "private"
    ) -> "QAItem":
        """Validate one record (after the field mapping) into an item; DataError names the bad field."""
        return _item_from_record(record, _check_mapping(fields), default_split, from_csv=False)


CONTRACT_FIELDS = tuple(f.name for f in dataclass_fields(QAItem) if f.name != "extra")


def _check_mapping(fields: Optional[Mapping[str, str]]) -> dict[str, str]:
    mapping = dict(fields or {})
    unknown = sorted(set(mapping) - set(CONTRACT_FIELDS))
    if unknown:
        raise ConfigError(
            f"unknown QA item field(s) {unknown} in the field mapping; known: {', '.join(CONTRACT_FIELDS)}"
        )
    return mapping


def _optional_str(value: Any, name: str, *, allow_int: bool = False) -> Optional[str]:
    if value is None:
        return None
    if allow_int and isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise DataError(f"wrong type: expected a string, got {type(value).__name__}", field=name)
    return value


def _answers(value: Any, name: str, from_csv: bool) -> list[str]:
    if from_csv and isinstance(value, str) and value.strip().startswith("["):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            pass
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        raise DataError("wrong type: expected a string or a list of strings", field=name)
    answers = [a for a in value if a.strip()]
    if not answers:
        raise DataError("empty answers", field=name)
    return answers


def _step(value: Any, name: str) -> Optional[int]:
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise DataError(f"wrong type: expected an integer step, got {value!r}", field=name)


def _stable(value: Any, name: str) -> Optional[bool]:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "1", "yes", "false", "0", "no"):
        return value.strip().lower() in ("true", "1", "yes")
    raise DataError(f"wrong type: expected true or false, got {value!r}", field=name)


def _options(value: Any, name: str) -> Optional[list[str]]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise DataError("wrong type: options must be a JSON list of strings", field=name) from None
    if value is None:
        return None
    if not isinstance(value, list) or not value or not all(isinstance(o, str) for o in value):
        raise DataError("wrong type: expected a non-empty list of strings", field=name)
    return value


def _gold_index(value: Any, name: str, options: Optional[list[str]], answers: list[str]) -> Optional[int]:
    index = _step(value, name)
    if options is None:
        return index
    if index is None:
        matches = [k for k, option in enumerate(options) if option.strip() in {a.strip() for a in answers}]
        if not matches:
            raise DataError("options given but no gold_index, and no option equals an answer", field=name)
        return matches[0]
    if not 0 <= index < len(options):
        raise DataError(f"gold_index {index} out of range for {len(options)} options", field=name)
    return index


def _item_from_record(
    record: Mapping[str, Any], mapping: Mapping[str, str], default_split: str, from_csv: bool
) -> QAItem:
    """Apply the mapping and validate; CSV cells arrive as strings and '' means absent."""
    if not isinstance(record, Mapping):
        raise DataError(f"expected a JSON object, got {type(record).__name__}")
    source = {name: mapping.get(name, name) for name in CONTRACT_FIELDS}
    values: dict[str, Any] = {}
    for name, key in source.items():
        value = record.get(key)
        if from_csv and isinstance(value, str) and value == "":
            value = None
        values[name] = value
    for name in REQUIRED_FIELDS:
        if values[name] is None:
            hint = f" (mapped to '{name}')" if source[name] != name else ""
            raise DataError(f"missing required field '{source[name]}'{hint}", field=source[name])
    item_id = _optional_str(values["id"], source["id"], allow_int=True)
    if not item_id.strip():
        raise DataError("empty id", field=source["id"])
    question = _optional_str(values["question"], source["question"])
    if not question.strip():
        raise DataError("empty question", field=source["question"])
    answers = _answers(values["answers"], source["answers"], from_csv)
    timestamp = _optional_str(values["timestamp"], source["timestamp"], allow_int=True)
    if timestamp is not None:
        try:
            parse_timestamp(timestamp)
        except ValueError as err:
            raise DataError(str(err), field=source["timestamp"]) from None
    split = _optional_str(values["split"], source["split"]) or default_split
    if split not in SPLITS:
        raise DataError(f"split must be one of {SPLITS}, got {split!r}", field=source["split"])
    options = _options(values["options"], source["options"])
    used_keys = set(source.values())
    return QAItem(
        id=item_id,
        question=question,
        answers=answers,
        set=_optional_str(values["set"], source["set"]),
        step=_step(values["step"], source["step"]),
        timestamp=timestamp,
        split=split,
        pair_id=_optional_str(values["pair_id"], source["pair_id"], allow_int=True),
        dimension=_optional_str(values["dimension"], source["dimension"]),
        options=options,
        gold_index=_gold_index(values["gold_index"], source["gold_index"], options, answers),
        stable=_stable(values["stable"], source["stable"]),
        base_question=_optional_str(values["base_question"], source["base_question"]),
        extra={k: v for k, v in record.items() if k not in used_keys},
    )


def _open_lines(path: Path):
    """A binary line reader of ``path``: ``.gz`` and ``.zst`` files decompressed as they are read."""
    name = Path(path).name.lower()
    if name.endswith(".gz"):
        import gzip

        return gzip.open(path, "rb")
    if name.endswith(".zst"):
        return contextlib.closing(_zst_lines(path))
    return open(path, "rb")


def _zst_lines(path: Path) -> Iterator[bytes]:
    """The lines of a zstd-compressed file, decompressed a block at a time; EOFError where its last frame is cut
    short (a stream reader would end there without a word)."""
    import zstandard

    fresh = zstandard.ZstdDecompressor().decompressobj
    frame, pending, started = fresh(), b"", False
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            while chunk:
                pending += frame.decompress(chunk)
                started = True
                chunk = b""
                if frame.eof:
                    chunk, frame, started = frame.unused_data, fresh(), False
            *lines, pending = pending.split(b"\n")
            for line in lines:
                yield line + b"\n"
    if started:
        raise EOFError("the last zstd frame is cut short")
    if pending:
        yield pending


def _decoded_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(1-based line number, text) for each line, decoding one line at a time (streams; a compressed file cut
    short or corrupt is a DataError naming the line after the last whole one)."""
    number, compressed = 0, Path(path).name.lower().endswith((".gz", ".zst"))
    with _open_lines(path) as handle:
        lines = iter(handle)
        while True:
            try:
                raw = next(lines)
            except StopIteration:
                return
            except Exception as err:  # gzip: EOFError/BadGzipFile; zstandard: ZstdError
                if compressed and (isinstance(err, (EOFError, OSError)) or type(err).__name__ == "ZstdError"):
                    raise DataError(
                        f"truncated or corrupt compressed file ({err})", file=str(path), line=number + 1
                    ) from None
                raise
            number += 1
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise DataError(f"not valid UTF-8 (byte {err.start})", file=str(path), line=number) from None
            yield number, (text.lstrip("\ufeff") if number == 1 else text)


def _jsonl_records(path: Path) -> Iterator[tuple[int, Any]]:
    for number, text in _decoded_lines(path):
        if not text.strip():
            continue
        try:
            yield number, json.loads(text)
        except json.JSONDecodeError as err:
            raise DataError(f"malformed JSON: {err.msg} (column {err.colno})", file=str(path), line=number) from None


def _csv_records(path: Path) -> Iterator[tuple[int, Any]]:
    """Rows as dicts keyed by the header, with the line number where each row starts."""
    reader = csv.reader(text for _, text in _decoded_lines(path))
    header: Optional[list[str]] = None
    while True:
        row_start = reader.line_num + 1
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            raise DataError(f"malformed CSV: {err}", file=str(path), line=row_start) from None
        if not row or not any(cell.strip() for cell in row):
            continue
        if header is None:
            header = [name.strip() for name in row]
            continue
        if len(row) > len(header):
            raise DataError(f"row has {len(row)} cells, the header {len(header)}", file=str(path), line=row_start)
        yield row_start, dict(zip(header, row))


def iter_numbered_qa_items(
    path: str | Path, fields: Optional[Mapping[str, str]] = None, default_split: str = "private"
) -> Iterator[tuple[int, QAItem]]:
    """Stream (line number, QAItem) from a JSONL or CSV file (by suffix); see `read_qa_items`."""
    path = Path(path)
    mapping = _check_mapping(fields)
    from_csv = path.suffix.lower() == ".csv"
    records = _csv_records(path) if from_csv else _jsonl_records(path)
    first_line: dict[str, int] = {}
    for number, record in records:
        try:
            item = _item_from_record(record, mapping, default_split, from_csv)
        except DataError as err:
            raise DataError(err.reason, file=str(path), line=number, field=err.field) from None
        if item.id in first_line:
            raise DataError(
                f"duplicate id '{item.id}' (lines {first_line[item.id]} and {number})",
                file=str(path),
                line=number,
                field=mapping.get("id", "id"),
            )
        first_line[item.id] = number
        yield number, item
    if not first_line:
        raise DataError("empty file: no QA items", file=str(path))


def read_qa_items(
    path: str | Path, fields: Optional[Mapping[str, str]] = None, default_split: str = "private"
) -> list[QAItem]:
    """Read QA items from JSONL or CSV (by suffix), streaming line by line.

    `fields` maps contract names to the file's names ({"question": "edited_question"}). Raises DataError
    naming file, 1-based line (CSV: the row's first line) and field for malformed JSON, non-UTF-8 bytes,
    a missing required field (id, question, answers), a wrong type, empty answers, a duplicate id (both
    lines named), an unparseable timestamp or an empty file.
    """
    return [item for _, item in iter_numbered_qa_items(path, fields, default_split)]
