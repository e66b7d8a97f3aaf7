"""Configuration names that changed, still accepted under their former spelling.

A former key given on the command line (``eval.contamination.variants=5``) is rewritten to its current name with
one warning line, before Hydra composes the config; a former evaluator name in ``eval.evaluators`` is read as the
current one; a run dir saved under the former names compares equal to the same config under the current ones, so
it resumes. Former names in a YAML file of your own are refused by Hydra's schema check: rename them there.
"""

from __future__ import annotations

import warnings
from typing import Any, Iterable, Optional

KEYS = {
    "eval.contamination": "eval.paraphrase_gap",
    "eval.gate.contamination_gap_max": "eval.gate.paraphrase_gap_max",
}
"""Former dotted config key (or section) -> current one."""
EVALUATORS = {"contamination": "paraphrase_gap"}
"""Former evaluator name -> current one (``eval.evaluators``; also the group of the rows it wrote,
``evaluation/rows.py``)."""


def current_key(key: str) -> Optional[str]:
    """The current spelling of dotted ``key`` when it (or a section above it) was renamed, else None."""
    for old, new in KEYS.items():
        if key == old or key.startswith(old + "."):
            return new + key[len(old) :]
    return None


def _override_key(text: str) -> tuple[str, str, str]:
    """``(prefix, key, rest)`` of an override ``[+|++|~]key[=value]``."""
    prefix = text[: len(text) - len(text.lstrip("+~"))]
    key, sep, value = text[len(prefix) :].partition("=")
    return prefix, key, sep + value


def renamed_overrides(overrides: Iterable[str]) -> list[str]:
    """``overrides`` with every former key spelled as it is now; one warning per rewritten override."""
    out = []
    for text in overrides:
        prefix, key, rest = _override_key(text)
        new = current_key(key)
        if new is None:
            out.append(text)
            continue
        warnings.warn(f"config key '{key}' is now '{new}' (read as '{prefix}{new}{rest}')", FutureWarning, stacklevel=2)
        out.append(f"{prefix}{new}{rest}")
    return out


def current_evaluators(names: Iterable[str]) -> list[str]:
    """Evaluator names with every former name replaced by the current one (order kept, no name twice)."""
    out: list[str] = []
    for name in names:
        name = EVALUATORS.get(name, name)
        if name not in out:
            out.append(name)
    return out


def current_flat(flat: dict[str, Any]) -> dict[str, Any]:
    """A saved flat ``{dotted.key: value}`` config under the current names (keys and evaluator names)."""
    out = {current_key(key) or key: value for key, value in flat.items()}
    if isinstance(out.get("eval.evaluators"), list):
        out["eval.evaluators"] = current_evaluators(out["eval.evaluators"])
    return out


__all__ = ["EVALUATORS", "KEYS", "current_evaluators", "current_flat", "current_key", "renamed_overrides"]
