"""Compact tokenized rows: what the tokenized cache stores and memory-maps (docs/data.md, "Compact rows").

A row's token ids are stored in the smallest unsigned type that holds the vocabulary (``uint16`` below 2^16
ids, else ``uint32``); its labels and position ids are not stored token by token but derived when a batch is
built (:func:`decode_row`):

* ``label_skip`` (``list<uint32>``): the ``[start, stop)`` pairs of the row's positions whose label is
  ``IGNORE``; every other label is the token id at that position (a causal row: the context of a masked
  pair, the first token of each packed document);
* ``segments`` (``list<uint32>``, packed ``clm`` rows only): where the position ids restart at 0 after the
  row's start (each packed document's start); positions count up from each start.

Rows whose labels are not the ids (an encoder-decoder's targets) keep a ``labels`` column of ``int32``. So a
packed ``clm`` row of a vocabulary under 2^16 takes 2 bytes per token plus 12 bytes per document and 12 per
row, against 24 bytes per token for three ``int64`` columns. :func:`decode_row` gives back exactly the rows
the text format encoded (``input_ids``, ``labels``, ``position_ids`` as int64), so batches are unchanged.
"""

from __future__ import annotations

import itertools
from typing import Iterable, Iterator, Optional

import numpy as np
import pyarrow as pa

from evolve_train.models.packing import PackedBatch

IGNORE = -100
SKIP, SEGMENTS = "label_skip", "segments"
CHUNK = 32 << 20
"""Bytes of rows per record batch written (:func:`coalesce`)."""


def id_type(vocab_size: int) -> pa.DataType:
    """The smallest unsigned Arrow type holding ids ``0 .. vocab_size - 1``."""
    return pa.uint16() if vocab_size <= 1 << 16 else pa.uint32()


def is_compact(columns: Iterable[str]) -> bool:
    return SKIP in set(columns) or SEGMENTS in set(columns)


def _flat(rows: list, dtype=np.int64) -> tuple[np.ndarray, np.ndarray]:
    """Rows (lists of ints) -> (flat values, offsets)."""
    lengths = np.fromiter((len(row) for row in rows), dtype=np.int64, count=len(rows))
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = np.fromiter(itertools.chain.from_iterable(rows), dtype=dtype, count=int(offsets[-1]))
    return values, offsets


def _list_array(values: np.ndarray, offsets: np.ndarray, value_type: pa.DataType) -> pa.Array:
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values, type=value_type))


def _skip_spans(ids: np.ndarray, labels: np.ndarray, offsets: np.ndarray) -> Optional[pa.Array]:
    """The ``label_skip`` column of a batch, or ``None`` when some label is neither ``IGNORE`` nor its id."""
    skip = labels == IGNORE
    if not np.all(skip | (labels == ids)):
        return None
    return _spans(skip, offsets)


def _spans(skip: np.ndarray, offsets: np.ndarray) -> pa.Array:
    """The ``label_skip`` column of rows (``offsets``) whose positions ``skip`` have no target."""
    n = len(skip)
    row_start = np.zeros(n, dtype=bool)
    row_start[offsets[:-1][offsets[:-1] < n]] = True
    row_end = np.zeros(n, dtype=bool)
    row_end[offsets[1:][offsets[1:] > 0] - 1] = True
    before = np.concatenate([[False], skip[:-1]]) & ~row_start
    after = np.concatenate([skip[1:], [False]]) & ~row_end
    starts = np.flatnonzero(skip & ~before)
    stops = np.flatnonzero(skip & ~after) + 1
    row = np.searchsorted(offsets, starts, side="right") - 1
    local = np.stack([starts - offsets[row], stops - offsets[row]], axis=1).ravel()
    counts = np.bincount(row, minlength=len(offsets) - 1) * 2
    span_offsets = np.concatenate([[0], np.cumsum(counts)])
    return _list_array(local, span_offsets, pa.uint32())


