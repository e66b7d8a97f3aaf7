"""The ``lm_eval`` evaluator: lm-evaluation-harness tasks scored on every checkpoint of a run.

A local task (YAML + JSONL in a temp folder, found through ``eval.lm_eval.include_path``) is scored on each
checkpoint of a tiny run, full and LoRA, and the rows must equal what the ``lm_eval`` command line gives on the
saved ``steps/<k>`` (for a LoRA step: the previous step's weights with ``peft=steps/<k>/adapter``); the rows reach
``metrics.jsonl``, the W&B offline run and the report's curves.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evolve_train.run import train
from helpers import tiny_cfg
from helpers.lm_eval import DOCS, GEN_TASK, TASK, needs_harness, overrides, write_tasks


def lm_eval_cli(model_args: str, tasks_dir: Path, out: Path) -> dict:
    """``lm_eval --model hf`` on a saved checkpoint: the results dict."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [sys.executable, "-m", "lm_eval", "--model", "hf", "--model_args", model_args]
    command += ["--tasks", f"{TASK},{GEN_TASK}", "--include_path", str(tasks_dir), "--device", "cpu"]
    command += ["--batch_size", "4", "--output_path", str(out)]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    (path,) = out.rglob("results_*.json")
    return json.loads(path.read_text())["results"]


def lm_eval_rows(run_dir: Path) -> dict:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {(r["checkpoint"], r["task"], r["metric"]): r for r in rows if r.get("group") == "lm_eval"}


@pytest.fixture(scope="module")
def scored_runs(tmp_path_factory):
    """A full run (logging to W&B offline) and a LoRA run, two steps each, the local tasks at every checkpoint."""
    root = tmp_path_factory.mktemp("lm_eval_runs")
    tasks = write_tasks(root / "tasks")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WANDB_MODE", "offline")
        mp.setenv("WANDB_SILENT", "true")
        train(tiny_cfg(root / "full", *overrides(tasks, "logger.backends=[disk,wandb]")))
    train(tiny_cfg(root / "lora", *overrides(tasks, "method=lora")))
    return root, tasks


def _same_numbers(ours: dict, theirs: dict, checkpoint: int) -> None:
    for task in (TASK, GEN_TASK):
        for key, value in theirs[task].items():
            name, _, flt = key.partition(",")
            if flt and not name.endswith("_stderr") and isinstance(value, float):
                row = ours[(checkpoint, task, name)]
                assert row["value"] == pytest.approx(value, abs=1e-12), (task, name)
                assert row["stderr"] == pytest.approx(theirs[task][f"{name}_stderr,{flt}"], abs=1e-12)
                assert row["n"] == len(DOCS)


@needs_harness
@pytest.mark.slow
def test_full_checkpoints_score_as_the_command_line(scored_runs):
    root, tasks = scored_runs
    ours = lm_eval_rows(root / "full")
    assert {k for k, _, _ in ours} == {-1, 0, 1}  # the model before training first
    assert len({ours[(k, TASK, "acc")]["value"] for k in (-1, 0, 1)}) > 1  # training moves the score
    for step in (0, 1):
        _same_numbers(
            ours, lm_eval_cli(f"pretrained={root / 'full' / 'steps' / str(step)}", tasks, root / f"cli{step}"), step
        )


@needs_harness
@pytest.mark.slow
def test_lora_step_scores_as_the_command_line_with_its_adapter(scored_runs):
    root, tasks = scored_runs
    steps = root / "lora" / "steps"
    assert (steps / "1" / "adapter").is_dir() and not (steps / "1" / "model.safetensors").exists()
    theirs = lm_eval_cli(f"pretrained={steps / '0'},peft={steps / '1' / 'adapter'}", tasks, root / "cli_lora")
    _same_numbers(lm_eval_rows(root / "lora"), theirs, 1)


@needs_harness
@pytest.mark.slow
def test_rows_reach_wandb_and_the_report(scored_runs, tmp_path):
    from evolve_train.reporting.report import build_report
    from helpers.runs import offline_runs, parse_offline_run

    root, _ = scored_runs
    ours = lm_eval_rows(root / "full")
    parsed = parse_offline_run(offline_runs(root / "full")[0])
    curve = {
        h["time_step"]: h[f"lm_eval/{TASK}/acc/value"] for h in parsed["history"] if f"lm_eval/{TASK}/acc/value" in h
    }
    assert curve == {k: ours[(k, TASK, "acc")]["value"] for k in (-1, 0, 1)}
    drawn = build_report([root / "full"], tmp_path / "report", ci=False)
    xs, ys = drawn["series"]["lm_eval"]["acc"][TASK]
    assert xs == [-1.0, 0.0, 1.0] and ys == [ours[(k, TASK, "acc")]["value"] for k in (-1, 0, 1)]
    assert (tmp_path / "report" / "lm_eval_tasks.png").is_file()
    assert "lm_eval_tasks.png" in (tmp_path / "report" / "report.md").read_text()


@needs_harness
@pytest.mark.slow
def test_series_of_saved_steps_gives_the_runs_own_rows(scored_runs, tmp_path):
    from evolve_train.cli.evaluate import main as evolve_eval
    from helpers import TINY

    root, tasks = scored_runs
    models = [str(root / "full" / "steps" / str(k)) for k in (0, 1)]
    out = tmp_path / "series"
    assert (
        evolve_eval(["--series", *models, "--out", str(out), *TINY, *overrides(tasks, "eval.eval_initial=false")]) == 0
    )
    theirs, ours = lm_eval_rows(out), lm_eval_rows(root / "full")
    assert set(theirs) == {key for key in ours if key[0] >= 0}
    for key, row in theirs.items():
        assert (row["value"], row["stderr"], row["n"]) == (ours[key]["value"], ours[key]["stderr"], ours[key]["n"])


def _sharded(rank: int, port: int, checkpoint: str, tasks: str, out: str) -> None:
    """One of two gloo processes scoring the saved checkpoint with the evaluator's lm-eval call."""
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from evolve_train.config import LmEvalConfig
    from evolve_train.evaluation.context import Shards
    from evolve_train.evaluation.evaluators.harness import metric_values, run_tasks

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        model = AutoModelForCausalLM.from_pretrained(checkpoint)
        settings = LmEvalConfig(tasks=[TASK, GEN_TASK], include_path=[tasks], batch_size=4)
        results = run_tasks(model, AutoTokenizer.from_pretrained(checkpoint), settings, Shards(rank, 2))
        assert (results is None) == (rank != 0)
        if rank == 0:
            Path(out).write_text(json.dumps(metric_values(results)))
    finally:
        dist.destroy_process_group()


@needs_harness
@pytest.mark.slow
def test_two_processes_share_the_documents_and_give_the_same_numbers(scored_runs, tmp_path):
    import socket

    import torch.multiprocessing as mp

    root, tasks = scored_runs
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    out = tmp_path / "sharded.json"
    mp.spawn(_sharded, args=(port, str(root / "full" / "steps" / "1"), str(tasks), str(out)), nprocs=2)
    ours = lm_eval_rows(root / "full")
    sharded = json.loads(out.read_text())
    assert {(v["task"], v["metric"]) for v in sharded} == {(t, m) for k, t, m in ours if k == 1}
    for v in sharded:
        assert (v["value"], v["n"]) == (ours[(1, v["task"], v["metric"])]["value"], len(DOCS))
