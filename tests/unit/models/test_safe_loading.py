"""Safe loading and secrets: safetensors only (pickle refused unless allowed), no remote code unless asked,
and no planted secret anywhere in a run dir."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
import yaml
from transformers import GPT2Config, GPT2LMHeadModel

from evolve_train.config import ModelConfig
from evolve_train.errors import ConfigError
from evolve_train.models import build
from evolve_train.models.build import load_model, load_tokenizer, train_tokenizer
from evolve_train.run import train
from evolve_train.training.redact import REDACTED, config_secrets, env_secrets, redact_argv, redact_yaml_file
from helpers import tiny_cfg
from helpers.processes import ROOT


def tiny_model(seed: int = 0) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    return GPT2LMHeadModel(
        GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=300, n_positions=64, bos_token_id=0, eos_token_id=0)
    )


def pickle_only_dir(path: Path, seed: int = 0) -> dict:
    """A model dir holding only ``pytorch_model.bin`` (torch.save: a pickle) plus config and tokenizer."""
    model = tiny_model(seed)
    path.mkdir(parents=True, exist_ok=True)
    model.config.save_pretrained(path)
    torch.save(model.state_dict(), path / "pytorch_model.bin")
    train_tokenizer(["alpha beta gamma delta"] * 20, 300).save_pretrained(path)
    return model.state_dict()


def test_a_pickle_only_model_dir_is_refused(tmp_path):
    pickle_only_dir(tmp_path / "m")
    with pytest.raises(ConfigError, match="allow_pickle=true"):
        load_model(str(tmp_path / "m"), ModelConfig())


def test_allow_pickle_loads_it_with_a_warning(tmp_path, caplog):
    expected = pickle_only_dir(tmp_path / "m")
    with caplog.at_level(logging.WARNING):
        model = load_model(str(tmp_path / "m"), ModelConfig(allow_pickle=True))
    assert "pickle-based weights" in caplog.text and "allow_pickle=true" in caplog.text
    assert torch.equal(
        model.state_dict()["transformer.h.0.attn.c_attn.weight"], expected["transformer.h.0.attn.c_attn.weight"]
    )


def test_with_both_formats_only_the_safetensors_weights_are_read(tmp_path):
    path = tmp_path / "m"
    pickle_only_dir(path, seed=1)  # pickle with other weights than the safetensors file
    safe = tiny_model(seed=2)
    safe.save_pretrained(path)
    model = load_model(str(path), ModelConfig())
    assert torch.equal(
        model.state_dict()["transformer.h.0.mlp.c_fc.weight"], safe.state_dict()["transformer.h.0.mlp.c_fc.weight"]
    )


def test_a_run_on_a_pickle_only_model_fails_before_training(tmp_path):
    pickle_only_dir(tmp_path / "m")
    with pytest.raises(ConfigError, match="pickle"):
        train(tiny_cfg(tmp_path / "run", f"model.name_or_path={tmp_path / 'm'}"))
    assert not (tmp_path / "run" / "steps").exists()


def test_from_pretrained_gets_trust_remote_code_false_and_safetensors_by_default(monkeypatch):
    calls = []

    class Recorder:
        @staticmethod
        def from_pretrained(name, **kwargs):
            calls.append((name, kwargs))
            raise RuntimeError("recorded")

    monkeypatch.setattr(build, "AutoModelForCausalLM", Recorder)
    monkeypatch.setattr(build, "AutoModelForSeq2SeqLM", Recorder)
    monkeypatch.setattr(build, "AutoTokenizer", Recorder)
    for call in (lambda c: load_model("org/some-model", c), lambda c: load_tokenizer("org/some-model", c)):
        with pytest.raises(RuntimeError, match="recorded"):
            call(ModelConfig())
    assert [kw["trust_remote_code"] for _, kw in calls] == [False, False]
    assert calls[0][1]["use_safetensors"] is True
    calls.clear()
    with pytest.raises(RuntimeError):
        load_model("org/some-model", ModelConfig(trust_remote_code=True))
    assert calls[0][1]["trust_remote_code"] is True


@pytest.mark.parametrize("model", sorted(p.stem for p in (ROOT / "configs" / "model").glob("*.yaml")))
def test_no_shipped_model_config_trusts_remote_code_or_pickle(tmp_path, model):
    cfg = tiny_cfg(tmp_path, f"model={model}")
    assert cfg.model.trust_remote_code is False and cfg.model.allow_pickle is False


def test_secret_values_are_found_in_env_and_config():
    env = {"WANDB_API_KEY": "wandb-123456", "HF_TOKEN": "hf_abcdef", "PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}
    assert env_secrets(env) == {"wandb-123456", "hf_abcdef"}
    config = {
        "extra": {"api_key": "cfg-secret-1", "note": "fine"},
        "eval": {"max_new_tokens": 12},
        "logger": {"wandb": {"entity": "team"}},
    }
    assert config_secrets(config) == {"cfg-secret-1"}


def test_overrides_and_hydra_files_are_redacted(tmp_path):
    argv = ["train.py", "+extra.api_key=cfg-secret-1", "trainer.lr=1e-3", "extra.note=has hf_abcdef inside"]
    redact_argv(argv, {"hf_abcdef"})
    assert argv == ["train.py", f"+extra.api_key={REDACTED}", "trainer.lr=1e-3", f"extra.note=has {REDACTED} inside"]
    saved = tmp_path / "config.yaml"
    saved.write_text(
        yaml.safe_dump(
            {
                "extra": {"api_key": "cfg-secret-1"},
                "trainer": {"lr": 0.001},
                "hydra": {"overrides": {"task": ["+extra.api_key=cfg-secret-1"]}},
            }
        )
    )
    assert redact_yaml_file(saved, {"cfg-secret-1"})
    text = saved.read_text()
    assert "cfg-secret-1" not in text
    data = yaml.safe_load(text)
    assert data["extra"]["api_key"] == REDACTED and data["trainer"]["lr"] == 0.001
    assert data["hydra"]["overrides"]["task"] == [f"+extra.api_key={REDACTED}"]