def _segments(positions: np.ndarray, offsets: np.ndarray) -> pa.Array:
    """The ``segments`` column of a batch's position ids (ValueError where they do not count up from 0 after
    each start)."""
    n = len(positions)
    row_start = np.zeros(n, dtype=bool)
    row_start[offsets[:-1][offsets[:-1] < n]] = True
    previous = np.concatenate([[-1], positions[:-1]])
    restart = positions == 0
    if not np.all(np.where(row_start, restart, restart | (positions == previous + 1))):
        raise ValueError("position ids that do not count up from 0 within each packed document")
    return _starts(restart, offsets)


def _starts(restart: np.ndarray, offsets: np.ndarray) -> pa.Array:
    """The ``segments`` column of rows (``offsets``) whose position ids restart at 0 where ``restart``."""
    n = len(restart)
    row_start = np.zeros(n, dtype=bool)
    row_start[offsets[:-1][offsets[:-1] < n]] = True
    starts = np.flatnonzero(restart & ~row_start)
    row = np.searchsorted(offsets, starts, side="right") - 1
    counts = np.bincount(row, minlength=len(offsets) - 1)
    return _list_array(starts - offsets[row], np.concatenate([[0], np.cumsum(counts)]), pa.uint32())


def _check_fits(ids: np.ndarray, ids_type: pa.DataType) -> None:
    if len(ids) and int(ids.max()) > np.iinfo(ids_type.to_pandas_dtype()).max:
        raise ValueError(f"token id {int(ids.max())} does not fit {ids_type}")


def compact_batch(batch: dict[str, list], ids_type: pa.DataType, derived: Optional[bool] = None) -> pa.RecordBatch:
    """A batch of rows (``{column: [[int, ...], ...]}`` with ``input_ids``, ``labels`` and maybe
    ``position_ids``) as a compact record batch. ``derived``: whether labels must be ``label_skip`` (True) or
    an ``int32`` ``labels`` column (False); ``None``: ``label_skip`` where the labels allow it. A
    :class:`PackedBatch` (flat arrays) is stored without being made into lists."""
    if isinstance(batch, PackedBatch):
        _check_fits(batch.ids, ids_type)
        columns = {
            "input_ids": _list_array(batch.ids, batch.offsets, ids_type),
            SKIP: _spans(batch.skip, batch.offsets),
            SEGMENTS: _starts(batch.starts, batch.offsets),
        }
        return pa.RecordBatch.from_pydict(columns)
    ids, offsets = _flat(batch["input_ids"])
    _check_fits(ids, ids_type)
    columns = {"input_ids": _list_array(ids, offsets, ids_type)}
    labels, label_offsets = _flat(batch["labels"])
    skip = None
    if derived is not False and np.array_equal(label_offsets, offsets):
        skip = _skip_spans(ids, labels, offsets)
    if derived and skip is None:
        raise ValueError("rows whose labels are not their token ids in a layout that derives them")
    if skip is not None:
        columns[SKIP] = skip
    else:
        columns["labels"] = _list_array(labels, label_offsets, pa.int32())
    if "position_ids" in batch:
        positions, _ = _flat(batch["position_ids"])
        columns[SEGMENTS] = _segments(positions, offsets)
    extra = [name for name in batch if name not in ("input_ids", "labels", "position_ids")]
    if extra:
        raise ValueError(f"tokenized rows with unknown columns {extra}")
    return pa.RecordBatch.from_pydict(columns)


def compact_batches(batches: Iterable[dict[str, list]], vocab_size: int) -> tuple[Optional[pa.Schema], Iterator]:
    """``(schema, record batches)`` of ``batches`` of rows; the layout is fixed by the first batch that holds
    rows (``schema`` ``None`` when none does)."""
    batches = (batch for batch in batches if _has_rows(batch))
    first = next(batches, None)
    if first is None:
        return None, iter(())
    ids_type = id_type(vocab_size)
    head = compact_batch(first, ids_type)
    derived = SKIP in head.schema.names
    rest = (compact_batch(batch, ids_type, derived) for batch in batches)
    return head.schema, itertools.chain([head], rest)


