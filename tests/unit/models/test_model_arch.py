"""``model.arch``: Llama, Qwen2, GPT-2 and T5 built from config; ``causal`` for pretrained decoder-only models."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaForCausalLM, Qwen2ForCausalLM

from evolve_train.compose import compose_config
from evolve_train.config import ModelConfig
from evolve_train.errors import ConfigError
from evolve_train.models import build
from evolve_train.models.build import build_model, is_seq2seq, load_model, model_config, train_tokenizer

TEXTS = ["The river rose over the old bridge in spring."] * 3


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(TEXTS, vocab_size=300)


def small(arch: str, **extra) -> ModelConfig:
    return ModelConfig(arch=arch, n_layer=1, n_embd=32, n_head=4, n_positions=64, **extra)


def test_model_llama_is_a_llama_and_builds_one_from_config(tokenizer):
    cfg = compose_config(["model=llama", "model.name_or_path=null", "model.n_layer=1", "model.n_embd=32"])
    assert str(cfg.model.arch) == "llama" and not is_seq2seq(cfg.model)
    cfg.model.vocab_size = 1000
    model = build_model(cfg.model, tokenizer)
    assert isinstance(model, LlamaForCausalLM)
    assert model.get_input_embeddings().weight.shape[0] == 1000  # at least model.vocab_size rows
    ids = torch.tensor([tokenizer("The river rose")["input_ids"]])
    assert model(input_ids=ids, labels=ids).loss.isfinite()


def test_qwen2_grouped_query_attention_and_mlp_width(tokenizer):
    model = build_model(small("qwen2", n_kv_head=2, n_inner=48), tokenizer)
    assert isinstance(model, Qwen2ForCausalLM)
    assert model.config.num_key_value_heads == 2 and model.config.intermediate_size == 48


def test_causal_needs_a_pretrained_model_and_unknown_arch_is_refused(tokenizer):
    with pytest.raises(ConfigError, match="model.arch=causal needs model.name_or_path"):
        build_model(small("causal"), tokenizer)
    with pytest.raises(ConfigError, match="model.arch must be one of"):
        ModelConfig(arch="mamba")


def test_the_1b_random_config_has_llama_3_2_1b_shape():
    cfg = compose_config(["model=llama_1b_random"]).model
    config = model_config(cfg, vocab=2048)
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    assert config.vocab_size == 128256
    assert sum(p.numel() for p in model.parameters()) == 1_235_814_400  # Llama-3.2-1B's count (tied head)


def test_a_saved_model_is_read_straight_onto_the_run_device_with_the_same_weights(tokenizer, tmp_path):
    """``device=`` passes ``device_map={"": device}`` to ``from_pretrained`` (on a GPU: no host copy); the weights,
    the dtype and the tied head are those of the plain load; the log line names the size and the device."""
    assert build._on_device(None) == {}
    assert build._on_device("cuda:3") == {"device_map": {"": torch.device("cuda:3")}}
    cfg = small("llama", vocab_size=512, dtype="bfloat16")
    torch.manual_seed(0)
    build_model(cfg, tokenizer).save_pretrained(tmp_path / "m")
    plain = load_model(str(tmp_path / "m"), cfg)
    placed = load_model(str(tmp_path / "m"), cfg, device=torch.device("cpu"))
    assert placed.get_input_embeddings().weight is placed.get_output_embeddings().weight
    assert {p.dtype for p in placed.parameters()} == {torch.bfloat16}
    expected = plain.state_dict()
    assert all(torch.equal(t, expected[k]) for k, t in placed.state_dict().items())
    line = build.load_line(placed, torch.device("cpu"), 1.0, 1.5)
    assert line.startswith(f"weights: {build.weight_gib(placed):.2f} GiB in bfloat16 on cpu; host memory")
    assert "+0.50 GiB" in line and "n/a" in build.load_line(placed, "cpu", None, 1.0)
