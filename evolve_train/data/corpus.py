"""Training corpora held as Arrow, not as Python lists: a file of any size is validated line by line and its
records written to an Arrow file (memory-mapped when it lies in ``data.cache_dir``), so memory does not grow
with the corpus.

:class:`ArrowRecords` is what a loader puts in ``TimeStep.pairs`` / ``TimeStep.texts`` for a training file:
a read-only sequence of record dicts (``len``, indexing, lazy iteration in batches) over a
``datasets.Dataset``, with a content :attr:`~ArrowRecords.fingerprint`. Code that iterates a step's corpus
(hygiene checks, the transforms) works on it unchanged; the text format reads it in column batches
(:func:`record_batches`) and writes its tokenized rows with :func:`write_int_rows`. The embedded world keeps
plain lists.

Whole-corpus scans (iteration, :func:`record_batches`) read an entry's Arrow file with plain reads, one record
batch at a time, not through the memory map: pages read that way stay in the kernel's page cache but are not
mapped into the process, so its resident memory (``time -v``'s peak RSS) does not grow with the corpus.
Random access (``records[i]``) goes through the map.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional

import pyarrow as pa
from datasets import Dataset, concatenate_datasets

from evolve_train.data import cache

log = logging.getLogger(__name__)
FORMAT = 1
"""Version of the corpus entries' layout (part of their key)."""
SCHEMAS = {
    "pairs": pa.schema([("input", pa.string()), ("output", pa.string())]),
    "texts": pa.schema([("text", pa.string()), ("doc_id", pa.string())]),
}
BATCH = 4096
"""Records per Arrow record batch while writing (bounds the Python objects alive at once)."""
LARGE_FILE = 1 << 30
"""A training file this large read without ``data.cache_dir`` is held in memory: warn."""


class ArrowRecords(Sequence):
    """A corpus (masked-entity pairs or documents) as a sequence of dicts over an Arrow ``dataset``."""

    def __init__(self, dataset: Dataset, fingerprint: str):
        self.dataset = dataset
        self.fingerprint = fingerprint
        """SHA-256 (hex) of what the records were read from: equal fingerprints, equal records."""

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return _plain(self.dataset[index if index >= 0 else index + len(self)])

    def __iter__(self) -> Iterator[dict]:
        for batch in self.batches(self.dataset.column_names):
            names = list(batch)
            for values in zip(*batch.values()):
                yield _plain(dict(zip(names, values)))

    def batches(self, columns: list[str], size: int = BATCH) -> Iterator[dict[str, list]]:
        """``columns`` of the records in order, at most ``size`` records a batch, as lists (nulls: ``None``):
        read from the dataset's Arrow files with plain reads when it is one or more whole files (see the
        module docstring), else from the dataset."""
        files = self._files()
        if files is None:
            yield from self.dataset.select_columns(columns).iter(batch_size=size)
            return
        for name in files:
            with pa.OSFile(name) as source:
                for batch in pa.ipc.open_stream(source):
                    for start in range(0, batch.num_rows, size):
                        yield batch.slice(start, size).select(columns).to_pydict()

    def _files(self) -> Optional[list[str]]:
        """The Arrow files holding the records, in order, when the dataset is exactly their rows."""
        if getattr(self.dataset, "_indices", None) is not None:
            return None
        files = [entry["filename"] for entry in self.dataset.cache_files]
        return files or None

    def __eq__(self, other) -> bool:
        if isinstance(other, ArrowRecords):
            return self.fingerprint == other.fingerprint
        return isinstance(other, Sequence) and len(self) == len(other) and list(self) == list(other)

    __hash__ = None

    def __add__(self, other) -> list:
        return list(self) + list(other)

    def __radd__(self, other) -> list:
        return list(other) + list(self)

    def __repr__(self) -> str:  # what json.dumps(default=str) writes: the content's fingerprint
        return f"ArrowRecords(rows={len(self)}, fingerprint={self.fingerprint})"


def _plain(record: dict) -> dict:
    """A record as the loaders' dicts: absent optional fields (Arrow nulls) left out."""
    return {key: value for key, value in record.items() if value is not None}


