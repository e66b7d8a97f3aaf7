"""The process's resident host memory, for log lines that say what a load cost (Linux ``/proc``; elsewhere
``None``)."""

from __future__ import annotations

import os
from typing import Optional


def resident_gib() -> Optional[float]:
    """Resident set size of this process in GiB, or ``None`` where ``/proc/self/statm`` is missing."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**30
