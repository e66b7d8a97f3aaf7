"""The run identity as the config states it: the result-affecting config, the run-dir tag, Hydra's resolvers.

What counts is each field's class (``evolve_train/config_keys.py``): every field but the :data:`NONE` ones
(runtime settings) is result-affecting.

- :func:`result_config`: the resolved config as flat ``{dotted.key: value}`` (one entry per schema field; dict
  and list values are compared whole) without the runtime fields. A run records it with its fingerprint in
  ``state.json`` (``training/identity.py``).
- :func:`run_tag`: the run-dir segment that names a run's command-line overrides (resolver ``evolve_run_tag``
  in ``configs/config.yaml``): ``""`` when none count, else ``<overrides>_<hash>/``.
- :func:`hydra_output_subdir`: resolver ``evolve_hydra_subdir`` for ``hydra.output_subdir``: ``null`` (Hydra
  writes no ``.hydra/``) when the run dir holds a run this config may not resume, so a refused command leaves
  every file of the dir untouched.

This module sits next to the schema: ``config.py`` registers the resolvers with its :class:`Config` when it
is imported, so this module imports no other module of the package but ``config_keys``, ``config_renames``
and ``utils``.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import os
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterable, Optional

from evolve_train.config_keys import NONE, affects, keys_where, under
from evolve_train.config_renames import current_flat
from evolve_train.utils.secrets import is_secret_key

DIR_KEYS = ("experiment", "method", "seed")
"""Overrides already named by the run-dir path (``<experiment>/<method.name>/.../seed<seed>``)."""
TAG_MAX_CHARS = 60
"""Longest readable part of a run tag (the 8-hex-digit hash follows)."""


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """``{dotted.key: JSON value}`` for every leaf field of a (nested) config dataclass."""
    if not dataclasses.is_dataclass(node):
        return {prefix: _plain(node)}
    flat: dict[str, Any] = {}
    for field in dataclasses.fields(node):
        flat.update(flatten(getattr(node, field.name), f"{prefix}.{field.name}" if prefix else field.name))
    return flat


def _result_leaves(node: Any, prefix: str = "") -> dict[str, Any]:
    """:func:`flatten` without the runtime fields (and everything below a runtime section)."""
    if not dataclasses.is_dataclass(node):
        return {prefix: _plain(node)}
    flat: dict[str, Any] = {}
    for field in dataclasses.fields(node):
        if affects(field) != NONE:
            flat.update(_result_leaves(getattr(node, field.name), f"{prefix}.{field.name}" if prefix else field.name))
    return flat


def is_secret(key: str) -> bool:
    return any(is_secret_key(part) for part in key.split("."))


def _digest(value: Any) -> str:
    return "sha256:" + hashlib.sha256(json.dumps(value, sort_keys=True).encode("utf-8")).hexdigest()[:16]


def result_config(cfg) -> dict[str, Any]:
    """The result-affecting config: every field but the runtime ones (a value under a secret-looking key,
    ``api_key``/``*_token``..., is kept as its digest: compared, never written)."""
    from omegaconf import DictConfig, OmegaConf

    if isinstance(cfg, DictConfig):
        cfg = OmegaConf.to_object(cfg)
    return {key: _digest(value) if is_secret(key) else value for key, value in _result_leaves(cfg).items()}


def config_diff(old: dict, new: dict) -> tuple[list[tuple[str, Any, Any]], list[str], list[str]]:
    """(keys in both whose values differ with (key, old, new), keys only in ``old``, keys only in ``new``);
    ``old`` (a recorded config) is read under the current names (``config_renames.py``)."""
    old = current_flat(old)
    changed = [(key, old[key], new[key]) for key in sorted(old.keys() & new.keys()) if old[key] != new[key]]
    return changed, sorted(old.keys() - new.keys()), sorted(new.keys() - old.keys())


def launched_processes() -> int:
    """The processes of this launch: ``WORLD_SIZE`` (set by torchrun, ``accelerate launch`` and the submitit
    launcher), 1 without."""
    try:
        return max(1, int(os.environ.get("WORLD_SIZE") or 1))
    except ValueError:
        return 1


def same_global_batch(changed: list[tuple[str, Any, Any]], recorded: dict) -> list[tuple[str, Any, Any]]:
    """``changed`` less a ``trainer.batch_size`` change (rows per process) that keeps the global batch: the recorded
    processes x the recorded batch size = this launch's processes x its batch size (a run requeued onto fewer or
    more processes; training/train_state.py continues its mid-step state only then)."""
    before, now = recorded.get("processes"), launched_processes()

    def kept(key: str, old: Any, new: Any) -> bool:
        return (
            key == "trainer.batch_size"
            and isinstance(before, int)
            and before != now
            and isinstance(old, int)
            and isinstance(new, int)
            and old * before == new * now
        )

    return [change for change in changed if not kept(*change)]


def holds_run(run_dir: Path, state) -> bool:
    """Whether ``run_dir`` holds something trained or evaluated (``state``: ``trained``, ``evaluated``)."""
    return bool(state.trained or state.evaluated) or any(
        (Path(run_dir) / name).exists() for name in ("steps", "metrics.jsonl", "train_state")
    )


# --- the run-dir tag (resolver ``evolve_run_tag``) ---------------------------------------------------------


def _readable(value: Any) -> str:
    """A value as the tag shows it: a list's items joined by ``+`` (``[splits,matrix]`` -> ``splits+matrix``),
    a dict's ``key:value`` pairs too; no comma (a run dir is passed where commas separate arguments:
    lm-eval's ``--model_args pretrained=DIR,dtype=...``)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "+".join(_readable(v) for v in value)
    if isinstance(value, dict):
        return "+".join(f"{k}:{_readable(v)}" for k, v in sorted(value.items()))
    return json.dumps(value)


