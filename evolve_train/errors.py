"""Errors raised on bad input, before any training starts."""

from __future__ import annotations

from typing import Optional


class EvolveTrainError(Exception):
    """Base class of the framework's own errors (shown to users without a traceback by the CLIs)."""


class ConfigError(EvolveTrainError):
    """A configuration value is invalid; the message names the key."""


class DataError(EvolveTrainError):
    """An input file is malformed. The message names the file, the line or row, and the field."""

    def __init__(
        self, reason: str, *, file: Optional[str] = None, line: Optional[int] = None, field: Optional[str] = None
    ):
        self.reason, self.file, self.line, self.field = reason, file, line, field
        where = []
        if file is not None:
            where.append(str(file))
        if line is not None:
            where.append(f"line {line}")
        if field is not None:
            where.append(f"field '{field}'")
        super().__init__(f"{', '.join(where)}: {reason}" if where else reason)
