"""Configs composed for the run-identity and step-0 cache-key tests."""

import pytest
from omegaconf import OmegaConf
from evolve_train.data.timeline import TimeStep
from evolve_train.models.build import train_tokenizer
from evolve_train.training.step0_cache import step0_key
from helpers import tiny_cfg


def cfg_of(*overrides: str):
    return OmegaConf.to_object(tiny_cfg("/tmp/unused-run-dir", *overrides))


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(["the director of Orvane was Ada Brill", "in 2019 it was Tom Vey"], 300)


STEP0 = TimeStep(0, "2018", pairs=[{"input": "Orvane is run by <mask>.", "output": "Ada Brill"}])


RUNTIME = {"device": "cpu", "distributed_type": "NO"}


def step0_key_of(tokenizer, *overrides, num_processes=1, step0=STEP0, runtime=RUNTIME):
    return step0_key(cfg_of(*overrides), tokenizer, num_processes, step0, runtime)
