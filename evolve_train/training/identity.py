"""Run identity: which settings make a run what it is, the run dir named after them, the resume check.

Which settings count is said once, per field of ``evolve_train/config.py`` (``evolve_train/config_keys.py``):
every field but the runtime ones (``runtime(...)``) is result-affecting. The config-only parts live in
``evolve_train/config_identity.py`` (``config.py`` registers its Hydra resolvers); this module adds the run
dir's record.

- :func:`result_config`: the resolved config as flat ``{dotted.key: value}`` (one entry per schema field of
  ``evolve_train/config.py``; dict and list values are compared whole) minus :data:`MAY_DIFFER_ON_RESUME`,
  the settings that change neither what is trained nor any metric. A run records it with its fingerprint in
  ``state.json`` (``"identity": {"fingerprint", "config", "precision", "processes"}``) when it starts.
- :func:`check_resume`: before anything is written, a :class:`ConfigError` listing every key whose recorded
  value differs from this run's (old -> new); ``trainer.batch_size`` may change with the number of processes
  when their product, the global batch, stays the same (``config_identity.same_global_batch``). A run dir from before fingerprints (no ``identity``) resumes
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

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

from evolve_train import config_identity
from evolve_train.config import Config
from evolve_train.config_identity import (  # noqa: F401  (the run identity's names, kept importable from here)
    DIR_KEYS,
    TAG_MAX_CHARS,
    config_diff,
    flatten,
    launched_processes,
    same_global_batch,
    hydra_output_subdir,
    refuses,
    result_config,
)
from evolve_train.config_keys import NONE, keys_where, under
from evolve_train.errors import ConfigError

log = logging.getLogger(__name__)

MAY_DIFFER_ON_RESUME: tuple[str, ...] = keys_where(Config, NONE)
"""Keys (and everything below them) that may differ between a run and its resume: the schema's runtime fields
(``runtime(...)`` in ``evolve_train/config.py``); every other key of the config is result-affecting."""


def may_differ(key: str) -> bool:
    return under(key, MAY_DIFFER_ON_RESUME)


def fingerprint(config: dict[str, Any]) -> str:
    blob = json.dumps(config, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def identity(cfg) -> dict:
    """What ``state.json`` records as ``identity``: the result-affecting config and its fingerprint, and the
    precision ``trainer.mixed_precision`` resolved to on this machine (``auto``: bf16 or fp32 by the machine)."""
    from evolve_train.training.distributed import resolved_precision

    config = result_config(cfg)
    return {
        "fingerprint": fingerprint(config),
        "config": config,
        "precision": resolved_precision(cfg.trainer),
        "processes": launched_processes(),
    }


def _warn_precision(run_dir: Path, recorded: dict, cfg) -> None:
    """``auto`` resolves by the machine: a resume where it resolves otherwise trains on in another precision
    (the rows' ``mixed_precision`` says which checkpoint had which); said, not refused."""
    from evolve_train.training.distributed import resolved_precision

    before, now = recorded.get("precision"), resolved_precision(cfg.trainer)
    if before is not None and before != now:
        log.warning(
            "%s: trainer.mixed_precision=%s resolved to %s when this run started and to %s here: the steps "
            "trained from now on use %s (every metric row records its mixed_precision); set "
            "trainer.mixed_precision=%s to train on as before",
            run_dir,
            cfg.trainer.mixed_precision,
            before,
            now,
            now,
            before,
        )


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
    return config_identity.holds_run(run_dir, state)


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
    _warn_precision(Path(run_dir), recorded, cfg)
    changed, removed, added = config_diff(recorded.get("config", {}), result_config(cfg))
    changed = same_global_batch(changed, recorded)  # rows per process may change with the processes
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


def tag_items(overrides: list[str]) -> list[tuple[str, str]]:
    """``(canonical, readable)`` per result-affecting override, sorted: not a key of
    :data:`MAY_DIFFER_ON_RESUME`, nor one the path already names (:data:`DIR_KEYS`), nor ``hydra.*``. Values
    are canonical (``trainer.lr=1e-3`` and ``trainer.lr=0.001`` are the same item)."""
    return config_identity.tag_items(overrides, MAY_DIFFER_ON_RESUME)


def run_tag(overrides: list[str]) -> str:
    """The run-dir segment naming ``overrides``: ``""`` when none is result-affecting, else
    ``<key=value_key=value...>_<hash>/`` (``config_identity.run_tag``)."""
    return config_identity.run_tag(overrides, MAY_DIFFER_ON_RESUME)


def register_resolvers() -> None:
    """``evolve_run_tag`` and ``evolve_hydra_subdir`` for ``configs/config.yaml`` (``config.py`` registers them
    when it is imported)."""
    config_identity.register_resolvers(Config)
