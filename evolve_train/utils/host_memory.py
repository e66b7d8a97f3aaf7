"""The process's resident host memory (Linux ``/proc``; elsewhere ``None``): for the log line that says what a
model load cost, and for the memory benchmarks."""

from __future__ import annotations

import os
from typing import Optional


def resident_bytes() -> Optional[int]:
    """Resident set size of this process in bytes, or ``None`` where ``/proc/self/statm`` is missing."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")


def resident_gib() -> Optional[float]:
    """:func:`resident_bytes` in GiB."""
    resident = resident_bytes()
    return None if resident is None else resident / 2**30
