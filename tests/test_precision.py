"""The precision policy (``model.dtype``, ``trainer.mixed_precision``) and what every load path keeps:
every checkpoint of every arm is evaluated in the same precision whatever its path (freshly trained, from the
step-0 cache, resumed, ``eval_initial``, evolve-eval), and gradient checkpointing survives every load."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
from helpers import tiny_cfg
from omegaconf import OmegaConf
from helpers.runs import run_sweep

from evolve_train.config import Config


def predictions(run: Path, checkpoint: int) -> dict[str, str]:
    folder = run / "predictions" / f"step_{checkpoint}"
    return {p.name: p.read_text() for p in sorted(folder.glob("*.jsonl"))}


@pytest.mark.slow
def test_lora_vs_full_in_bf16_predicts_the_same_at_step0(tmp_path):
    """One arm trains step 0 (its model went through ``accelerator.prepare``), the other loads it from the
    step-0 cache: the same weights evaluated under the same bf16 autocast give the same predictions."""
    sweep = tmp_path / "sweep"
    runs = run_sweep(
        sweep,
        "experiment=lora_vs_full",
        "trainer.mixed_precision=bf16",
        "data.world.n_steps=2",
        "eval.eval_initial=true",
    )
    assert [run.relative_to(sweep).parts[0] for run in runs] == ["full", "lora"]
    assert "loaded from the step-0 cache" in (runs[1] / "train.log").read_text()
    full, lora = (predictions(run, 0) for run in runs)
    assert full and full == lora
    assert predictions(runs[0], -1) == predictions(runs[1], -1)


def test_resume_and_a_step0_cache_hit_keep_gradient_checkpointing(tmp_path):
    """``model.gradient_checkpointing`` holds for every model of the run: built, loaded from the step-0
    cache, loaded on resume (and in ``model.dtype``)."""
    import shutil

    from evolve_train.run import ContinualRun, train

    settings = ("model.gradient_checkpointing=true", f"method.step0_cache={tmp_path / 'cache'}", "data.world.n_steps=2")
    train(tiny_cfg(tmp_path / "first", *settings))  # trains step 0 and stores it in the cache

    hit = ContinualRun(tiny_cfg(tmp_path / "hit", *settings, "method=lora")).setup()
    try:
        assert hit.model.is_activation_checkpointing  # built
        hit.train_step(hit.plan(0))
        rows = [json.loads(line) for line in (tmp_path / "hit" / "train_log.jsonl").read_text().splitlines()]
        assert rows and all(row.get("from_step0_cache") for row in rows)  # a hit: loaded, not trained
        assert hit.model.is_activation_checkpointing
    finally:
        hit.close(True)

    shutil.copytree(tmp_path / "first", tmp_path / "resumed")
    state = json.loads((tmp_path / "resumed" / "state.json").read_text())
    state.update(trained=[0], evaluated=[0])
    (tmp_path / "resumed" / "state.json").write_text(json.dumps(state))
    resumed = ContinualRun(tiny_cfg(tmp_path / "resumed", *settings)).setup()
    try:
        assert resumed.start == 1 and resumed.model.is_activation_checkpointing
        assert next(resumed.model.parameters()).dtype == torch.float32
    finally:
        resumed.close(True)


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


# --- trainer.mixed_precision=auto: bf16 where the device computes it natively, fp32 elsewhere ------------------


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


def test_the_step0_key_of_auto_is_the_key_of_the_precision_it_resolved_to(monkeypatch, tmp_path):
    """A bf16 machine and an fp32 machine never share a step-0 entry under ``auto``; on each, ``auto`` shares
    it with the runs that set the precision it resolved to (the same training)."""
    from accelerate.state import AcceleratorState

    from evolve_train.data.timeline import TimeStep
    from evolve_train.models.build import train_tokenizer
    from evolve_train.training.distributed import build_accelerator
    from evolve_train.training.step0_cache import step0_key

    tokenizer = train_tokenizer(["the director of Orvane was Ada Brill", "in 2019 it was Tom Vey"], 300)
    step0 = TimeStep(0, "2018", pairs=[{"input": "Orvane is run by <mask>.", "output": "Ada Brill"}])
    runtime = {"device": "cpu", "distributed_type": "NO"}

    def cfg(precision: str) -> Config:
        return OmegaConf.to_object(tiny_cfg(tmp_path, f"trainer.mixed_precision={precision}"))

    def key(precision: str) -> str:
        return step0_key(cfg(precision), tokenizer, 1, step0, runtime)

    monkeypatch.setenv("ACCELERATE_USE_CPU", "1")
    keys = {}
    for machine, flags in (("bf16", {"avx512f", "avx512_bf16"}), ("fp32", {"avx2"})):
        fake_cpu(monkeypatch, flags)
        AcceleratorState._reset_state(reset_partial_state=True)
        before = key("auto")  # no accelerator yet: resolved for the device this process would get
        build_accelerator(cfg("auto").trainer, cpu=True)
        keys[machine] = key("auto")
        assert before == keys[machine]
    assert keys["bf16"] == key("bf16") and keys["fp32"] == key("no") and keys["bf16"] != keys["fp32"]


@pytest.mark.parametrize("experiment", ["pretrained", "dyknow"])
def test_the_shipped_pretrained_recipes_choose_their_precision_by_the_machine(tmp_path, experiment):
    from evolve_train.config import Precision

    cfg = tiny_cfg(tmp_path, f"experiment={experiment}")
    assert OmegaConf.to_object(cfg).trainer.mixed_precision is Precision.auto


def test_every_row_records_the_precision_auto_resolved_to(monkeypatch, tmp_path):
    """On a CPU faked as AVX2-only, ``auto`` trains and evaluates in fp32 and every metric row says ``no``;
    an explicit setting is recorded as itself."""
    from accelerate.state import AcceleratorState

    from evolve_train.run import train

    monkeypatch.setenv("ACCELERATE_USE_CPU", "1")
    fake_cpu(monkeypatch, {"avx2"}, "AVX2")
    AcceleratorState._reset_state(reset_partial_state=True)
    train(tiny_cfg(tmp_path / "auto", "trainer.mixed_precision=auto", "data.world.n_steps=2"))
    rows = [json.loads(line) for line in (tmp_path / "auto" / "metrics.jsonl").read_text().splitlines()]
    assert rows and {row["mixed_precision"] for row in rows} == {"no"}


def test_every_step_trains_under_autocast_after_an_evaluated_step(tmp_path, monkeypatch):
    """``trainer.mixed_precision=bf16`` holds for every time step: the loop's forward of steps 1 and 2 runs under
    autocast (a Linear's output is bf16) although step 0's model was prepared, evaluated (which strips
    accelerate's autocast wrapper) and prepared again. Before the fix, later steps silently trained in fp32."""
    from evolve_train.run import train
    from evolve_train.training import loop

    seen: dict[int, set] = {}
    original_run = loop.StepTrainer.run

    def run_and_watch(self):  # the step's training forwards only (not the evaluation's)
        step = self.plan.step
        layer = next(
            m for m in self.unwrapped.modules() if isinstance(m, torch.nn.Linear) or "Conv1D" in type(m).__name__
        )
        handle = layer.register_forward_hook(lambda m, i, out: seen.setdefault(step, set()).add(out.dtype))
        try:
            original_run(self)
        finally:
            handle.remove()

    monkeypatch.setattr(loop.StepTrainer, "run", run_and_watch)
    train(
        tiny_cfg(
            tmp_path / "run", "trainer.mixed_precision=bf16", "eval.evaluators=[splits]", "method.step0_cache=null"
        )
    )
    assert seen == {0: {torch.bfloat16}, 1: {torch.bfloat16}, 2: {torch.bfloat16}}


def test_in_bf16_a_step0_cache_hit_trains_the_later_steps_as_the_run_that_trained_step0(tmp_path):
    """The same later steps from the same step-0 weights: the run that trained step 0 in process and the run that
    loaded it from the step-0 cache log the same losses and save the same weights (one computation, twice)."""
    from safetensors.torch import load_file

    from evolve_train.run import train

    settings = ("trainer.mixed_precision=bf16", "eval.evaluators=[splits]", f"method.step0_cache={tmp_path / 'cache'}")
    train(tiny_cfg(tmp_path / "trained", *settings))
    train(tiny_cfg(tmp_path / "hit", *settings))

    def later(run: str) -> list:
        rows = [json.loads(line) for line in (tmp_path / run / "train_log.jsonl").read_text().splitlines()]
        return [(r["time_step"], r["optimizer_step"], r["loss"]) for r in rows if "loss" in r and r["time_step"] > 0]

    hit_rows = [json.loads(line) for line in (tmp_path / "hit" / "train_log.jsonl").read_text().splitlines()]
    assert any(r.get("from_step0_cache") for r in hit_rows)  # the second run did load step 0
    assert later("trained") and later("trained") == later("hit")
    a, b = (load_file(tmp_path / run / "steps/2/model.safetensors") for run in ("trained", "hit"))
    assert all(torch.equal(a[k], b[k]) for k in a)
