"""What each config setting changes, said once per field, and the key lists read off it.

Every field of the schema (``evolve_train/config.py``) is one of:

- :data:`RESULT` (a plain field, the default): it changes what is trained or measured. It is part of the run's
  identity (``state.json``; a resume that changes it is refused), of the run-dir tag, and of every cache key
  that reads its section (the step-0 cache: ``data``, ``model``, ``trainer``, ``method``; the initial-evaluation
  cache: ``eval``).
- :data:`LATER_STEPS` (:func:`later_steps`): it changes the time steps after step 0 only (``trainer.epochs``,
  ``trainer.rewarm``...). Part of the identity; left out of the step-0 cache key.
- :data:`LABEL` (:func:`label`): it names the run and changes nothing it computes (``method.name``). Part of the
  identity (the name is part of what a run is); left out of the cache keys.
- :data:`NONE` (:func:`runtime`): it changes neither what is trained nor any metric (threads, logging, W&B,
  output places, how often a state is saved, batch sizes of evaluation). It may differ on resume, never
  names a run dir, and is left out of the cache keys, except where the field says ``hashed``: the cache
  keys keep it as they always have, so the entries they already stored stay valid.

A field marked on a section (``logger``, ``eval.gate``) classifies everything below it. :func:`keys_where` lists
the dotted keys of a class; :func:`key_part` is a section as a cache key hashes it. Python-only: this module
imports nothing of the package (``config.py`` imports it for the field helpers).
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Iterable

AFFECTS = "affects"
"""The metadata key of a field's class."""
HASHED = "hashed"
"""The metadata key of a :data:`NONE` field kept in the cache keys."""

RESULT = "result"
LATER_STEPS = "later_steps"
LABEL = "label"
NONE = "none"
CLASSES = (RESULT, LATER_STEPS, LABEL, NONE)

STEP0_LEAVES_OUT = (NONE, LATER_STEPS, LABEL)
"""What the step-0 cache key leaves out of each section it reads."""
INITIAL_EVAL_LEAVES_OUT = (NONE, LABEL)
"""What the initial-evaluation cache key leaves out of ``eval``."""


def _field(affects: str, default: Any, default_factory: Any, hashed: bool = False) -> Any:
    metadata = {AFFECTS: affects, **({HASHED: True} if hashed else {})}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def runtime(default: Any = dataclasses.MISSING, *, default_factory: Any = dataclasses.MISSING, hashed: bool = False):
    """A field that changes no result (:data:`NONE`); ``hashed``: the cache keys keep it all the same."""
    return _field(NONE, default, default_factory, hashed)


def later_steps(default: Any = dataclasses.MISSING, *, default_factory: Any = dataclasses.MISSING):
    """A field that changes the time steps after step 0 only (:data:`LATER_STEPS`)."""
    return _field(LATER_STEPS, default, default_factory)


def label(default: Any = dataclasses.MISSING, *, default_factory: Any = dataclasses.MISSING):
    """A field that names the run and changes nothing it computes (:data:`LABEL`)."""
    return _field(LABEL, default, default_factory)


def affects(field: dataclasses.Field) -> str:
    """The class of ``field`` (:data:`RESULT` unless its metadata says otherwise)."""
    value = field.metadata.get(AFFECTS, RESULT)
    if value not in CLASSES:
        raise ValueError(f"field {field.name}: metadata {AFFECTS}={value!r} is not one of {', '.join(CLASSES)}")
    return value


def hashed(field: dataclasses.Field) -> bool:
    return bool(field.metadata.get(HASHED, False))


def _section_type(hint: Any) -> Any:
    """The dataclass a field holds (``Optional[X]`` unwrapped), else ``None``."""
    if dataclasses.is_dataclass(hint):
        return hint
    candidates = [arg for arg in typing.get_args(hint) if dataclasses.is_dataclass(arg)]
    return candidates[0] if len(candidates) == 1 else None


def keys_where(cls: type, *classes: str, deep: bool = True, prefix: str = "") -> tuple[str, ...]:
    """The dotted keys of ``cls``'s fields whose class is one of ``classes``, in schema order. ``deep``: the
    fields of a plain nested section instead of the section (a marked section is one key: what is below it
    shares its class)."""
    unknown = set(classes) - set(CLASSES)
    if unknown:
        raise ValueError(f"unknown classes {sorted(unknown)}; known: {', '.join(CLASSES)}")
    hints = typing.get_type_hints(cls)
    found: list[str] = []
    for field in dataclasses.fields(cls):
        key = f"{prefix}{field.name}"
        kind = affects(field)
        section = _section_type(hints.get(field.name))
        if deep and kind == RESULT and section is not None:
            found.extend(keys_where(section, *classes, deep=True, prefix=key + "."))
        elif kind in classes:
            found.append(key)
    return tuple(found)


def under(key: str, keys: Iterable[str]) -> bool:
    """Whether ``key`` is one of ``keys`` or below one of them (``logger.wandb.project`` is under ``logger``)."""
    return any(key == k or key.startswith(k + ".") for k in keys)


def key_part(node: Any, leave_out: Iterable[str]) -> dict[str, Any]:
    """``dataclasses.asdict(node)`` without the section's own fields of a class in ``leave_out`` (those marked
    ``hashed`` stay); a nested section is kept whole."""
    leave_out = tuple(leave_out)
    part = dataclasses.asdict(node)
    for field in dataclasses.fields(node):
        if affects(field) in leave_out and not hashed(field):
            part.pop(field.name, None)
    return part
