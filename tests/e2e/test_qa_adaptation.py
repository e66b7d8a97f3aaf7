"""QA adaptation: a fine-tuned copy of each checkpoint is evaluated; the chain of steps never sees it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file

from evolve_train.errors import ConfigError, DataError
from evolve_train.run import train
from helpers import tiny_cfg
from helpers.processes import ROOT

SAMPLE = ROOT / "data" / "evolvingqa_sample"
FAST = [
    "data=evolvingqa",
    "data.steps=[20230101,'0102']",
    "trainer.epochs_step0=2",
    "trainer.epochs=1",
    "trainer.num_threads=1",
    "eval.evaluators=[splits]",
    "eval.forward_transfer=false",
]
ADAPT = ["eval.qa_adaptation.enabled=true", "eval.qa_adaptation.steps=12"]


def predictions(run_dir: Path, step: int, name: str) -> list[str]:
    path = run_dir / "predictions" / f"step_{step}" / f"{name}.jsonl"
    return [json.loads(line)["generation"] for line in path.read_text().splitlines()]


def test_adapted_copy_is_evaluated_and_never_fed_back(tmp_path):
    plain, adapted = tmp_path / "plain", tmp_path / "adapted"
    train(tiny_cfg(plain, f"data.root={SAMPLE}", *FAST))
    train(tiny_cfg(adapted, f"data.root={SAMPLE}", *FAST, *ADAPT))
    for step in (0, 1):  # identical checkpoints: adaptation trained a copy, the chain continued from the original
        a = load_file(plain / "steps" / str(step) / "model.safetensors")
        b = load_file(adapted / "steps" / str(step) / "model.safetensors")
        assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
    # ...while the evaluated model was a different (adapted) one
    assert predictions(plain, 1, "unchanged") != predictions(adapted, 1, "unchanged")


def test_adaptation_trains_a_copy_for_the_configured_steps(tmp_path):
    import torch
    from accelerate import Accelerator
    from omegaconf import OmegaConf

    from evolve_train.data.timeline import build_timeline
    from evolve_train.evaluation.qa_adaptation import QAAdaptation
    from evolve_train.models.build import build_text_format, build_model, train_tokenizer

    cfg = OmegaConf.to_object(tiny_cfg(tmp_path / "run", f"data.root={SAMPLE}", *FAST, *ADAPT))
    timeline = build_timeline(cfg.data)
    adaptation = QAAdaptation.from_config(cfg, timeline)
    assert len(adaptation.pairs) == 31 and adaptation.pairs[0]["input"].startswith("Question: ")
    tokenizer = train_tokenizer([p["input"] + " " + p["output"] for p in timeline.steps[0].pairs], 300)
    model = build_model(cfg.model, tokenizer)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    text_format = build_text_format(cfg.model, tokenizer)
    copy = adaptation.adapted(model, text_format, checkpoint=0, accelerator=Accelerator())
    assert copy is not model and all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert any(not torch.equal(before[k], v) for k, v in copy.state_dict().items())
    logged = []
    from evolve_train.training import loop

    original = loop.train_time_step

    def spy(*args, **kwargs):
        result = original(*args, **kwargs)
        logged.append(result.optimizer_steps)
        return result

    loop.train_time_step = spy
    try:
        adaptation.adapted(model, text_format, checkpoint=0, accelerator=Accelerator())
    finally:
        loop.train_time_step = original
    assert logged == [12]


def test_eval_question_in_the_adaptation_set_is_refused(tmp_path):
    release = tmp_path / "release"
    shutil.copytree(SAMPLE, release)
    eval_rows = (release / "finetune_qa" / "new_0102.csv").read_text().splitlines()
    train_file = release / "finetune_qa" / "unchanged_train.csv"
    lines = train_file.read_text().splitlines()
    lines.insert(4, eval_rows[3].upper())  # an eval question (case does not hide it) on line 5
    train_file.write_text("\n".join(lines) + "\n")
    run_dir = tmp_path / "run"
    with pytest.raises(DataError) as info:
        train(tiny_cfg(run_dir, f"data.root={release}", *FAST, *ADAPT))
    assert f"{train_file}, line 5, field 'question'" in str(info.value) and "'new_1/L4'" in str(info.value)
    assert not run_dir.exists()


def test_the_embedded_world_needs_a_train_file(tmp_path):
    with pytest.raises(ConfigError, match="eval.qa_adaptation.train_file"):
        train(tiny_cfg(tmp_path / "run", "eval.qa_adaptation.enabled=true"))
    assert not (tmp_path / "run").exists()


def test_experiment_overlay_turns_it_on_for_the_release():
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_object(tiny_cfg("unused", "experiment=evolvingqa", f"data.root={SAMPLE}"))
    assert cfg.data.kind == "evolvingqa" and cfg.eval.qa_adaptation.enabled
    assert cfg.data.prompt_template == "Question: {question}\nAnswer:"
    assert not OmegaConf.to_object(tiny_cfg("unused")).eval.qa_adaptation.enabled  # off for the embedded world