def file_digest(path: Path) -> str:
    """SHA-256 of a file's bytes, read in blocks; of a folder (a ``save_to_disk`` dataset), of its files' names
    and digests."""
    path = Path(path)
    if path.is_dir():
        parts = [f"{p.relative_to(path).as_posix()}:{file_digest(p)}" for p in sorted(path.rglob("*")) if p.is_file()]
        return hashlib.sha256("\n".join(parts).encode("utf-8")).hexdigest()
    sha = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def _batches(records: Iterable[dict], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    chunk: list[dict] = []
    for record in records:
        chunk.append(record)
        if len(chunk) == BATCH:
            yield pa.RecordBatch.from_pylist(chunk, schema=schema)
            chunk = []
    if chunk:
        yield pa.RecordBatch.from_pylist(chunk, schema=schema)


def write_arrow(records: Iterable[dict], schema: pa.Schema, sink) -> int:
    """Write ``records`` to ``sink`` (a path or a buffer stream) as an Arrow IPC stream; the record count."""
    return write_stream(_batches(records, schema), schema, sink)


def write_stream(batches: Iterable[pa.RecordBatch], schema: pa.Schema, sink) -> int:
    """Write record ``batches`` to ``sink`` (a path or a buffer stream) as an Arrow IPC stream, one at a
    time; the row count."""
    count = 0
    with pa.ipc.new_stream(sink, schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
            count += batch.num_rows
    return count


def records_of_file(
    path: Path, kind: str, records: Callable[[], Iterable[dict]], cache_dir: Optional[Path], variant: str = ""
) -> ArrowRecords:
    """The validated ``records()`` of training file ``path`` (``kind``: ``pairs`` or ``texts``) as Arrow:
    written once into ``<cache_dir>/corpora/`` and memory-mapped, or (no cache) held in an in-memory buffer.
    ``variant``: what else decides the records besides the file's bytes (a ``.txt`` file's document split and
    document name), part of the fingerprint."""
    fingerprint = hashlib.sha256(
        (f"{kind}:{FORMAT}:{variant}:" if variant else f"{kind}:{FORMAT}:").encode() + file_digest(path).encode()
    ).hexdigest()
    schema = SCHEMAS[kind]
    if cache_dir is None:
        if path.stat().st_size >= LARGE_FILE:
            log.warning(
                "%s: %.1f GB held in memory; set data.cache_dir to stream it to disk instead",
                path,
                path.stat().st_size / 1e9,
            )
        sink = pa.BufferOutputStream()
        write_arrow(records(), schema, sink)
        return ArrowRecords(Dataset.from_buffer(sink.getvalue()), fingerprint)
    final = Path(cache_dir) / "corpora" / fingerprint[:24]
    with cache.entry_lock(final):
        if not (final / "source.json").is_file():  # written last: the entry is complete
            cache.remove_incomplete(final)
            cache.write_entry(final, lambda tmp: _write_entry(tmp, path, records, schema))
    return ArrowRecords(Dataset.from_file(str(final / "records.arrow")), fingerprint)


def _write_entry(tmp: Path, path: Path, records: Callable[[], Iterable[dict]], schema: pa.Schema) -> None:
    count = write_arrow(records(), schema, str(tmp / "records.arrow"))
    (tmp / "source.json").write_text(json.dumps({"file": str(path), "records": count}) + "\n", encoding="utf-8")


def concat_records(parts: list) -> Sequence[dict]:
    """One step's corpus from its files' records (``[]`` when none has any)."""
    parts = [part for part in parts if len(part)]
    if not parts:
        return []
    if len(parts) == 1:
        return parts[0]
    if all(isinstance(part, ArrowRecords) for part in parts):
        fingerprint = hashlib.sha256(":".join(p.fingerprint for p in parts).encode()).hexdigest()
        return ArrowRecords(concatenate_datasets([p.dataset for p in parts]), fingerprint)
    return [record for part in parts for record in part]


def record_batches(records: Sequence[dict], columns: list[str], size: int = BATCH) -> Iterator[dict[str, list]]:
    """``records``' ``columns`` in order, at most ``size`` records a batch, as ``{column: list}``: an
    :class:`ArrowRecords` streamed (:meth:`ArrowRecords.batches`), a list sliced."""
    if isinstance(records, ArrowRecords):
        yield from records.batches(columns, size)
        return
    for start in range(0, len(records), size):
        chunk = records[start : start + size]
        yield {name: [record[name] for record in chunk] for name in columns}


ROW_COLUMNS = ("input_ids", "labels")
"""The columns of tokenized rows when there are none to infer them from (an empty step)."""


def write_int_rows(batches: Iterable[dict[str, list]], sink) -> int:
    """Write batches of tokenized rows (``{column: [[int, ...], ...]}``, every column a list of int lists) to
    ``sink`` (a path or a buffer stream) as an Arrow IPC stream of ``list<int64>`` columns (the first batch's
    columns), one record batch per batch, without holding more than one batch; the row count."""
    batches = iter(batches)
    first = next(batches, None)
    schema = pa.schema([(name, pa.list_(pa.int64())) for name in (first or ROW_COLUMNS)])
    rest = () if first is None else itertools.chain([first], batches)
    return write_stream((pa.RecordBatch.from_pydict(dict(batch), schema=schema) for batch in rest), schema, sink)


def rows_in_memory(batches: Iterable[dict[str, list]]) -> Dataset:
    """Tokenized rows as an in-memory ``datasets.Dataset`` (:func:`write_int_rows` into a buffer)."""
    sink = pa.BufferOutputStream()
    write_int_rows(batches, sink)
    return Dataset.from_buffer(sink.getvalue())


def records_fingerprint(records: Sequence[dict]) -> str:
    """SHA-256 of a corpus: an :class:`ArrowRecords`' own fingerprint, else of the records as JSON."""
    if isinstance(records, ArrowRecords):
        return records.fingerprint
    return hashlib.sha256(json.dumps(list(records), sort_keys=True, default=str).encode("utf-8")).hexdigest()


def step_fingerprint(step) -> str:
    """SHA-256 of a time step's training data (its pairs and its documents)."""
    parts = {"pairs": records_fingerprint(step.pairs), "texts": records_fingerprint(step.texts)}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode("utf-8")).hexdigest()
