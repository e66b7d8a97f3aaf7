"""A real lm-evaluation-harness run on an exported task reproduces our evaluation of the same checkpoint.

A small world is trained for two steps (checkpoint 1 forgets part of Unchanged, so right and wrong answers
mix), its timeline exported with `evolve-data export-lm-eval`, and `lm_eval --model hf` run offline on the
Unchanged task and a multiple-choice task. lm-eval's exact match must equal the run's EM within 0.005 (here:
the same predictions item by item), its multiple-choice acc the calibration evaluator's, and `evolve-score`
on lm-eval's `--log_samples` files must give the run's own numbers.

Training is 40 epochs at step 0 and 20 at step 1: measured 2026-12-07, Unchanged EM is 0.98 at checkpoint 0 and 0.40
(20 of 50 items) at checkpoint 1, inside the (0.1, 0.9) the first test asks by 15 items either way or more.
"""

import glob
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evolve_train.cli.data import main as data_main
from evolve_train.cli.score import score_files
from evolve_train.run import train
from helpers import TINY, tiny_cfg

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("lm_eval") is None,
        reason="lm-evaluation-harness is not installed (pip install -e '.[lmeval]'; CI installs it)",
    ),
]

LEARNS = [
    "data.world.n_entities=20",
    "data.world.n_steps=2",
    "trainer.epochs_step0=40",
    "trainer.epochs=20",
    "model.n_embd=64",
    "model.n_layer=2",
    "trainer.lr=3e-3",
    "eval.evaluators=[splits,calibration]",
    "eval.forward_transfer=false",
    "eval.position_items=8",
]
TASKS = ("evolve_unchanged", "evolve_paired_1_mc")


def _rows(run_dir: Path) -> dict:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {(r["group"], r["set_name"]): r for r in rows if r.get("checkpoint") == 1 and "set_name" in r}


def _lm_eval(checkpoint: Path, tasks_dir: Path, out: Path, cache: Path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_CACHE": str(cache),
        "TOKENIZERS_PARALLELISM": "false",
    }
    command = [
        sys.executable,
        "-m",
        "lm_eval",
        "--model",
        "hf",
        "--model_args",
        f"pretrained={checkpoint}",
        "--tasks",
        ",".join(TASKS),
        "--include_path",
        str(tasks_dir),
        "--device",
        "cpu",
        "--batch_size",
        "64",
        "--log_samples",
        "--output_path",
        str(out),
    ]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    root = tmp_path_factory.mktemp("lm_eval")
    run_dir = root / "run"
    train(tiny_cfg(run_dir, *LEARNS))
    overrides = [o for o in [*TINY, *LEARNS] if o.startswith(("data.", "eval."))]
    assert data_main(["export-lm-eval", "--out", str(root / "tasks"), *overrides]) == 0
    result = _lm_eval(run_dir / "steps" / "1", root / "tasks", root / "out", root / "hf_datasets")
    assert result.returncode == 0, result.stderr[-4000:]
    (results_file,) = glob.glob(str(root / "out" / "*" / "results_*.json"))
    samples = {task: Path(next(iter(glob.glob(str(root / "out" / "*" / f"samples_{task}_*.jsonl"))))) for task in TASKS}
    return run_dir, root / "tasks", json.loads(Path(results_file).read_text())["results"], samples


def test_lm_eval_exact_match_equals_our_em_on_the_checkpoint(harness):
    run_dir, _, results, _ = harness
    ours = _rows(run_dir)[("splits", "unchanged")]
    assert 0.1 < ours["em"] < 0.9  # right and wrong answers both occur: the comparison can tell them apart
    assert results["evolve_unchanged"]["exact_match,answer"] == pytest.approx(ours["em"], abs=0.005)
    assert results["evolve_unchanged"]["f1,answer"] == pytest.approx(ours["f1"], abs=0.005)


def test_lm_eval_generates_our_predictions_item_by_item(harness):
    run_dir, _, _, samples = harness
    ours = {
        r["id"]: r["prediction"]
        for r in map(json.loads, (run_dir / "predictions" / "step_1" / "unchanged.jsonl").read_text().splitlines())
    }
    theirs = {
        s["doc"]["id"]: s["filtered_resps"][0]
        for s in map(json.loads, samples["evolve_unchanged"].read_text().splitlines())
    }
    assert theirs == ours


def test_evolve_score_on_lm_eval_samples_gives_our_numbers(harness):
    run_dir, tasks_dir, results, samples = harness
    rows = _rows(run_dir)
    report = score_files(tasks_dir / "data" / "evolve_unchanged.jsonl", samples["evolve_unchanged"])
    assert report["overall"]["n"] == rows[("splits", "unchanged")]["n"]
    assert report["overall"]["em"] == pytest.approx(rows[("splits", "unchanged")]["em"], abs=1e-12)
    calibration = rows[("calibration", "paired_1")]
    report = score_files(tasks_dir / "data" / "evolve_paired_1_mc.jsonl", samples["evolve_paired_1_mc"])
    assert report["calibration"]["n"] == calibration["n"]
    for key in ("acc", "acc_norm", "ece", "brier"):
        assert report["calibration"][key] == pytest.approx(calibration[key], abs=1e-4), key
    assert results["evolve_paired_1_mc"]["acc,none"] == pytest.approx(calibration["acc"], abs=0.005)
    assert results["evolve_paired_1_mc"]["acc_bytes,none"] == pytest.approx(calibration["acc_norm"], abs=0.005)
