"""Atomic text writes and JSON Lines files.

:func:`atomic_write_text` writes a sibling temporary file, fsyncs it and renames it over the target, so a
reader (or a resumed run) never sees half a file; a failed write removes the temporary file. JSONL rows are
written one ``json.dumps(row, ensure_ascii=False)`` per line and read back with blank lines skipped; a line
that is not JSON raises :class:`JsonlError` naming the file and the line.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable, Iterator


class JsonlError(ValueError):
    """A JSONL file has a line that is not JSON; the message names the file and the line."""

    def __init__(self, path: Path, line: int, reason: str):
        self.path, self.line, self.reason = Path(path), line, reason
        super().__init__(f"{path}, line {line}: {reason}")


def atomic_write_text(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` (UTF-8) in one rename; never leaves a partial file behind."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with tmp.open("w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


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


__all__ = ["JsonlError", "atomic_write_text", "iter_jsonl", "jsonl_text", "read_jsonl", "write_jsonl"]
