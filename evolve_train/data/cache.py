"""Where materialised datasets live (``data.cache_dir``), and how an entry is written so that nobody reads
half of one.

Two kinds of entries share the root (docs/data.md, "The tokenized cache"):

* ``<root>/corpora/<key>/`` — a training file's validated records as an Arrow file (``data/corpus.py``),
  keyed by the file's content;
* ``<root>/tokens/<key>/`` — a time step's tokenized training rows (``training/token_cache.py``), keyed by
  the step's data, the tokenizer, the objective, ``seq_len`` and the encoder's code.

An entry is built in ``<root>/<kind>/.<key>.tmp-<pid>/``, its files fsynced, then renamed to its final name
(``utils/io.py: atomic_dir``); only a final name is ever read, so an interrupted write leaves a temporary
directory that no one reads (it is removed when the same entry is next built). A file lock per key makes
concurrent writers (the ranks of one run, the jobs of a sweep) build an entry once: the first one builds it,
the others wait on the lock, outside any collective, and read it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import shutil
import time
from pathlib import Path
from typing import Callable, Iterator, Optional

from evolve_train.utils.io import atomic_dir, remove_stale_tmp

log = logging.getLogger(__name__)

OFF = ("off", "none", "null", "false", "")


def resolve_cache_dir(setting: Optional[str]) -> Optional[Path]:
    """The cache root of ``data.cache_dir``: the path given; ``null``: ``<sweep dir>/.data_cache`` in a Hydra
    multirun (shared by the sweep's runs, removed with the sweep), else no cache; ``off``: no cache."""
    if setting is not None:
        return None if str(setting).strip().lower() in OFF else Path(setting).expanduser()
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
        return Path(HydraConfig.get().sweep.dir) / ".data_cache"
    return None


def digest(parts) -> str:
    """A short SHA-256 of JSON-serialisable ``parts`` (the key of an entry)."""
    blob = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:24]


WAIT_REPORT_S = 30.0
"""How often a process waiting for another's entry says so in the log."""


@contextlib.contextmanager
def entry_lock(final: Path) -> Iterator[None]:
    """Hold the lock of entry ``final`` (``.<name>.lock`` next to it). A file lock, not a collective: a process
    waits for another's build as long as it takes (no process-group timeout), logging every
    :data:`WAIT_REPORT_S` seconds how long it has waited."""
    from filelock import FileLock, Timeout

    final.parent.mkdir(parents=True, exist_ok=True)
    lock, start = FileLock(str(final.parent / f".{final.name}.lock")), time.monotonic()
    while True:
        try:
            lock.acquire(timeout=WAIT_REPORT_S)
            break
        except Timeout:
            log.info("waiting for %s, built by another process (%.0f s)", final, time.monotonic() - start)
    try:
        yield
    finally:
        lock.release()


def write_entry(final: Path, build: Callable[[Path], None]) -> Path:
    """Build entry ``final`` atomically: ``build(tmp)`` fills a temporary directory, which is fsynced and
    renamed to ``final``. A ``final`` that exists already (another writer won) is kept as it is."""
    try:
        with atomic_dir(final, replace=False) as tmp:
            build(tmp)
    except OSError:  # AlreadyPublished among them
        if not final.is_dir():
            raise
    return final


def remove_incomplete(final: Path) -> None:
    """Remove what interrupted writes of ``final`` left: their temporary directories, and ``final`` itself
    (the caller found it incomplete, e.g. a copy cut short). Call with the entry's lock held."""
    remove_stale_tmp(final.parent, of=final.name)
    shutil.rmtree(final, ignore_errors=True)
