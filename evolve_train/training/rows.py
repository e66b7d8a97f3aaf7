"""Training rows read straight from Arrow: ``rows[i]`` is a dict of int64 numpy arrays that view the
tokenized examples' buffers (memory-mapped when they come from the tokenized cache), so the loop's memory
does not grow with the corpus beyond the mapping (docs/data.md).

:class:`TokenRows` is the loop's row sequence (``len(rows)``, ``rows[i]``, ``rows.lengths``): what
``training/examples.py: as_array_rows`` gives as a list of dicts, without building one Python object per
row. A ``datasets`` index mapping (``select``, ``shuffle``, the replay mix) is honoured without copying
the data.
"""

from __future__ import annotations

from typing import Iterator, Optional

import numpy as np
import pyarrow as pa


class FlatColumn:
    """One list column as per-chunk (flat values, offsets) numpy views; ``column[i]`` is row i's values."""

    def __init__(self, column: pa.ChunkedArray):
        self.values, self.offsets = [], []
        for chunk in column.chunks:
            self.offsets.append(chunk.offsets.to_numpy())  # honours a sliced chunk; indexes chunk.values
            self.values.append(_numpy(chunk.values))
        sizes = [len(offsets) - 1 for offsets in self.offsets]
        self.starts = np.cumsum([0] + sizes)

    def __getitem__(self, row: int) -> np.ndarray:
        chunk = int(np.searchsorted(self.starts, row, side="right")) - 1
        offsets, local = self.offsets[chunk], row - self.starts[chunk]
        return np.asarray(self.values[chunk][offsets[local]:offsets[local + 1]], dtype=np.int64)

    def lengths(self) -> np.ndarray:
        return np.concatenate([np.diff(o) for o in self.offsets] or [np.zeros(0, np.int64)]).astype(np.int64)


def _numpy(values: pa.Array) -> np.ndarray:
    try:
        return values.to_numpy(zero_copy_only=True)  # a view on the (memory-mapped) buffer
    except pa.ArrowInvalid:
        return values.to_numpy(zero_copy_only=False)


class TokenRows:
    """The rows of tokenized ``examples`` (a ``datasets.Dataset`` of list columns: ``input_ids``, ``labels``)."""

    def __init__(self, examples, columns: Optional[list[str]] = None):
        table = examples.data.table
        self.columns = list(columns or table.column_names)
        self._flat = {name: FlatColumn(table.column(name)) for name in self.columns}
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
        return {name: column[row] for name, column in self._flat.items()}

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        return (self[i] for i in range(len(self)))
