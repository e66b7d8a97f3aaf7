"""Atomic writes (one scheme for files and directories) and JSON Lines files.

Everything that must appear complete or not at all is written under a temporary sibling name,
``<parent>/.<name>.tmp-<pid>`` (:func:`tmp_path`), fsynced (its files, its directories, then the parent once
renamed) and renamed to its final name (:func:`publish`): :func:`atomic_file` and :func:`atomic_write_text`
for a file, :func:`atomic_dir` for a directory. A failed write (an exception, a full disk) removes its
temporary name before the error propagates; a kill leaves it, and :func:`remove_stale_tmp` removes such
leftovers (names of this scheme only). Publishing either replaces what is there (an existing directory is
deleted first: a rename cannot replace a non-empty one) or, with ``replace=False`` (an entry shared by
concurrent jobs), keeps a directory another writer published first and raises :class:`AlreadyPublished`.

JSONL rows are written one ``json.dumps(row, ensure_ascii=False)`` per line and read back with blank lines
skipped; a line that is not JSON raises :class:`JsonlError` naming the file and the line.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional

TMP_NAME = re.compile(r"^\.(?P<name>.+)\.tmp-(?P<pid>\d+)$")
"""A temporary name of :func:`tmp_path`: ``.<final name>.tmp-<pid>``."""


class JsonlError(ValueError):
    """A JSONL file has a line that is not JSON; the message names the file and the line."""

    def __init__(self, path: Path, line: int, reason: str):
        self.path, self.line, self.reason = Path(path), line, reason
        super().__init__(f"{path}, line {line}: {reason}")


class AlreadyPublished(FileExistsError):
    """``publish(..., replace=False)``: another writer published the directory first; its copy is kept."""


# -- the atomic write --------------------------------------------------------------------------------------


def tmp_path(final: Path, pid: Optional[int] = None) -> Path:
    """The temporary sibling ``final`` is written under: ``<parent>/.<name>.tmp-<pid>`` (this process's pid)."""
    final = Path(final)
    return final.with_name(f".{final.name}.tmp-{os.getpid() if pid is None else pid}")


def is_tmp_name(name: str, of: Optional[str] = None) -> bool:
    """Whether ``name`` is a temporary name of :func:`tmp_path` (of the final name ``of``, when given)."""
    match = TMP_NAME.match(name)
    return match is not None and (of is None or match.group("name") == of)


def fsync_dir(path: Path) -> None:
    """Flush a directory's entries to disk (skipped where the file system refuses it)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems refuse fsync on directories
        pass
    finally:
        os.close(fd)


def fsync_tree(path: Path) -> None:
    """Flush a file, or every file and directory under ``path`` and ``path`` itself, to disk."""
    path = Path(path)
    if not path.is_dir():
        with path.open("rb") as handle:
            os.fsync(handle.fileno())
        return
    for item in sorted(path.rglob("*")):
        if item.is_file():
            with item.open("rb") as handle:
                os.fsync(handle.fileno())
        elif item.is_dir():
            fsync_dir(item)
    fsync_dir(path)


def discard(path: Path) -> None:
    """Delete a temporary file or directory (nothing if it is gone)."""
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def publish(tmp: Path, final: Path, *, replace: bool = True) -> None:
    """Fsync the complete ``tmp`` and rename it to ``final``, then fsync the parent directory.

    ``replace=True``: what is at ``final`` is replaced (a directory there is deleted first). ``replace=False``
    (a directory): one at ``final`` already, published by another writer, is kept and :class:`AlreadyPublished`
    raised (the caller discards ``tmp``); any other failure of the rename propagates as it is."""
    tmp, final = Path(tmp), Path(final)
    fsync_tree(tmp)
    if replace and final.is_dir() and not final.is_symlink():
        shutil.rmtree(final)
    try:
        os.replace(tmp, final)  # a rename: it fails where a non-empty directory is
    except OSError as error:
        if replace or not final.exists():
            raise
        raise AlreadyPublished(errno.EEXIST, f"{final} was published by another writer", str(final)) from error
    fsync_dir(final.parent)


@contextlib.contextmanager
def atomic_dir(final: Path, *, replace: bool = True) -> Iterator[Path]:
    """Write the directory ``final`` atomically: yields its empty temporary directory (:func:`tmp_path`; the
    parents are created); when the block succeeds it is published (:func:`publish`), else deleted."""
    final = Path(final)
    tmp = tmp_path(final)
    discard(tmp)
    try:
        tmp.mkdir(parents=True)
        yield tmp
        publish(tmp, final, replace=replace)
    finally:
        discard(tmp)


@contextlib.contextmanager
def atomic_file(final: Path) -> Iterator[Path]:
    """Write the file ``final`` atomically: yields the temporary path to write (the parent must exist); when
    the block succeeds it replaces ``final`` (:func:`publish`), else it is deleted."""
    tmp = tmp_path(final)
    try:
        yield tmp
        publish(tmp, final)
    finally:
        discard(tmp)


def atomic_write_text(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` (UTF-8) in one rename; never leaves a partial file behind."""
    with atomic_file(path) as tmp, tmp.open("w", encoding="utf-8") as handle:
        handle.write(text)


def remove_stale_tmp(parent: Path, *, of: Optional[str] = None, recursive: bool = False) -> list[Path]:
    """Delete the temporary names (:func:`tmp_path`) in ``parent`` (or anywhere under it, ``recursive``) left by
    interrupted writes; ``of``: only those of that final name. Nothing else is touched. Returns what was removed.

    Call it where no other process is writing (a run's own dir at start, an entry under its lock)."""
    parent = Path(parent)
    if not parent.is_dir():
        return []
    found = parent.rglob(".*") if recursive else parent.glob(".*")
    removed: list[Path] = []
    for path in sorted(p for p in found if is_tmp_name(p.name, of)):
        if any(path.is_relative_to(gone) for gone in removed):  # inside a removed temporary dir
            continue
        discard(path)
        removed.append(path)
    return removed


# -- JSON Lines --------------------------------------------------------------------------------------------


def jsonl_text(rows: Iterable[Any]) -> str:
    """The JSONL text of ``rows``: one compact JSON document per line, non-ASCII kept as is."""
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def write_jsonl(path: Path, rows: Iterable[Any]) -> None:
    """Write ``rows`` to ``path`` atomically (see :func:`atomic_write_text`)."""
    atomic_write_text(Path(path), jsonl_text(rows))


def iter_jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    """``(line number, row)`` of each non-blank line; :class:`JsonlError` (file, line) for a line that is not JSON."""
    path = Path(path)
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as err:
            raise JsonlError(path, number, f"malformed JSON ({err.msg})") from None


def read_jsonl(path: Path, missing_ok: bool = True) -> list:
    """The rows of a JSONL file (blank lines skipped); ``[]`` for a missing file when ``missing_ok``.

    Raises :class:`JsonlError` (file and line) for a line that is not JSON.
    """
    path = Path(path)
    if missing_ok and not path.exists():
        return []
    return [row for _, row in iter_jsonl(path)]


__all__ = [
    "AlreadyPublished",
    "JsonlError",
    "atomic_dir",
    "atomic_file",
    "atomic_write_text",
    "discard",
    "fsync_dir",
    "fsync_tree",
    "is_tmp_name",
    "iter_jsonl",
    "jsonl_text",
    "publish",
    "read_jsonl",
    "remove_stale_tmp",
    "tmp_path",
    "write_jsonl",
]
