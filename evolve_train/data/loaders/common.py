"""Reading helpers shared by the loaders: CSV/JSONL records with line numbers, training corpora, QA files.

Everything here reuses the parsing of :mod:`evolve_train.data.qa_items` (UTF-8 decoding line by line,
malformed JSON/CSV, the QA item validation), so a bad row fails the same way in ``evolve-score``, in a
training run and in QA adaptation: one :class:`DataError` naming the file, the line and the field.
"""

from __future__ import annotations

import csv
import itertools
import logging
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional, Sequence

from evolve_train.data.corpus import records_of_file
from evolve_train.data.qa_items import (
    QAItem,
    _check_mapping,
    _csv_records,
    _decoded_lines,
    _item_from_record,
    _jsonl_records,
)
from evolve_train.data.masking import MASK_TOKENS
from evolve_train.errors import DataError

log = logging.getLogger(__name__)

"""Mask tokens a masked-entity ``input`` may contain (the same list as ``models/text_format.py``)."""


def resolve_path(name: str | Path, root: Optional[str | Path]) -> Path:
    """``name`` as given when absolute (or when there is no root), else under ``root``."""
    path = Path(name).expanduser()
    if path.is_absolute() or root is None:
        return path
    return Path(root).expanduser() / path


def effective_fields(fields: Optional[Mapping[str, str]]) -> dict[str, str]:
    """The field mapping without identity entries (the data yamls list ``question: question`` ... so that
    ``data.fields.question=edited_question`` overrides an existing key, which Hydra requires)."""
    return {key: source for key, source in (fields or {}).items() if key != source}


def require_file(path: Path, what: str) -> Path:
    if not path.is_file():
        raise DataError(f"missing file: {what} not found", file=str(path))
    return path


def csv_header(path: Path) -> list[str]:
    """The header row of a CSV file (decoded as the rows are); DataError if the file has none."""
    for number, text in _decoded_lines(path):
        if not text.strip():
            continue
        try:
            row = next(csv.reader([text]))
        except csv.Error as err:
            raise DataError(f"malformed CSV header: {err}", file=str(path), line=number) from None
        return [name.strip() for name in row]
    raise DataError("empty file: no header row", file=str(path), line=1)


