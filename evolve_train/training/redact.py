"""Keep secrets out of the run dir: Hydra's saved config and the command line that loggers record.

Secrets are (a) config values under a secret-looking key (``api_key``, ``hf_token``, ``*_secret``,
``password``...; :func:`evolve_train.utils.secrets.is_secret_key`, the rule of the W&B logger's config filter too) and (b) the values
of secret-looking environment variables (``WANDB_API_KEY``, ``HF_TOKEN``, ...). At the start of a run
(:func:`redact_run`, main process):

- ``<run_dir>/.hydra/config.yaml``, ``overrides.yaml`` and ``hydra.yaml`` (written by Hydra before the task
  starts), and in a multirun the sweep's ``multirun.yaml``, are rewritten with every secret replaced by
  ``<redacted>``, atomically;
- ``sys.argv`` entries that set a secret (``+extra.api_key=...``) are rewritten the same way, in this
  process, before any logger starts: W&B records the command line in its run metadata.

The run itself receives the real values (the config object is resolved before redaction). Environment
variables are never written by the framework; the W&B logger drops secret keys from the uploaded config.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from pathlib import Path
from typing import Any, Iterable

from evolve_train.utils.io import atomic_write_text
from evolve_train.utils.secrets import is_secret_key

log = logging.getLogger(__name__)
REDACTED = "<redacted>"
MIN_SECRET_LENGTH = 6  # shorter values (``""``, ``none``) would redact unrelated text
HYDRA_FILES = ("config.yaml", "overrides.yaml", "hydra.yaml")


def env_secrets(environ=None) -> set[str]:
    """Values of environment variables whose name looks secret (``WANDB_API_KEY``, ``HF_TOKEN``...)."""
    environ = os.environ if environ is None else environ
    return {v for k, v in environ.items() if is_secret_key(k) and len(v) >= MIN_SECRET_LENGTH}


def config_secrets(value: Any, key: str = "") -> set[str]:
    """String forms of every value under a secret-looking key of a (nested) config."""
    found: set[str] = set()
    if isinstance(value, dict):
        for k, v in value.items():
            if is_secret_key(str(k)):
                found |= {str(s) for s in _leaves(v) if len(str(s)) >= MIN_SECRET_LENGTH}
            else:
                found |= config_secrets(v, str(k))
    elif isinstance(value, (list, tuple)):
        for v in value:
            found |= config_secrets(v, key)
    return found


def _leaves(value: Any) -> Iterable[Any]:
    if isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _leaves(v)
    elif value is not None:
        yield value


_OVERRIDE = re.compile(r"^(?P<prefix>[~+]*)(?P<key>[A-Za-z0-9_.\-/@]+)=(?P<value>.*)$", re.S)


def redact_override(text: str, secrets: set[str]) -> str:
    """A command-line override with its value redacted when its key (last segment) is secret; any known
    secret value is replaced inside other strings."""
    match = _OVERRIDE.match(text)
    if match and is_secret_key(match.group("key").split(".")[-1]) and match.group("value"):
        return f"{match.group('prefix')}{match.group('key')}={REDACTED}"
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return text


def redact_value(value: Any, secrets: set[str]) -> Any:
    """``value`` (parsed YAML) with secret keys' values and known secret strings replaced."""
    if isinstance(value, dict):
        return {
            k: (REDACTED if is_secret_key(str(k)) and value[k] not in (None, "", {}, []) else redact_value(v, secrets))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [redact_value(v, secrets) for v in value]
    if isinstance(value, str):
        return redact_override(value, secrets)
    return value


def redact_yaml_file(path: Path, secrets: set[str]) -> bool:
    """Rewrite ``path`` with secrets redacted (atomically); ``True`` if it changed."""
    import yaml

    text = path.read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    cleaned = redact_value(data, secrets)
    if cleaned == data and not any(s in text for s in secrets):
        return False
    out = yaml.safe_dump(cleaned, sort_keys=False, allow_unicode=True, default_flow_style=False)
    for secret in secrets:  # belt and braces: nothing survives, whatever YAML did with quoting
        out = out.replace(secret, REDACTED)
    atomic_write_text(path, out)
    return True


def hydra_output_files() -> list[Path]:
    if not hydra_app_running():
        return []
    from hydra.core.hydra_config import HydraConfig

    from hydra.types import RunMode

    hydra_cfg = HydraConfig.get()
    found = []
    if hydra_cfg.output_subdir:
        folder = Path(hydra_cfg.runtime.output_dir) / hydra_cfg.output_subdir
        found = [folder / name for name in HYDRA_FILES if (folder / name).is_file()]
    if hydra_cfg.mode == RunMode.MULTIRUN:  # the sweep's own record of the command line
        sweep = Path(hydra_cfg.sweep.dir) / "multirun.yaml"
        found += [sweep] if sweep.is_file() else []
    return found


def hydra_app_running() -> bool:
    try:
        from hydra.core.hydra_config import HydraConfig
    except ImportError:
        return False
    return HydraConfig.initialized()


def redact_argv(argv: list[str], secrets: set[str]) -> None:
    """Replace, in place, the values of secret overrides in a command line (``argv[0]`` kept)."""
    argv[1:] = [redact_override(a, secrets) for a in argv[1:]]


def redact_run(config: Any) -> list[Path]:
    """Under a Hydra app (``train.py``): redact Hydra's saved files and ``sys.argv`` (see the module
    docstring); returns the files changed. ``config``: the resolved config as a plain dict. Called as a
    library (``train(cfg)`` without Hydra's app), it changes nothing: there are no such files and the
    command line is the caller's."""
    if not hydra_app_running():
        return []
    secrets = env_secrets() | config_secrets(config)
    redact_argv(sys.argv, secrets)
    changed = [path for path in hydra_output_files() if redact_yaml_file(path, secrets)]
    for path in changed:
        log.info("redacted secrets from %s", path)
    return changed
