"""`evolve-data export-merged RUN_DIR --step K OUT_DIR`: a run's checkpoint as a plain Hugging Face directory.

The run dir is built by hand as a LoRA run saves it (``steps/0`` with full weights, ``steps/1`` with ``config.json``,
the tokenizer and ``adapter/`` only); what the export writes must load with plain transformers to the weights the
project's loader rebuilds, and bad input must be one clear error that writes nothing.
"""

from __future__ import annotations

import json

import pytest
import torch
from helpers.methods import tiny_gpt2
from transformers import AutoModelForCausalLM

from evolve_train.cli.data import main
from evolve_train.config import ModelConfig
from evolve_train.errors import ConfigError
from evolve_train.export.merged import export_merged
from evolve_train.models.build import load_model
from evolve_train.models.lora_checkpoint import ADAPTER_DIR, ADAPTER_META


def lora_run(run, tokenizer):
    """``run/steps/0`` (weights) and ``run/steps/1`` (an adapter with non-zero B, no weights)."""
    from peft import LoraConfig, get_peft_model

    model = tiny_gpt2()
    model.save_pretrained(run / "steps" / "0")
    tokenizer.save_pretrained(run / "steps" / "0")
    peft = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["c_attn"], fan_in_fan_out=True))
    with torch.no_grad():
        for name, param in peft.named_parameters():
            if "lora_B" in name:
                param.normal_(std=0.5, generator=torch.Generator().manual_seed(1))
    step1 = run / "steps" / "1"
    peft.save_pretrained(step1 / ADAPTER_DIR)
    (step1 / ADAPTER_DIR / ADAPTER_META).write_text(json.dumps({"across_steps": "merge"}), encoding="utf-8")
    model.config.save_pretrained(step1)
    tokenizer.save_pretrained(step1)
    return run


def test_an_adapter_only_step_is_written_merged_and_loads_with_plain_transformers(tmp_path, tokenizer):
    run = lora_run(tmp_path / "run", tokenizer)
    written = export_merged(run, 1, tmp_path / "merged")
    assert written["merged_adapters"] and written["dtype"] == "float32"
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "merged").state_dict()
    rebuilt = load_model(str(run / "steps" / "1"), ModelConfig()).state_dict()
    base = load_model(str(run / "steps" / "0"), ModelConfig()).state_dict()
    assert exported.keys() == rebuilt.keys() and all(torch.equal(exported[k], rebuilt[k]) for k in exported)
    assert not all(torch.equal(exported[k], base[k]) for k in exported)  # the adapter was merged in
    assert (tmp_path / "merged" / "model.safetensors").is_file() and (tmp_path / "merged" / "tokenizer.json").is_file()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary sibling left


def test_a_step_with_full_weights_is_written_the_same_way_into_an_empty_dir(tmp_path, tokenizer):
    run = lora_run(tmp_path / "run", tokenizer)
    (tmp_path / "out").mkdir()
    assert not export_merged(run, 0, tmp_path / "out")["merged_adapters"]
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "out").state_dict()
    saved = AutoModelForCausalLM.from_pretrained(run / "steps" / "0").state_dict()
    assert all(torch.equal(exported[k], saved[k]) for k in saved)


def test_the_runs_model_dtype_is_kept(tmp_path, tokenizer):
    run = lora_run(tmp_path / "run", tokenizer)
    (run / "state.json").write_text(json.dumps({"identity": {"config": {"model.dtype": "bfloat16"}}}))
    assert export_merged(run, 1, tmp_path / "merged")["dtype"] == "bfloat16"
    assert AutoModelForCausalLM.from_pretrained(tmp_path / "merged").dtype == torch.bfloat16


@pytest.mark.parametrize(
    "where, step, message",
    [
        ("nowhere", 1, "no such run dir"),
        ("run/steps/1", 1, "not a run dir"),
        ("run", 7, r"steps/7: no such step \(saved: 0, 1, 2\)"),
        ("run", 2, "steps/2: not a checkpoint"),
    ],
)
def test_bad_run_dirs_and_steps_are_named(tmp_path, tokenizer, where, step, message):
    run = lora_run(tmp_path / "run", tokenizer)
    (run / "steps" / "2").mkdir()  # a step dir without a checkpoint in it
    with pytest.raises(ConfigError, match=message):
        export_merged(tmp_path / where, step, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_non_empty_out_dir_is_refused_and_left_as_it_was(tmp_path, tokenizer, capsys):
    run = lora_run(tmp_path / "run", tokenizer)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    capsys.readouterr()  # what building the run printed
    assert main(["export-merged", str(run), "--step", "1", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "out: exists and is not an empty directory" in err
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["notes.txt"]


def test_a_failed_write_leaves_nothing_behind(tmp_path, tokenizer, monkeypatch):
    import evolve_train.models.build as build

    class Unwritable:
        def save_pretrained(self, directory):
            raise OSError(28, "No space left on device")

    run = lora_run(tmp_path / "run", tokenizer)
    monkeypatch.setattr(build, "load_tokenizer", lambda path, cfg: Unwritable())
    with pytest.raises(OSError, match="No space left"):
        export_merged(run, 1, tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_the_command_prints_what_it_wrote(tmp_path, tokenizer, capsys):
    run = lora_run(tmp_path / "run", tokenizer)
    assert main(["export-merged", str(run), "--step", "1", str(tmp_path / "merged")]) == 0
    out = capsys.readouterr().out
    assert "steps/1 (its adapters merged, float32) -> " in out and f"pretrained={tmp_path / 'merged'}" in out