def tag_items(overrides: list[str], runtime_keys: Iterable[str]) -> list[tuple[str, str]]:
    """``(canonical, readable)`` per result-affecting override, sorted: not under one of ``runtime_keys``
    (the schema's runtime fields), nor one the path already names (:data:`DIR_KEYS`), nor ``hydra.*``.
    Values are canonical (``trainer.lr=1e-3`` and ``trainer.lr=0.001`` are the same item)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    runtime_keys = tuple(runtime_keys)
    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except Exception:  # noqa: BLE001  (Hydra has parsed them already; keep the raw lines if this fails)
        return sorted((line, line) for line in overrides)
    items = []
    for override in parsed:
        key = override.key_or_group
        if key in DIR_KEYS or under(key, runtime_keys) or key.split(".")[0] == "hydra":
            continue
        if override.is_delete():
            items.append((f"~{key}", f"~{key}"))
            continue
        value = override.value()
        shown = "<redacted>" if is_secret(key) else _readable(value)  # the dir name never shows a secret
        items.append((f"{key}={json.dumps(value, sort_keys=True, default=str)}", f"{key}={shown}"))
    return sorted(items)


def _safe(text: str) -> str:
    text = re.sub(r"[^A-Za-z0-9._=+-]+", "_", text)
    return re.sub(r"^[.-]", "_", text)  # never a hidden dir or an option-like name


def run_tag(overrides: list[str], runtime_keys: Iterable[str]) -> str:
    """The run-dir segment naming ``overrides``: ``""`` when none is result-affecting, else
    ``<key=value_key=value...>_<hash>/`` (letters, digits and ``._=+-`` only, at most TAG_MAX_CHARS + 9 long;
    the hash is of the canonical items, so a shortened or sanitised name stays unique)."""
    items = tag_items(overrides, runtime_keys)
    if not items:
        return ""
    digest = hashlib.sha256("\n".join(c for c, _ in items).encode("utf-8")).hexdigest()[:8]
    readable = _safe("_".join(r for _, r in items))
    if len(readable) > TAG_MAX_CHARS:
        readable = readable[: TAG_MAX_CHARS - 1] + "+"
    return f"{readable}_{digest}/"


# --- Hydra's .hydra/ record (resolver ``evolve_hydra_subdir``) --------------------------------------------


def _task_config(root):
    """The task config (a ``Config``) of Hydra's full config ``root`` (``hydra`` removed)."""
    from omegaconf import OmegaConf, open_dict, read_write

    task = copy.deepcopy(root)
    with read_write(task), open_dict(task):
        del task["hydra"]
    return OmegaConf.to_object(task)


def refuses(run_dir: Path, cfg) -> bool:
    """Whether resuming ``run_dir`` with ``cfg`` is refused (``training/identity.py: check_resume``; read-only,
    never logs)."""
    path = Path(run_dir) / "state.json"
    if str(cfg.resume).lower() == "false" or not path.exists():
        return False
    state = json.loads(path.read_text(encoding="utf-8"))
    recorded = state.get("identity")
    if not holds_run(Path(run_dir), SimpleNamespace(trained=state.get("trained"), evaluated=state.get("evaluated"))):
        return False  # a run that trained nothing: its record is replaced, not kept
    if recorded is None:
        return False
    return bool(same_global_batch(config_diff(recorded.get("config", {}), result_config(cfg))[0], recorded))


def hydra_output_subdir(default: str, *, _root_) -> Optional[str]:
    """``default`` (``.hydra``), or ``None`` when this run dir holds a run that ``train`` will refuse to
    resume: Hydra then leaves the dir's record of the earlier command untouched."""
    try:
        return None if refuses(Path(_root_.hydra.runtime.output_dir), _task_config(_root_)) else default
    except Exception:  # noqa: BLE001  (outside a task, e.g. HydraConfig.get(): Hydra's default)
        return default


def register_resolvers(schema: type) -> None:
    """``evolve_run_tag`` and ``evolve_hydra_subdir`` for ``configs/config.yaml``; ``schema``: the config class
    whose runtime fields stay out of the run tag."""
    from omegaconf import OmegaConf

    runtime_keys = keys_where(schema, NONE)
    OmegaConf.register_new_resolver(
        "evolve_run_tag", lambda overrides: run_tag(list(overrides), runtime_keys), replace=True
    )
    OmegaConf.register_new_resolver("evolve_hydra_subdir", hydra_output_subdir, replace=True)
