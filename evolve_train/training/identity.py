"""Run identity: which settings make a run what it is, the run dir named after them, the resume check.

- :func:`result_config`: the resolved config as flat ``{dotted.key: value}`` (one entry per schema field of
  ``evolve_train/config.py``; dict and list values are compared whole) minus :data:`MAY_DIFFER_ON_RESUME`,
  the settings that change neither what is trained nor any metric. A run records it with its fingerprint in
  ``state.json`` (``"identity": {"fingerprint", "config"}``) when it starts.
- :func:`check_resume`: before anything is written, a :class:`ConfigError` listing every key whose recorded
  value differs from this run's (old -> new). A run dir from before fingerprints (no ``identity``) resumes
  with a warning and records the current config. A run dir that holds nothing trained or evaluated (no
  checkpoint, metrics or training state: a run that failed before training) pins nothing; the new config
  replaces its record.
- :func:`run_tag`: the run-dir segment that names a run's command-line overrides (resolver
  ``evolve_run_tag`` in ``configs/config.yaml``): ``""`` when none count, else ``<overrides>_<hash>/``.
- :func:`hydra_output_subdir`: resolver ``evolve_hydra_subdir`` for ``hydra.output_subdir``: ``null`` (Hydra
  writes no ``.hydra/``) when the run dir holds a run this config may not resume, so a refused command
  leaves every file of the dir untouched.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import logging
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

from evolve_train.errors import ConfigError

log = logging.getLogger(__name__)

MAY_DIFFER_ON_RESUME = (
    "logger",  # where metrics go
    "resume",
    "run_dir",  # how the run dir is found
    "extra",  # free-form notes, not read by the framework
    "data.cache_dir",  # where materialised datasets are cached
    "method.step0_cache",  # where the shared step-0 checkpoint is looked up
    "method.lora.save_merged",  # what a LoRA checkpoint holds (merged weights too), not what is trained
    "trainer.num_threads",  # speed
    "trainer.log_every",  # how often train_log.jsonl gets a row
    "trainer.save_every_n_steps",  # how often a resumable training state is saved
    "trainer.keep_last_states",
    "trainer.dist_timeout_s",  # how long a rank waits for the others
    "trainer.peak_flops",  # the denominator of the logged MFU
    "eval.batch_size",  # prompts per generation batch (speed, memory)
    "eval.gate",  # thresholds read by evolve-gate after the run
    "eval.oracle_run",  # the oracle run the summary's regret is computed against
)
"""Keys (and everything below them) that may differ between a run and its resume; every other key of the
config is result-affecting."""
DIR_KEYS = ("experiment", "method", "seed")
"""Overrides already named by the run-dir path (``<experiment>/<method.name>/.../seed<seed>``)."""
TAG_MAX_CHARS = 60
"""Longest readable part of a run tag (the 8-hex-digit hash follows)."""


def may_differ(key: str) -> bool:
    return any(key == k or key.startswith(k + ".") for k in MAY_DIFFER_ON_RESUME)


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


def _is_secret(key: str) -> bool:
    from evolve_train.training.redact import is_secret_key

    return any(is_secret_key(part) for part in key.split("."))


def _digest(value: Any) -> str:
    return "sha256:" + hashlib.sha256(json.dumps(value, sort_keys=True).encode("utf-8")).hexdigest()[:16]


def result_config(cfg) -> dict[str, Any]:
    """The result-affecting config: every field but :data:`MAY_DIFFER_ON_RESUME`'s (a value under a
    secret-looking key, ``api_key``/``*_token``..., is kept as its digest: compared, never written)."""
    from omegaconf import DictConfig, OmegaConf

    if isinstance(cfg, DictConfig):
        cfg = OmegaConf.to_object(cfg)
    return {
        key: _digest(value) if _is_secret(key) else value for key, value in flatten(cfg).items() if not may_differ(key)
    }


def fingerprint(config: dict[str, Any]) -> str:
    blob = json.dumps(config, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def identity(cfg) -> dict:
    """What ``state.json`` records as ``identity``: the result-affecting config and its fingerprint."""
    config = result_config(cfg)
    return {"fingerprint": fingerprint(config), "config": config}


def config_diff(old: dict, new: dict) -> tuple[list[tuple[str, Any, Any]], list[str], list[str]]:
    """(keys in both whose values differ with (key, old, new), keys only in ``old``, keys only in ``new``)."""
    changed = [(key, old[key], new[key]) for key in sorted(old.keys() & new.keys()) if old[key] != new[key]]
    return changed, sorted(old.keys() - new.keys()), sorted(new.keys() - old.keys())


def _show(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _refusal(run_dir: Path, changed: list[tuple[str, Any, Any]]) -> str:
    lines = "\n".join(f"  {key}: {_show(old)} -> {_show(new)}" for key, old, new in changed)
    return (
        f"{run_dir} holds a run with a different configuration (recorded in its state.json); resuming it "
        f"would mix two configurations. Changed (recorded -> now):\n{lines}\n"
        "Restore the recorded values, run without hydra.run.dir / run_dir (the run dir is then named after "
        "the overrides), choose another run dir, or delete this one to start over. Keys that may differ on "
        f"resume: {', '.join(MAY_DIFFER_ON_RESUME)}."
    )


def _holds_run(run_dir: Path, state) -> bool:
    return bool(state.trained or state.evaluated) or any(
        (Path(run_dir) / name).exists() for name in ("steps", "metrics.jsonl", "train_state")
    )


def check_resume(run_dir: Path, cfg, state) -> None:
    """Refuse (``ConfigError`` naming each differing key, old -> new) to resume a run dir whose recorded
    result-affecting config differs from ``cfg``'s; call before anything is written. ``resume=false`` is not
    checked (``check_run_dir`` refuses a dir holding a run; an empty one starts afresh)."""
    if str(cfg.resume).lower() == "false":
        return
    if not _holds_run(run_dir, state):  # nothing trained or evaluated yet: the recorded config pins nothing
        return
    recorded = getattr(state, "identity", None)
    if recorded is None:
        if _holds_run(run_dir, state):
            log.warning(
                "%s: state.json records no config (a run dir from before config fingerprints); resuming "
                "without checking that the config is unchanged, and recording the current one",
                run_dir,
            )
        return
    changed, removed, added = config_diff(recorded.get("config", {}), result_config(cfg))
    if removed or added:  # a code version added or removed settings: not a change of this run's values
        log.warning(
            "%s: settings only in the recorded config: %s; only in this one: %s (a different code "
            "version); not compared",
            run_dir,
            removed or "none",
            added or "none",
        )
    if changed:
        raise ConfigError(_refusal(Path(run_dir), changed))


def record(state, cfg) -> None:
    """Set ``state.identity`` to ``cfg``'s (written with the next ``state.save``)."""
    state.identity = identity(cfg)


