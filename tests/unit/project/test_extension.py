"""Extending the run from outside the package, by registration only (CONTRIBUTING.md "To add ..."): a hook, a
method's strategy, an LR schedule and an evaluator, defined here, run end to end through ``train`` without any
change to ``evolve_train``."""

import pytest

from helpers import tiny_cfg


def test_an_unregistered_schedule_is_refused_naming_the_key(tmp_path):
    from omegaconf import OmegaConf

    from evolve_train.errors import ConfigError

    with pytest.raises(ConfigError, match="trainer.schedule must be one of"):
        OmegaConf.to_object(tiny_cfg(tmp_path, "trainer.schedule=quarter_of_nothing"))