def _has_rows(batch) -> bool:
    return batch.n_rows > 0 if isinstance(batch, PackedBatch) else bool(len(batch.get("input_ids", ())))


def empty_schema(vocab_size: int) -> pa.Schema:
    """The layout of a step that gave no rows."""
    return pa.schema([("input_ids", pa.list_(id_type(vocab_size))), (SKIP, pa.list_(pa.uint32()))])


def decode_row(row: dict) -> dict[str, np.ndarray]:
    """A stored row (compact, or plain ``input_ids``/``labels``/``position_ids``) as int64 arrays of
    ``input_ids``, ``labels`` and, for packed rows, ``position_ids``."""
    ids = np.asarray(row["input_ids"], dtype=np.int64)
    if SKIP not in row and SEGMENTS not in row:
        return {name: np.asarray(values, dtype=np.int64) for name, values in row.items()}
    out = {"input_ids": ids}
    if SKIP in row:
        labels = ids.copy()
        spans = np.asarray(row[SKIP], dtype=np.int64)
        for start, stop in zip(spans[0::2], spans[1::2]):
            labels[start:stop] = IGNORE
        out["labels"] = labels
    else:
        out["labels"] = np.asarray(row["labels"], dtype=np.int64)
    if SEGMENTS in row:
        starts = np.concatenate([[0], np.asarray(row[SEGMENTS], dtype=np.int64)])
        sizes = np.diff(np.concatenate([starts, [len(ids)]]))
        out["position_ids"] = np.arange(len(ids), dtype=np.int64) - np.repeat(starts, sizes)
    return out


def plain_batch(rows: list[dict]) -> dict[str, list]:
    """Decoded rows back into a batch of lists (``{column: [[int, ...], ...]}``)."""
    names = list(rows[0]) if rows else ["input_ids", "labels"]
    return {name: [np.asarray(row[name]).tolist() for row in rows] for name in names}


def write_rows(batches: Iterable[dict[str, list]], sink, vocab_size: int) -> int:
    """Write batches of tokenized rows to ``sink`` (a path or a buffer stream) as an Arrow IPC stream of compact
    rows, one record batch per batch, holding one batch at a time; the row count."""
    from evolve_train.data.corpus import write_stream

    schema, records = compact_batches(batches, vocab_size)
    return write_stream(coalesce(records), schema or empty_schema(vocab_size), sink)


def coalesce(records: Iterable[pa.RecordBatch], size: int = CHUNK) -> Iterator[pa.RecordBatch]:
    """``records`` joined into record batches of about ``size`` bytes: a reader that maps the file touches one
    message header per batch, so few large batches keep it from paging in the file."""
    pending, held = [], 0
    for record in records:
        pending.append(record)
        held += record.nbytes
        if held >= size:
            yield pa.concat_batches(pending)
            pending, held = [], 0
    if pending:
        yield pa.concat_batches(pending)


def rows_in_memory(batches: Iterable[dict[str, list]], vocab_size: int):
    """Compact rows as an in-memory ``datasets.Dataset``."""
    from datasets import Dataset

    sink = pa.BufferOutputStream()
    write_rows(batches, sink, vocab_size)
    return Dataset.from_buffer(sink.getvalue())


def like(rows: list[dict], dataset):
    """Decoded ``rows`` as a ``datasets.Dataset`` in ``dataset``'s layout (compact or plain)."""
    from datasets import Dataset

    if not is_compact(dataset.column_names):
        return Dataset.from_dict(plain_batch(rows), features=dataset.features)
    ids_type = dataset.data.schema.field("input_ids").type.value_type
    batch = compact_batch(plain_batch(rows), ids_type, SKIP in dataset.column_names)
    return Dataset(pa.Table.from_batches([batch]).cast(dataset.data.schema))
