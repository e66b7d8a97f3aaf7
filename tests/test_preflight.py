"""The memory preflight (``training/preflight.py``): its estimate against measured peaks, its refusal, and the run
that stops on it before anything is written."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
import torch

from evolve_train.compose import compose_config
from evolve_train.errors import ConfigError
from evolve_train.training.preflight import GIB, Shape, check, estimate, run_preflight
from helpers.processes import ROOT

sys.path.insert(0, str(ROOT / "scripts"))


@pytest.mark.slow
@pytest.mark.parametrize("size", ["tiny", "small"])
def test_the_estimate_is_within_a_quarter_of_the_measured_peak(size):
    from bench_memory import SIZES, measure, preflight_estimate

    measured = measure("train_chunked", size)["peak_bytes"]
    estimated = preflight_estimate(SIZES[size])
    assert 0.75 <= estimated / measured <= 1.25, (estimated / GIB, measured / GIB)


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


def test_a_run_that_cannot_fit_stops_before_its_run_dir_is_written(tmp_path, monkeypatch):
    from evolve_train.training import preflight

    monkeypatch.setattr(preflight, "device_memory", lambda device, local: 0.5 * GIB)
    cfg = compose_config(["model=llama_1b_random", f"run_dir={tmp_path / 'run'}", "logger.backends=[disk]"])
    accelerator = SimpleNamespace(device=torch.device("cpu"), num_processes=1, mixed_precision="no")
    with pytest.raises(ConfigError, match="Would fit"):
        run_preflight(cfg, accelerator)
    cfg.trainer.memory_preflight = "warn"
    assert run_preflight(cfg, accelerator).total > 4 * GIB  # 1.24e9 fp32 weights alone
    cfg.trainer.memory_preflight = "maybe"
    with pytest.raises(ConfigError, match="trainer.memory_preflight must be one of check, warn, off"):
        run_preflight(cfg, accelerator)
    from evolve_train.run import ContinualRun

    cfg.trainer.memory_preflight = "check"
    with pytest.raises(ConfigError, match="memory preflight"):
        ContinualRun(cfg).setup()
    assert not (tmp_path / "run").exists()


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
