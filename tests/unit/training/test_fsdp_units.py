"""Fast checks of the multi-process helpers (the 2-process runs are in tests/distributed/test_fsdp.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest
import torch

from evolve_train.config import TrainerConfig
from evolve_train.errors import ConfigError
from evolve_train.training.distributed import build_accelerator, fsdp2_requested, meta_skeleton, unsharded_copy


def test_dist_timeout_goes_to_the_process_group_kwargs(monkeypatch):
    monkeypatch.delenv("ACCELERATE_USE_FSDP", raising=False)
    accelerator = build_accelerator(TrainerConfig(dist_timeout_s=77))
    assert accelerator.init_handler.to_kwargs()["timeout"] == timedelta(seconds=77)
    with pytest.raises(ConfigError, match="dist_timeout_s"):
        TrainerConfig(dist_timeout_s=0)


def test_a_second_run_in_one_process_may_choose_another_precision(monkeypatch):
    monkeypatch.delenv("ACCELERATE_USE_FSDP", raising=False)
    assert str(build_accelerator(TrainerConfig(mixed_precision="no")).mixed_precision) == "no"
    # accelerate alone refuses: "AcceleratorState has already been initialized and cannot be changed"
    assert str(build_accelerator(TrainerConfig(mixed_precision="bf16")).mixed_precision) == "bf16"
    assert str(build_accelerator(TrainerConfig(mixed_precision="no")).mixed_precision) == "no"


def test_fsdp2_is_requested_by_the_variables_accelerate_launch_sets(monkeypatch):
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.setenv("FSDP_VERSION", "2")
    assert fsdp2_requested()
    monkeypatch.setenv("FSDP_VERSION", "1")
    assert not fsdp2_requested()


def test_unsharded_copy_rebuilds_weights_buffers_and_ties_from_a_skeleton():
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=50, n_positions=32))
    model.transformer.h[0].mlp.c_fc.weight.requires_grad_(False)
    skeleton = meta_skeleton(model)
    assert all(p.device.type == "meta" for p in skeleton.parameters())
    copy = unsharded_copy(model, skeleton)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in copy.state_dict().items())
    assert copy.lm_head.weight is copy.transformer.wte.weight  # still tied
    assert not copy.transformer.h[0].mlp.c_fc.weight.requires_grad
    ids = torch.randint(0, 50, (2, 8))
    assert torch.allclose(copy.eval()(ids).logits, model.eval()(ids).logits)  # eval: no dropout


def test_fsdp2_gradient_accumulation_reduces_after_every_micro_batch_unless_configured_otherwise(monkeypatch):
    from evolve_train.training import distributed

    monkeypatch.delenv("ACCELERATE_USE_FSDP", raising=False)
    monkeypatch.setattr(distributed, "enable_fsdp2_on_cpu", lambda accelerator: False)  # one process: no FSDP
    settings = {}
    for requested, configured in ((True, True), (True, False), (False, True)):
        monkeypatch.setattr(distributed, "fsdp2_requested", lambda: requested)
        trainer = TrainerConfig(fsdp_sync_each_batch=configured)
        accelerator = build_accelerator(trainer, gradient_accumulation_steps=4)
        assert accelerator.gradient_accumulation_steps == 4
        settings[requested, configured] = accelerator.gradient_state.plugin_kwargs.get("sync_each_batch", False)
    assert settings == {(True, True): True, (True, False): False, (False, True): False}