# --- the run-dir tag (resolver ``evolve_run_tag``) ---------------------------------------------------------


def _readable(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "[" + ",".join(_readable(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_readable(v)}" for k, v in sorted(value.items())) + "}"
    return json.dumps(value)


def tag_items(overrides: list[str]) -> list[tuple[str, str]]:
    """``(canonical, readable)`` per result-affecting override, sorted: not a key of
    :data:`MAY_DIFFER_ON_RESUME`, nor one the path already names (:data:`DIR_KEYS`), nor ``hydra.*``. Values
    are canonical (``trainer.lr=1e-3`` and ``trainer.lr=0.001`` are the same item)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except Exception:  # noqa: BLE001  (Hydra has parsed them already; keep the raw lines if this fails)
        return sorted((line, line) for line in overrides)
    items = []
    for override in parsed:
        key = override.key_or_group
        if key in DIR_KEYS or may_differ(key) or key.split(".")[0] == "hydra":
            continue
        if override.is_delete():
            items.append((f"~{key}", f"~{key}"))
            continue
        value = override.value()
        shown = "<redacted>" if _is_secret(key) else _readable(value)  # the dir name never shows a secret
        items.append((f"{key}={json.dumps(value, sort_keys=True, default=str)}", f"{key}={shown}"))
    return sorted(items)


def _safe(text: str) -> str:
    text = re.sub(r"[^A-Za-z0-9._,=+-]+", "_", text)
    return re.sub(r"^[.-]", "_", text)  # never a hidden dir or an option-like name


def run_tag(overrides: list[str]) -> str:
    """The run-dir segment naming ``overrides``: ``""`` when none is result-affecting, else
    ``<key=value,...>_<hash>/`` (filesystem-safe characters, at most TAG_MAX_CHARS + 9 long; the hash is of
    the canonical items, so a shortened or sanitised name stays unique)."""
    items = tag_items(overrides)
    if not items:
        return ""
    digest = hashlib.sha256("\n".join(c for c, _ in items).encode("utf-8")).hexdigest()[:8]
    readable = _safe(",".join(r for _, r in items))
    if len(readable) > TAG_MAX_CHARS:
        readable = readable[: TAG_MAX_CHARS - 1] + "+"
    return f"{readable}_{digest}/"


# --- Hydra's .hydra/ record (resolver ``evolve_hydra_subdir``) --------------------------------------------


def _task_config(root):
    """The task config (a :class:`Config`) of Hydra's full config ``root`` (``hydra`` removed)."""
    from omegaconf import OmegaConf, open_dict, read_write

    task = copy.deepcopy(root)
    with read_write(task), open_dict(task):
        del task["hydra"]
    return OmegaConf.to_object(task)


def refuses(run_dir: Path, cfg) -> bool:
    """Whether :func:`check_resume` will refuse ``cfg`` for ``run_dir`` (read-only, never logs)."""
    path = Path(run_dir) / "state.json"
    if str(cfg.resume).lower() == "false" or not path.exists():
        return False
    state = json.loads(path.read_text(encoding="utf-8"))
    recorded = state.get("identity")
    if not _holds_run(Path(run_dir), SimpleNamespace(trained=state.get("trained"), evaluated=state.get("evaluated"))):
        return False  # a run that trained nothing: its record is replaced, not kept
    return recorded is not None and bool(config_diff(recorded.get("config", {}), result_config(cfg))[0])


def hydra_output_subdir(default: str, *, _root_) -> Optional[str]:
    """``default`` (``.hydra``), or ``None`` when this run dir holds a run that ``train`` will refuse to
    resume: Hydra then leaves the dir's record of the earlier command untouched."""
    try:
        return None if refuses(Path(_root_.hydra.runtime.output_dir), _task_config(_root_)) else default
    except Exception:  # noqa: BLE001  (outside a task, e.g. HydraConfig.get(): Hydra's default)
        return default


def register_resolvers() -> None:
    """``evolve_run_tag`` and ``evolve_hydra_subdir`` for ``configs/config.yaml``."""
    from omegaconf import OmegaConf

    OmegaConf.register_new_resolver("evolve_run_tag", lambda overrides: run_tag(list(overrides)), replace=True)
    OmegaConf.register_new_resolver("evolve_hydra_subdir", hydra_output_subdir, replace=True)
