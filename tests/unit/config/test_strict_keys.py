"""An override naming a key the schema does not know is refused with the nearest known key, with or without
``+``, before anything is written; group selections, free-form fields and a plug-in's registered keys pass."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from evolve_train import config_strict
from evolve_train.compose import CONFIG_DIR, compose_config
from evolve_train.config import Config
from evolve_train.config_strict import command_overrides, register_config_keys, unknown_overrides
from evolve_train.errors import ConfigError
from helpers.processes import ROOT

REPO = ROOT


@pytest.mark.parametrize("override", ["+trainer.lrrr=1", "trainer.lrrr=1", "++trainer.lrrr=1"])
def test_train_py_refuses_an_unknown_key_before_anything_is_written(tmp_path, override):
    env = {**os.environ, "PYTHONPATH": str(REPO), "WANDB_MODE": "disabled"}
    done = subprocess.run(
        [sys.executable, str(REPO / "train.py"), override, "+eval.lm_evall.tasks=[x]"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "unknown config key 'trainer.lrrr'" in done.stderr and "did you mean 'trainer.lr'?" in done.stderr
    assert "'eval.lm_evall.tasks'" in done.stderr
    assert "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []  # no runs/, no outputs/, no .hydra/


def test_known_keys_groups_free_form_fields_and_hydra_keys_pass():
    allowed = [
        "trainer.lr=1e-3",
        "++trainer.lr=2e-3",
        "model=llama",
        "+experiment=recipes",
        "hydra/launcher=basic",
        "hydra.run.dir=x",
        "+extra.note=hello",
        "method.lora.r=4",
        "~eval.gate",
    ]
    assert unknown_overrides(Config, allowed, [CONFIG_DIR]) == []


def test_a_plug_ins_registered_keys_pass(monkeypatch):
    monkeypatch.setattr(config_strict, "_REGISTERED", set())
    assert unknown_overrides(Config, ["+method.my_method.alpha=2"], [CONFIG_DIR])
    register_config_keys("method.my_method")
    assert unknown_overrides(Config, ["+method.my_method.alpha=2"], [CONFIG_DIR]) == []


def test_compose_config_refuses_unknown_added_keys():
    with pytest.raises(ConfigError, match=r"'trainer\.lrrr'.*did you mean 'trainer\.lr'"):
        compose_config(["+trainer.lrrr=1"])


def test_command_overrides_skip_hydras_flags():
    args = ["-m", "--config-dir", "mine", "seed=1", "--cfg", "job", "+trainer.lrrr=1"]
    assert command_overrides(args) == ["seed=1", "+trainer.lrrr=1"]
