"""Evaluation batch size auto-tuned to memory.

Evaluation starts at ``eval.batch_size`` and, when a batch runs out of memory (what accelerate's
``should_reduce_batch_size`` counts as such: CUDA, XPU, MPS, HPU or CPU allocator errors), frees the
device cache, halves the size and retries that batch; the smaller size is kept for the rest of the
checkpoint's evaluation. Other errors pass through unchanged.
"""

from __future__ import annotations

import logging
from typing import Callable, Optional

from accelerate.utils.memory import clear_device_cache, should_reduce_batch_size

log = logging.getLogger(__name__)


class AutoBatchSize:
    """A batch size that halves on out-of-memory errors (down to 1) and remembers the size that fit."""

    def __init__(self, size: int):
        if size < 1:
            raise ValueError(f"batch size must be >= 1, got {size}")
        self.size = size

    def run(
        self, n_items: int, process: Callable[[int, int], None], span_end: Optional[Callable[[int, int], int]] = None
    ) -> None:
        """Call ``process(start, stop)`` on consecutive spans covering ``range(n_items)``.

        ``span_end(start, size)`` gives a span's end (default ``start + size``), for callers whose batch
        size counts something other than items; a span that runs out of memory is planned again at half
        the size."""
        start = 0
        while start < n_items:
            stop = min(n_items, span_end(start, self.size) if span_end else start + self.size)
            try:
                process(start, stop)
            except Exception as err:  # noqa: BLE001  (only out-of-memory errors are handled; others re-raised)
                if not should_reduce_batch_size(err) or self.size == 1:
                    raise
                clear_device_cache(garbage_collection=True)
                log.warning(
                    "evaluation ran out of memory at batch size %d; continuing at %d", self.size, self.size // 2
                )
                self.size //= 2
                continue
            start = stop


def as_auto(batch_size: "int | AutoBatchSize") -> AutoBatchSize:
    return batch_size if isinstance(batch_size, AutoBatchSize) else AutoBatchSize(batch_size)


def spans(n_items: int, size: int, span_end: Optional[Callable[[int, int], int]] = None) -> list[tuple[int, int]]:
    """The ``(start, stop)`` spans :meth:`AutoBatchSize.run` covers ``range(n_items)`` with at batch size
    ``size`` (no out-of-memory error): the batches a scoring or generation call forms."""
    found: list[tuple[int, int]] = []
    AutoBatchSize(size).run(n_items, lambda start, stop: found.append((start, stop)), span_end)
    return found


def in_batches(items: list, size: int) -> list[list]:
    """``items`` ``size`` at a time, in order."""
    return [items[i : i + size] for i in range(0, len(items), size)]