def numbered_records(path: Path, required: tuple[str, ...] = ()) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line, record) of a CSV (by suffix), JSONL (``.gz``/``.zst`` too), Parquet file or ``save_to_disk`` folder
    (line: the row, from 1); checks that ``required`` columns/keys exist.

    CSV: a column missing from the header fails on line 1; a row shorter than the header fails on its
    line. JSONL: each line must be an object holding the required keys. A file without records fails.
    """
    path = Path(path)
    from_csv = path.suffix.lower() == ".csv"
    if is_saved_dataset(path) or path.name.lower().endswith(".parquet"):
        records = tabular_records(path)
    elif from_csv:
        header = csv_header(path)
        for name in required:
            if name not in header:
                raise DataError(
                    f"missing column '{name}' (header: {', '.join(header)})", file=str(path), line=1, field=name
                )
        records = _csv_records(path)
    else:
        records = _jsonl_records(path)
    count = 0
    for number, record in records:
        if not isinstance(record, dict):
            raise DataError(f"expected a JSON object, got {type(record).__name__}", file=str(path), line=number)
        for name in required:
            if name not in record:
                reason = "row has fewer cells than the header" if from_csv else f"missing required field '{name}'"
                raise DataError(reason, file=str(path), line=number, field=name)
        count += 1
        yield number, record
    if not count:
        raise DataError(
            "empty file: no rows after the header" if from_csv else "empty file: no records",
            file=str(path),
            line=1 if from_csv else None,
        )


def _text_cell(record: Mapping[str, Any], name: str, path: Path, number: int) -> str:
    value = record.get(name)
    if not isinstance(value, str):
        raise DataError(
            f"wrong type: expected a string, got {type(value).__name__}", file=str(path), line=number, field=name
        )
    if not value.strip():
        raise DataError(f"empty '{name}'", file=str(path), line=number, field=name)
    return value


TRAINING_SUFFIXES = (".txt", ".jsonl", ".csv", ".jsonl.gz", ".jsonl.zst", ".parquet")
"""The training files a folder or a glob of ``data.train_files`` contributes (``loaders/temporal_qa.py``)."""
TXT_DOCUMENTS = ("file", "paragraph")
"""How a ``.txt`` file becomes documents (``data.txt_documents``)."""


def read_training_file(
    path: Path,
    cache_dir: Optional[Path] = None,
    txt_documents: str = "file",
    doc_id: Optional[str] = None,
    text_field: str = "text",
) -> tuple[Sequence[dict], Sequence[dict]]:
    """(pairs, texts) of one training file: masked-entity pairs (``input`` with a mask token, ``output``)
    from CSV or JSONL, or plain-text documents (JSONL/CSV with ``text``, optional ``doc_id``; or a ``.txt``
    file, see :func:`txt_documents`); the other one is empty. Streamed: validated line by line into Arrow
    (``data/corpus.py``), never a list of the file, memory-mapped from ``cache_dir`` (``<cache_dir>/corpora/``)
    when given. ``doc_id``: a ``.txt`` file's document name (default: the file name without ``.txt``).
    ``text_field``: the column or key holding a document's text (``data.text_field``)."""
    path = Path(path)
    if is_saved_dataset(path):
        return _tabular(path, cache_dir, set(_saved_dataset(path).column_names), text_field)
    path = require_file(path, "training file")
    if path.name.lower().endswith(".parquet"):
        return _tabular(path, cache_dir, set(_parquet_file(path).schema_arrow.names), text_field)
    if path.suffix.lower() == ".txt":
        mode, name = str(txt_documents), doc_id or path.stem
        if mode not in TXT_DOCUMENTS:
            raise DataError(f"data.txt_documents must be one of {', '.join(TXT_DOCUMENTS)}, got {mode!r}")
        texts = records_of_file(
            path, "texts", lambda: txt_documents_of(path, mode, name), cache_dir, variant=f"txt:{mode}:{name}"
        )
        if not len(texts):
            log.warning("%s: no text (only blank lines); the file adds no document", path)
        return [], texts
    return _tabular(path, cache_dir, _first_keys(path), text_field)


def is_saved_dataset(path: Path) -> bool:
    """Whether ``path`` is a folder written by ``datasets``' ``Dataset.save_to_disk``."""
    return path.is_dir() and (path / "state.json").is_file() and (path / "dataset_info.json").is_file()


def _saved_dataset(path: Path):
    from datasets import Dataset

    try:
        return Dataset.load_from_disk(str(path))
    except Exception as err:  # a folder cut short: missing or corrupt Arrow files
        raise DataError(f"not a readable datasets folder ({type(err).__name__}: {err})", file=str(path)) from None


def _parquet_file(path: Path):
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path)
    except Exception as err:  # pyarrow.ArrowInvalid: a truncated file has no footer
        raise DataError(f"not a readable Parquet file ({err})", file=str(path)) from None


def _tabular(
    path: Path, cache_dir: Optional[Path], columns: set[str], text_field: str = "text"
) -> tuple[Sequence[dict], Sequence[dict]]:
    """(pairs, texts) of a JSONL/CSV/Parquet file or a ``save_to_disk`` folder with ``columns`` (a JSONL file's
    first record's keys): documents where it has the ``text_field`` column and no ``input``, else masked-entity
    pairs (a Parquet or folder row is numbered as a JSONL line is: from 1)."""
    if text_field in columns and "input" not in columns:
        variant = "" if text_field == "text" else f"text_field:{text_field}"
        return [], records_of_file(path, "texts", lambda: _documents(path, text_field), cache_dir, variant=variant)
    return records_of_file(path, "pairs", lambda: _pairs(path), cache_dir), []


def tabular_records(path: Path) -> Iterator[tuple[int, dict]]:
    """(row number from 1, record) of a Parquet file or a ``save_to_disk`` folder, read a batch at a time."""
    if is_saved_dataset(path):
        batches = (b for b in _saved_dataset(path).iter(batch_size=4096))
    else:
        batches = (b.to_pydict() for b in _parquet_batches(path))
    number = 0
    for batch in batches:
        for values in zip(*batch.values()):
            number += 1
            yield number, dict(zip(batch, values))


