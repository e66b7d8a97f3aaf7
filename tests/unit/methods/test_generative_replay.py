"""Generative replay (``method=generative_replay``, ``methods/generative.py``): the previous step's model samples
documents before each step k >= 1, saved in ``generated/step_<k>.jsonl`` and mixed into step k; a step trained
again reads the same samples back, and a killed run resumed has the uninterrupted run's samples and results."""

from __future__ import annotations


import pytest
from helpers import tiny_cfg

from evolve_train.config import GenerativeConfig
from evolve_train.errors import ConfigError


GEN = ["method=generative_replay", "method.generative.samples=6", "method.generative.max_new_tokens=12"]


def test_refused_combinations(tmp_path):
    from omegaconf import OmegaConf

    from evolve_train.run import validate

    def check(*overrides):
        validate(OmegaConf.to_object(tiny_cfg(tmp_path, *overrides)))

    check(*GEN)
    with pytest.raises(ConfigError, match="list replay before"):
        check("method=generative_replay", "method.strategies=[full,generative_replay,replay]")
    with pytest.raises(ConfigError, match="decay"):
        check(
            "method=generative_replay", "method.strategies=[full,replay,generative_replay]", "method.replay.decay=0.5"
        )
    with pytest.raises(ConfigError, match="method.generative"):
        GenerativeConfig(temperature=0)
