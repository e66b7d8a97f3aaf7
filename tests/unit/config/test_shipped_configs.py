"""Every shipped config option composes into the typed schema and passes the checks a run does before it
starts (litgpt's rule: a config we ship is a config a test has loaded)."""

import pytest
from omegaconf import OmegaConf

from evolve_train.config import Config
from evolve_train.run import validate
from helpers import tiny_cfg
from helpers.processes import ROOT

CONFIGS = ROOT / "configs"
GROUPS = ("model", "method", "data", "trainer", "eval", "logger", "experiment")
OPTIONS = [(group, path.stem) for group in GROUPS for path in sorted((CONFIGS / group).glob("*.yaml"))]


def test_every_group_ships_options():
    assert {group for group, _ in OPTIONS} == set(GROUPS)


@pytest.mark.parametrize("group, option", OPTIONS, ids=[f"{g}={o}" for g, o in OPTIONS])
def test_shipped_option_composes_and_validates(tmp_path, group, option):
    cfg = OmegaConf.to_object(tiny_cfg(tmp_path / "run", f"{group}={option}"))
    assert isinstance(cfg, Config)
    validate(cfg)
    if group not in ("experiment",):
        selected = OmegaConf.to_container(OmegaConf.load(CONFIGS / group / f"{option}.yaml"))
        section = getattr(cfg, group)
        for key, value in selected.items():  # what the file sets is what the run gets (unless TINY shrinks it)
            if isinstance(value, (str, bool)) and hasattr(section, key) and "${" not in str(value):
                assert getattr(section, key) == value, (group, option, key)