def _parquet_batches(path: Path):
    reader = _parquet_file(path)
    for group in range(reader.num_row_groups):
        try:
            table = reader.read_row_group(group)
        except Exception as err:
            raise DataError(f"unreadable Parquet row group {group} ({err})", file=str(path)) from None
        yield from table.to_batches(4096)


def txt_documents_of(path: Path, mode: str = "file", name: Optional[str] = None) -> Iterator[dict]:
    """The documents of a plain-text (UTF-8) file: ``file`` — the whole file, one document ``{text, doc_id:
    name}``; ``paragraph`` — each block of lines between blank lines, ``{text, doc_id: name#k}`` (k from 1).
    Texts are stripped of surrounding whitespace; a file or block of blank lines gives none."""
    name = name or path.stem
    if mode == "file":
        text = "".join(line for _, line in _decoded_lines(path)).strip()
        if text:
            yield {"text": text, "doc_id": name}
        return
    block: list[str] = []
    count = 0
    for _, line in itertools.chain(_decoded_lines(path), [(0, "")]):
        if line.strip():
            block.append(line)
            continue
        if block:
            count += 1
            yield {"text": "".join(block).strip(), "doc_id": f"{name}#{count}"}
            block = []


def _documents(path: Path, text_field: str = "text") -> Iterator[dict]:
    for number, record in numbered_records(path, (text_field,)):
        doc_id = record.get("doc_id")
        yield {
            "text": _text_cell(record, text_field, path, number),
            "doc_id": None if doc_id in (None, "") else str(doc_id),
        }


def _pairs(path: Path) -> Iterator[dict]:
    for number, record in numbered_records(path, ("input", "output")):
        source = _text_cell(record, "input", path, number)
        target = _text_cell(record, "output", path, number)
        if not any(mask in source for mask in MASK_TOKENS):
            raise DataError(
                f"no mask token ({', '.join(MASK_TOKENS)}) in the masked-entity input",
                file=str(path),
                line=number,
                field="input",
            )
        yield {"input": source, "output": target}


def _first_keys(path: Path) -> set[str]:
    if path.suffix.lower() == ".csv":
        return set(csv_header(path))
    for _, record in _jsonl_records(path):
        return set(record) if isinstance(record, dict) else set()
    return set()


def read_release_items(
    path: Path,
    fields: Optional[Mapping[str, str]],
    default_split: str,
    id_prefix: Optional[str],
    answers_column: Optional[str] = None,
) -> list[tuple[int, QAItem]]:
    """(line, QAItem) of a QA file that may lack ids (the EvolvingQA CSVs): ``id`` is the mapped id column
    when the file has one (duplicates fail), else ``<id_prefix>/L<line>`` (``L<line>`` without a prefix).
    ``answers`` come from the mapped column, else ``answers_column``, else ``answers``/``answer``, whichever
    the file has."""
    path = require_file(Path(path), "QA file")
    mapping = effective_fields(fields)
    keys = _first_keys(path)
    if "answers" not in mapping:
        candidates = [answers_column] if answers_column else ["answers", "answer"]
        mapping["answers"] = next((c for c in candidates if c in keys), candidates[-1])
    question = mapping.get("question", "question")
    id_column = mapping.get("id", "id")
    has_ids = id_column in keys
    if not has_ids:
        mapping["id"] = "__id__"
    checked = _check_mapping({k: v for k, v in mapping.items()})
    from_csv = path.suffix.lower() == ".csv"
    items: list[tuple[int, QAItem]] = []
    seen: dict[str, int] = {}
    for number, record in numbered_records(path, (question, mapping["answers"])):
        if not has_ids:
            record = {**record, "__id__": f"{id_prefix}/L{number}" if id_prefix else f"L{number}"}
        try:
            item = _item_from_record(record, checked, default_split, from_csv)
        except DataError as err:
            raise DataError(err.reason, file=str(path), line=number, field=err.field) from None
        if item.id in seen:
            raise DataError(
                f"duplicate id '{item.id}' (lines {seen[item.id]} and {number})",
                file=str(path),
                line=number,
                field=id_column,
            )
        seen[item.id] = number
        item.extra.pop("__id__", None)
        items.append((number, item))
    return items
