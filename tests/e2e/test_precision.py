"""The precision policy (``model.dtype``, ``trainer.mixed_precision``) and what every load path keeps:
every checkpoint of every arm is evaluated in the same precision whatever its path (freshly trained, from the
step-0 cache, resumed, ``eval_initial``, evolve-eval), and gradient checkpointing survives every load."""

from __future__ import annotations

import json
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


def fake_cpu(monkeypatch, flags: set[str], capability: str = "AVX512") -> None:
    """This process's CPU as ``/proc/cpuinfo`` flags and torch's kernel capability say."""
    from evolve_train.training import distributed

    monkeypatch.setattr(distributed, "cpu_flags", lambda: set(flags))
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)


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
