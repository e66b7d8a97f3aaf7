"""The run configuration outside ``train.py``: Hydra's compose over the repository's ``configs/`` with the same
command-line overrides (``data=temporal_qa data.root=... eval.max_new_tokens=8``), as the typed schema."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

from evolve_train.config import Config
from evolve_train.config_renames import renamed_overrides
from evolve_train.config_strict import check_overrides
from evolve_train.errors import ConfigError


def packaged_configs() -> Path:
    """The configs shipped with the package: ``evolve_train/configs`` in a built wheel (``setup.py`` copies
    ``configs/`` there), else ``configs/`` of the source tree next to the package (a clone, an editable install)."""
    inside = Path(__file__).resolve().parent / "configs"
    return inside if (inside / "config.yaml").is_file() else Path(__file__).resolve().parents[1] / "configs"


CONFIG_DIR = packaged_configs()
"""The configs every command composes (``evolve-train``, ``evolve-eval``...)."""


def compose_config(overrides: Sequence[str] = (), config_dir: Optional[str | Path] = None) -> Config:
    """``configs/config.yaml`` with ``overrides`` applied, validated into :class:`Config`.

    A bad override (unknown key or option, wrong type, malformed) raises ConfigError naming it."""
    from omegaconf import OmegaConf

    return OmegaConf.to_object(compose_dict(overrides, config_dir))


def compose_dict(overrides: Sequence[str] = (), config_dir: Optional[str | Path] = None):
    """The composed config as Hydra's ``DictConfig`` (what ``.hydra/config.yaml`` holds); errors as above."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    directory = Path(config_dir) if config_dir is not None else CONFIG_DIR
    if not (directory / "config.yaml").is_file():
        raise ConfigError(f"no config.yaml in the config directory {directory} (pass --config-dir)")
    overrides = renamed_overrides(overrides)  # a former key name as it is now, with a warning
    check_overrides(overrides, [directory, CONFIG_DIR])  # unknown keys, with or without '+'
    try:
        with initialize_config_dir(config_dir=str(directory.resolve()), version_base="1.3"):
            return compose(config_name="config", overrides=list(overrides))
    except (HydraException, OmegaConfBaseException) as err:
        reason = str(err).split("\nConfig search path")[0]
        if err.__cause__ is not None:  # Hydra's "Error merging override" hides the reason in the cause
            reason += f" ({str(err.__cause__).splitlines()[0]})"
        reason = " ".join(reason.split())
        raise ConfigError(f"configuration overrides {list(overrides)}: {reason}") from None
