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
from test_sweep import run_sweep

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
