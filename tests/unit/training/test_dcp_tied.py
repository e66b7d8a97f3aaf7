"""training/dcp_state.py on one process: a tied embedding is written once and reads back into both names."""

from __future__ import annotations

import torch
import torch.distributed.checkpoint as dcp
from transformers import LlamaConfig, LlamaForCausalLM

from evolve_train.training import dcp_state


def tiny(tied: bool) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    config = LlamaConfig(
        vocab_size=97, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, tie_word_embeddings=tied,
    )  # fmt: skip
    model = LlamaForCausalLM(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    optimizer.step()
    return model, optimizer


def saved_keys(path) -> set[str]:
    return set(dcp.FileSystemReader(str(path)).read_metadata().state_dict_metadata)


def test_a_tied_embedding_is_written_once_and_loads_into_both_names(tmp_path):
    torch.manual_seed(0)
    model, optimizer = tiny(tied=True)
    dcp_state.save(tmp_path / "s", None, model, optimizer)
    keys = saved_keys(tmp_path / "s")
    assert "model.model.embed_tokens.weight" in keys and "model.lm_head.weight" not in keys
    fresh, fresh_opt = tiny(tied=True)
    dcp_state.load(tmp_path / "s", None, fresh, fresh_opt)
    assert torch.equal(fresh.lm_head.weight, model.model.embed_tokens.weight)
    assert fresh.lm_head.weight is fresh.model.embed_tokens.weight
    for a, b in zip(model.state_dict().values(), fresh.state_dict().values()):
        assert torch.equal(a, b)
    state, fresh_state = optimizer.state_dict()["state"], fresh_opt.state_dict()["state"]
    assert all(torch.equal(state[i]["exp_avg"], fresh_state[i]["exp_avg"]) for i in state)


def test_untied_weights_that_are_equal_are_both_written(tmp_path):
    model, optimizer = tiny(tied=False)
    with torch.no_grad():
        model.lm_head.weight.copy_(model.model.embed_tokens.weight)  # equal values, two tensors
    dcp_state.save(tmp_path / "s", None, model, optimizer)
    assert {"model.model.embed_tokens.weight", "model.lm_head.weight"} <= saved_keys(tmp_path / "s")
