"""The precision policy (``model.dtype``, ``trainer.mixed_precision``) and what every load path keeps:
every checkpoint of every arm is evaluated in the same precision whatever its path (freshly trained, from the
step-0 cache, resumed, ``eval_initial``, evolve-eval), and gradient checkpointing survives every load."""

from __future__ import annotations

import logging

import pytest
import torch
from helpers import tiny_cfg
from omegaconf import OmegaConf

from evolve_train.config import Config


def test_model_dtype_sets_the_weights_of_every_path_and_the_saved_checkpoints(tmp_path):
    from evolve_train.models.build import build_model, load_model, train_tokenizer

    cfg: Config = OmegaConf.to_object(tiny_cfg(tmp_path, "model.dtype=bfloat16")).model
    tokenizer = train_tokenizer(["the director of Orvane was Ada Brill", "in 2019 it was Tom Vey"], 300)
    model = build_model(cfg, tokenizer)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    model.save_pretrained(tmp_path / "ckpt")
    from safetensors.torch import load_file

    assert {t.dtype for t in load_file(tmp_path / "ckpt" / "model.safetensors").values()} == {torch.bfloat16}
    assert {p.dtype for p in load_model(str(tmp_path / "ckpt"), cfg).parameters()} == {torch.bfloat16}
    fp32 = OmegaConf.to_object(tiny_cfg(tmp_path)).model
    assert {p.dtype for p in load_model(str(tmp_path / "ckpt"), fp32).parameters()} == {torch.float32}


def test_model_dtype_rejects_other_values(tmp_path):
    from evolve_train.errors import ConfigError

    with pytest.raises(Exception, match="model.dtype"):
        OmegaConf.to_object(tiny_cfg(tmp_path, "model.dtype=float16"))
    with pytest.raises(ConfigError, match="model.dtype"):
        from evolve_train.config import ModelConfig

        ModelConfig(dtype="int8")


def fake_cpu(monkeypatch, flags: set[str], capability: str = "AVX512") -> None:
    """This process's CPU as ``/proc/cpuinfo`` flags and torch's kernel capability say."""
    from evolve_train.training import distributed

    monkeypatch.setattr(distributed, "cpu_flags", lambda: set(flags))
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)


@pytest.mark.parametrize(
    "flags, capability, precision, reason",
    [
        ({"avx2", "avx512f", "avx512_bf16"}, "AVX512", "bf16", "CPU has avx512_bf16"),
        ({"avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}, "AVX512", "bf16", "CPU has amx_bf16"),
        ({"avx2", "fma"}, "AVX2", "no", "CPU without AVX-512 BF16 or AMX, torch capability AVX2"),
        ({"avx2", "avx512f"}, "AVX512", "no", "CPU without AVX-512 BF16 or AMX, torch capability AVX512"),
        # the flag is there, but ATen runs its AVX2 kernels (ATEN_CPU_CAPABILITY=avx2): bf16 is emulated
        ({"avx512f", "amx_bf16"}, "AVX2", "no", "CPU has amx_bf16 but torch's kernels run at AVX2"),
    ],
)
def test_auto_resolves_on_a_cpu_by_its_bf16_flags_and_torch_capability(
    monkeypatch, flags, capability, precision, reason
):
    from evolve_train.config import TrainerConfig
    from evolve_train.training.distributed import resolve_precision

    fake_cpu(monkeypatch, flags, capability)
    assert resolve_precision(TrainerConfig(mixed_precision="auto"), torch.device("cpu")) == (precision, reason)
    for explicit in ("no", "bf16", "fp16"):  # a set precision is what it says, whatever the machine
        assert resolve_precision(TrainerConfig(mixed_precision=explicit), torch.device("cpu")) == (explicit, "set")


@pytest.mark.parametrize("native", [True, False])
def test_auto_resolves_on_cuda_by_the_device_bf16_support(monkeypatch, native):
    from evolve_train.config import TrainerConfig
    from evolve_train.training.distributed import resolve_precision

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: "Fake GPU")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: native)
    precision, reason = resolve_precision(TrainerConfig(mixed_precision="auto"), torch.device("cuda", 0))
    assert precision == ("bf16" if native else "no")
    assert reason == f"CUDA device Fake GPU {'has' if native else 'has no'} native bf16"
    assert resolve_precision(TrainerConfig(mixed_precision="auto"), torch.device("mps"))[0] == "no"


def test_a_real_cpu_resolves_and_the_flags_are_read():
    """No fake: the detection runs on this machine (whatever it finds) and agrees with its flags."""
    from evolve_train.config import TrainerConfig
    from evolve_train.training.distributed import CPU_BF16_FLAGS, cpu_flags, resolve_precision

    precision, reason = resolve_precision(TrainerConfig(mixed_precision="auto"), torch.device("cpu"))
    assert precision in ("bf16", "no") and reason.startswith("CPU ")
    if precision == "bf16":
        assert set(CPU_BF16_FLAGS) & cpu_flags()


@pytest.mark.parametrize(
    "flags, expected, line",
    [
        ({"avx512f", "avx512_bf16"}, "bf16", "mixed precision: auto -> bf16 (CPU has avx512_bf16)"),
        ({"avx2"}, "no", "mixed precision: auto -> no (CPU without AVX-512 BF16 or AMX, torch capability AVX512)"),
    ],
)
def test_build_accelerator_resolves_auto_in_one_log_line(monkeypatch, caplog, flags, expected, line):
    from evolve_train.config import TrainerConfig
    from evolve_train.training.distributed import build_accelerator

    fake_cpu(monkeypatch, flags)
    monkeypatch.setenv("ACCELERATE_USE_CPU", "1")  # the CPU's resolution, also on a machine with a GPU
    with caplog.at_level(logging.INFO, logger="evolve_train.training.distributed"):
        accelerator = build_accelerator(TrainerConfig(mixed_precision="auto"), cpu=True)
    assert str(accelerator.mixed_precision) == expected
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("mixed precision")]
    assert said == [line]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("evolve_train")]


@pytest.mark.parametrize("native", [False, True])
def test_an_explicit_bf16_on_a_cpu_without_native_bf16_warns_that_it_is_emulated(monkeypatch, caplog, native):
    from evolve_train.config import TrainerConfig
    from evolve_train.training.distributed import build_accelerator

    fake_cpu(monkeypatch, {"avx512f", "amx_bf16"} if native else {"avx2"}, "AVX512" if native else "AVX2")
    with caplog.at_level(logging.INFO, logger="evolve_train.training.distributed"):
        accelerator = build_accelerator(TrainerConfig(mixed_precision="bf16"), cpu=True)
    assert str(accelerator.mixed_precision) == "bf16"  # the setting holds: a warning, not a refusal
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "bf16" in r.getMessage()]
    if native:
        assert not warnings
    else:
        assert len(warnings) == 1 and "emulates" in warnings[0] and "slower than fp32" in warnings[0]
        assert "torch capability AVX2" in warnings[0] and "mixed_precision=auto picks fp32" in warnings[0]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="evolve_train.training.distributed"):
        build_accelerator(TrainerConfig(mixed_precision="no"), cpu=True)
    assert not [r for r in caplog.records if r.name == "evolve_train.training.distributed"]


@pytest.mark.parametrize("experiment", ["pretrained", "dyknow"])
def test_the_shipped_pretrained_recipes_choose_their_precision_by_the_machine(tmp_path, experiment):
    from evolve_train.config import Precision

    cfg = tiny_cfg(tmp_path, f"experiment={experiment}")
    assert OmegaConf.to_object(cfg).trainer.mixed_precision is Precision.auto
