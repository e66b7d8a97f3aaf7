"""The memory preflight (``training/preflight.py``): its estimate against measured peaks, its refusal, and the run
that stops on it before anything is written."""

from __future__ import annotations

import sys

import pytest
import torch

from evolve_train.errors import ConfigError
from evolve_train.training.preflight import GIB, Shape, check, estimate
from helpers.processes import ROOT


sys.path.insert(0, str(ROOT / "scripts"))


SHAPE_8B = Shape(parameters=8_030_261_248, hidden=4096, ffn=14336, layers=32, vocab=128256)


def test_an_8b_step_refused_on_one_80gb_gpu_names_what_would_fit():
    settings = dict(tokens=16384, weight_bytes=2, compute_bytes=2)
    with pytest.raises(ConfigError) as refused:
        check(SHAPE_8B, 80 * GIB, **settings)
    message = str(refused.value)
    assert "memory preflight: a training step needs about" in message and "of the device's 80.0 GiB" in message
    assert "optimizer 29.92" in message  # 2 moments x 8.03e9 x 2 bytes
    assert "Would fit:" in message and "trainer.memory_preflight=warn" in message
    fits = message.split("Would fit: ")[1].split(". To start")[0].split("; ")
    for suggestion in fits:
        assert "tokens per micro-batch" in suggestion or "model." in suggestion
    sharded = estimate(SHAPE_8B, world=8, sharded=True, checkpointing=True, **settings)
    assert sharded.total < 0.9 * 80 * GIB  # eight GPUs under FSDP with checkpointing fit
    check(SHAPE_8B, 80 * GIB, enforce=False, **settings)  # warn: no error


def test_checkpointing_and_sharding_shrink_their_parts_only():
    plain = estimate(SHAPE_8B, tokens=8192)
    ckpt = estimate(SHAPE_8B, tokens=8192, checkpointing=True)
    fsdp = estimate(SHAPE_8B, tokens=8192, world=8, sharded=True)
    assert ckpt.activations < plain.activations / 5 and ckpt.parameters == plain.parameters
    assert fsdp.parameters == plain.parameters / 8 and fsdp.activations == plain.activations
    assert estimate(SHAPE_8B, tokens=8192, chunked=False).loss == 8192 * 128256 * 12


def test_fsdp2_reduces_gradients_in_float32_by_default():
    from accelerate.utils import FullyShardedDataParallelPlugin

    from evolve_train.config import TrainerConfig
    from evolve_train.training.distributed import reduce_in

    plugin = FullyShardedDataParallelPlugin(fsdp_version=2)
    plugin.set_mixed_precision("bf16")
    assert plugin.mixed_precision_policy.reduce_dtype == torch.bfloat16  # accelerate's own policy
    reduce_in(plugin, TrainerConfig().fsdp_reduce_dtype)
    policy = plugin.mixed_precision_policy
    assert policy.reduce_dtype == torch.float32 and policy.param_dtype == torch.bfloat16
    plain = FullyShardedDataParallelPlugin(fsdp_version=2)  # no mixed precision: weights' dtype, fp32 reduce
    reduce_in(plain, "float32")
    assert (
        plain.mixed_precision_policy.reduce_dtype == torch.float32 and plain.mixed_precision_policy.param_dtype is None
    )
    with pytest.raises(ConfigError, match="trainer.fsdp_reduce_dtype must be one of float32, bfloat16, param"):
        reduce_in(plain, "fp8")
