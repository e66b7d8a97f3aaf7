"""What a LoRA run trains at step 0, in the one line the run prints first and its report's header shows."""

from __future__ import annotations

import json

import pytest

from evolve_train.evaluation.rows import Run
from evolve_train.methods.lora import step0_policy
from evolve_train.reporting.header import provenance_section, step0_policies


def test_the_default_says_step_0_trains_all_weights_and_lora_starts_at_step_1():
    assert step0_policy("lora", ["lora"], False) == (
        "method lora: step 0 trains all weights (method.at_step0=false); LoRA adapters from step 1"
    )


def test_at_step0_says_lora_trains_from_step_0():
    assert step0_policy("lora_replay", ["lora", "replay"], True) == (
        "method lora_replay: LoRA adapters from step 0 (method.at_step0=true); no step trains all weights"
    )


@pytest.mark.parametrize("strategies", [["full"], ["replay"], []])
def test_methods_without_lora_have_no_line(strategies):
    assert step0_policy("full", strategies, False) is None


def run_with(tmp_path, name, method: dict) -> Run:
    path = tmp_path / name
    path.mkdir()
    config = {f"method.{k}": v for k, v in method.items()}
    (path / "state.json").write_text(json.dumps({"identity": {"config": config}}), encoding="utf-8")
    return Run(path=path, rows=[], summary={}, label=name)


def test_the_report_header_names_each_lora_runs_step_0(tmp_path):
    runs = [
        run_with(tmp_path, "full", {"name": "full", "strategies": ["full"], "at_step0": False}),
        run_with(tmp_path, "lora", {"name": "lora", "strategies": ["lora"], "at_step0": False}),
        run_with(tmp_path, "lora0", {"name": "lora", "strategies": ["lora"], "at_step0": True}),
    ]
    assert step0_policies(runs) == [
        f"lora: {step0_policy('lora', ['lora'], False)}",
        f"lora0: {step0_policy('lora', ['lora'], True)}",
    ]
    _, intro, _ = provenance_section(runs, tmp_path)
    assert intro.endswith(f"Step 0 of the LoRA runs: {'; '.join(step0_policies(runs))}.")
    _, plain, _ = provenance_section(runs[:1], tmp_path)
    assert "Step 0" not in plain
