"""Strict command-line keys: an override naming a key the schema does not know is refused, with or without ``+``.

Hydra refuses ``trainer.lrr=1`` (the typed schema is in struct mode) but lets ``+trainer.lrrr=1`` add a key that
nothing reads: a typo that silently changes nothing. :func:`check_overrides` refuses both, naming the nearest
known key, before Hydra runs (``train.py``, ``evolve-train``, ``compose_config``), so nothing is written.

Allowed besides the schema's keys: config-group selections (``model=llama``, ``+experiment=x``,
``hydra/launcher=...``), Hydra's own ``hydra.*`` keys, anything under a free-form field (a ``dict`` or ``Any``
field such as ``extra``), and anything under a prefix a plug-in registered with :func:`register_config_keys`
(a user's own method reading ``method.my_method.*``).
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

from evolve_train.config_keys import _section_type
from evolve_train.errors import ConfigError

_REGISTERED: set[str] = set()


def register_config_keys(*prefixes: str) -> None:
    """Let overrides set keys at or below each dotted ``prefix`` (for a plug-in that reads its own keys)."""
    _REGISTERED.update(p.strip(".") for p in prefixes if p.strip("."))


def _free_form(hint: Any) -> bool:
    """A field whose value may hold any keys (``dict[...]``, ``Any``)."""
    if hint is Any:
        return True
    origin = typing.get_origin(hint)
    if origin in (dict, typing.Union):
        return origin is dict or any(_free_form(arg) for arg in typing.get_args(hint))
    return hint is dict


def schema_keys(cls: type, prefix: str = "") -> list[str]:
    """Every dotted key of the schema ``cls`` (sections and leaves)."""
    keys = []
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        key = f"{prefix}{field.name}"
        keys.append(key)
        section = _section_type(hints.get(field.name))
        if section is not None:
            keys += schema_keys(section, key + ".")
    return keys


def known(cls: type, key: str) -> bool:
    """Whether dotted ``key`` names a field of ``cls`` (or lies under a free-form field or a registered prefix)."""
    if any(key == p or key.startswith(p + ".") for p in _REGISTERED):
        return True
    node: Optional[type] = cls
    parts = key.split(".")
    for index, part in enumerate(parts):
        fields = {f.name for f in dataclasses.fields(node)}
        if part not in fields:
            return False
        hint = typing.get_type_hints(node).get(part)
        section = _section_type(hint)
        if section is None:
            return index == len(parts) - 1 or _free_form(hint)
        node = section
    return True


def nearest(cls: type, key: str) -> Optional[str]:
    """The known key closest to ``key`` (same section first)."""
    keys = schema_keys(cls)
    section = key.rpartition(".")[0]
    siblings = [k for k in keys if k.rpartition(".")[0] == section]
    for pool in (siblings, keys):
        match = difflib.get_close_matches(key, pool, n=1, cutoff=0.6)
        if match:
            return match[0]
    return None


def _is_group(key: str, config_dirs: Iterable[Path]) -> bool:
    return "/" in key or any((Path(d) / key).is_dir() for d in config_dirs)


def unknown_overrides(cls: type, overrides: Sequence[str], config_dirs: Iterable[Path] = ()) -> list[str]:
    """One message per override whose key ``cls`` does not know (see the module docstring)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    config_dirs = list(config_dirs)
    problems = []
    for text in overrides:
        try:
            (override,) = OverridesParser.create().parse_overrides([text])
        except HydraException:
            continue  # malformed: Hydra's own error names it
        key = override.key_or_group
        if key == "hydra" or key.startswith(("hydra.", "hydra/")) or _is_group(key, config_dirs):
            continue
        if override.package:  # group@package selections
            continue
        if not known(cls, key):
            hint = nearest(cls, key)
            problems.append(
                f"unknown config key '{key}' in override '{text}'"
                + (f"; did you mean '{hint}'?" if hint else "")
                + " (the keys: evolve_train/config.py)"
            )
    return problems


VALUE_FLAGS = frozenset({"-cp", "--config-path", "-cn", "--config-name", "-cd", "--config-dir", "--info", "-i"})
"""Hydra's flags that take the next argument as their value."""


def command_overrides(args: Sequence[str]) -> list[str]:
    """The overrides of a ``train.py`` command line (its ``key=value`` arguments; Hydra's flags left out)."""
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg.startswith("-"):
            skip = arg in VALUE_FLAGS
        elif "=" in arg:
            out.append(arg)
    return out


def check_overrides(overrides: Sequence[str], config_dirs: Iterable[Path] = ()) -> None:
    """ConfigError naming every override whose key the schema does not know (and the nearest known key)."""
    from evolve_train.config import Config

    problems = unknown_overrides(Config, overrides, config_dirs)
    if problems:
        raise ConfigError("; ".join(problems))


__all__ = [
    "check_overrides",
    "command_overrides",
    "known",
    "nearest",
    "register_config_keys",
    "schema_keys",
    "unknown_overrides",
]
