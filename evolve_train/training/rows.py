"""Training rows read straight from Arrow: ``rows[i]`` is a dict of int64 numpy arrays cut from the
tokenized examples' buffers, so the loop's memory does not grow with the corpus (docs/data.md).

Rows whose buffers lie in a memory-mapped file (the tokenized cache's ``rows.arrow``) are read from that file
with ``os.pread``, not through the map: a page touched through a map stays resident in the process (and this
kernel maps whole large folios, ~0.75 MB per random row), so a loop reading rows at random would make most of
the file resident; plain reads leave the pages in the page cache only. Each chunk's offsets (8 bytes per row
and column) are read into memory once. Where the buffer is not in a file mapping (rows built in memory, or
no ``/proc/self/maps``), ``rows[i]`` views the buffer.

:class:`TokenRows` is the loop's row sequence (``len(rows)``, ``rows[i]``, ``rows.lengths``): what
``training/examples.py: as_array_rows`` gives as a list of dicts, without building one Python object per
row. A ``datasets`` index mapping (``select``, ``shuffle``, the replay mix) is honoured without copying
the data.
"""

from __future__ import annotations

import bisect
import os
from pathlib import Path
from typing import Iterator, Optional

import numpy as np
import pyarrow as pa

from evolve_train.training.compact_rows import decode_row


class FileMaps:
    """The file mappings of this process (``/proc/self/maps``): which file, at which offset, an address of a
    memory-mapped buffer reads; and one open descriptor per file for ``os.pread``."""

    def __init__(self):
        self.spans: list[tuple[int, int, int, str]] = []  # (start, end, file offset, path), sorted by start
        maps = Path("/proc/self/maps")
        if maps.is_file():
            for line in maps.read_text().splitlines():
                parts = line.split(maxsplit=5)
                if len(parts) == 6 and parts[5].startswith("/") and not parts[5].endswith("(deleted)"):
                    start, end = (int(x, 16) for x in parts[0].split("-"))
                    self.spans.append((start, end, int(parts[2], 16), parts[5]))
        self.spans.sort()
        self.starts = [span[0] for span in self.spans]
        self.fds: dict[str, int] = {}

    def locate(self, address: int, size: int) -> Optional[tuple[int, int]]:
        """``(descriptor, file offset)`` of ``size`` bytes at ``address``, when they lie in one file mapping."""
        k = bisect.bisect_right(self.starts, address) - 1
        if k < 0 or size <= 0:
            return None
        start, end, offset, path = self.spans[k]
        if address + size > end:
            return None
        if path not in self.fds:
            self.fds[path] = os.open(path, os.O_RDONLY)
        return self.fds[path], offset + address - start

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()


def _in_file(array: pa.Array, maps: FileMaps) -> Optional[tuple[int, int]]:
    """Where a primitive array's data buffer (from its own offset on) lies in a mapped file, if it does."""
    buffer = array.buffers()[1]
    if buffer is None or array.null_count:
        return None
    width = array.type.bit_width // 8
    return maps.locate(buffer.address + array.offset * width, len(array) * width)


def _read(where: tuple[int, int], dtype: np.dtype, start: int, stop: int) -> np.ndarray:
    fd, offset = where
    size = np.dtype(dtype).itemsize
    data = os.pread(fd, (stop - start) * size, offset + start * size)
    return np.frombuffer(data, dtype=dtype)


class Values:
    """A chunk's flat values: read from the mapped file they lie in (:class:`FileMaps`), or viewed."""

    def __init__(self, array: pa.Array, maps: FileMaps):
        self.where = _in_file(array, maps)
        self.dtype = np.dtype(array.type.to_pandas_dtype())
        self.view = None if self.where else _numpy(array)

    def cut(self, start: int, stop: int) -> np.ndarray:
        if self.where:
            return _read(self.where, self.dtype, start, stop).astype(np.int64, copy=False)
        return np.asarray(self.view[start:stop], dtype=np.int64)


class FlatColumn:
    """One list column: per chunk, its offsets (held in memory) and its :class:`Values`; ``column[i]`` is
    row i's values."""

    def __init__(self, column: pa.ChunkedArray, maps: FileMaps):
        self.offsets, self.values = [], []
        for chunk in column.chunks:
            offsets = chunk.offsets  # honours a sliced chunk; indexes chunk.values
            where = _in_file(offsets, maps)
            self.offsets.append(
                _read(where, np.dtype(offsets.type.to_pandas_dtype()), 0, len(offsets)) if where else offsets.to_numpy()
            )
            self.values.append(Values(chunk.values, maps))
        sizes = [len(offsets) - 1 for offsets in self.offsets]
        self.starts = np.cumsum([0] + sizes)

    def __getitem__(self, row: int) -> np.ndarray:
        chunk = int(np.searchsorted(self.starts, row, side="right")) - 1
        offsets, local = self.offsets[chunk], row - self.starts[chunk]
        return self.values[chunk].cut(int(offsets[local]), int(offsets[local + 1]))

    def lengths(self) -> np.ndarray:
        return np.concatenate([np.diff(o) for o in self.offsets] or [np.zeros(0, np.int64)]).astype(np.int64)


def _numpy(values: pa.Array) -> np.ndarray:
    try:
        return values.to_numpy(zero_copy_only=True)  # a view on the (memory-mapped) buffer
    except pa.ArrowInvalid:
        return values.to_numpy(zero_copy_only=False)


class TokenRows:
    """The rows of tokenized ``examples`` (a ``datasets.Dataset`` of list columns: ``input_ids``, ``labels``, or
    the compact layout of ``training/compact_rows.py``, decoded row by row)."""

    def __init__(self, examples, columns: Optional[list[str]] = None):
        table = examples.data.table
        self.columns = list(columns or table.column_names)
        maps = FileMaps()
        self._flat = {name: FlatColumn(table.column(name), maps) for name in self.columns}
        self._maps = maps
        mapping = getattr(examples, "_indices", None)  # set by select()/shuffle(); None for contiguous rows
        self._index = None if mapping is None else mapping.column(0).to_numpy().astype(np.int64)
        lengths = self._flat["input_ids" if "input_ids" in self._flat else self.columns[0]].lengths()
        self.lengths: np.ndarray = lengths if self._index is None else lengths[self._index]
        """Number of ``input_ids`` of each row (int64)."""

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        i = int(i)
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        row = i % len(self)
        if self._index is not None:
            row = int(self._index[row])
        return decode_row({name: column[row] for name, column in self._flat.items()})

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        return (self[i] for i in range(len(self)))

    def __del__(self):
        maps = getattr(self, "_maps", None)
        if maps is not None:
            maps.close()
