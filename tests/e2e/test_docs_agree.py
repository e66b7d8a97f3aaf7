"""README.md and docs/ say what the code does: each test pins one statement of the docs to the code behind it.

One tiny LoRA run of three time steps (``method=lora``: steps 1 and 2 adapter-only) through ``train.py`` serves
them all: docs/evaluation.md's "LoRA checkpoints and `lm_eval`" commands, run as written, and the line the run
prints first (what trains at step 0).

The section's lines run once for the module (the ``documented`` fixture: the export line and, with lm-eval
installed, the three ``lm_eval`` lines, in order in one folder); the export test reads the ``merged/2`` it wrote and
the ``lm_eval`` test the outputs of the ``lm_eval`` lines, each with its checks as before (the export line used to
run in each of the two tests).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import TINY, forked, read_jsonl
from helpers.lm_eval import needs_harness

ROOT = Path(__file__).resolve().parents[2]
SET = "unchanged"


def read(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def lora_lm_eval_section() -> str:
    return read("docs/evaluation.md").split("### LoRA checkpoints and `lm_eval`", 1)[1].split("\n## ", 1)[0]


def documented_lines() -> list[str]:
    """The command lines of the section's code block, continuation lines joined."""
    block = lora_lm_eval_section().split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def environment(tmp_path: Path) -> dict:
    """The reader's shell, offline: the package's and lm-eval's commands on PATH."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1"}
    env.update(HF_DATASETS_OFFLINE="1", HF_DATASETS_CACHE=str(tmp_path / "hf_datasets"), TOKENIZERS_PARALLELISM="false")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def run_documented(line: str, run: Path, cwd: Path, *extra: str) -> None:
    done = subprocess.run(
        ["bash", "-c", " ".join([line.replace("RUN/", f"{run}/").replace("RUN ", f"{run} "), *extra])],
        cwd=cwd,
        env=environment(cwd),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, (line, done.stderr[-3000:])


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory) -> tuple[Path, str]:
    """The tiny LoRA run (3 time steps; steps 1 and 2 hold adapters only) and its console output."""
    run = tmp_path_factory.mktemp("lora") / "run"
    overrides = [*TINY, "method=lora", "eval.evaluators=[splits]", f"hydra.run.dir={run}"]
    # forked (helpers.forked.python): the training is the documented lines' input, not what they test; the
    # reader's shell (environment(): a datasets cache of its own, read when datasets loads) is theirs
    done = forked.python([sys.executable, "train.py", *overrides], env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    for step in (1, 2):
        assert not (run / "steps" / str(step) / "model.safetensors").exists()
        assert (run / "steps" / str(step) / "adapter").is_dir()
    return run, done.stdout


def _step(model_args: str) -> int:
    """The checkpoint a documented ``--model_args`` loads: the last step number it names."""
    return int(re.findall(r"/(\d+)", model_args)[-1])


def lm_eval_step(line: str) -> int:
    """The checkpoint a documented ``lm_eval`` line scores."""
    return _step(line.split("--model_args ", 1)[1].split()[0])


@pytest.fixture(scope="module")
def documented(lora_run, tmp_path_factory) -> Path:
    """The folder the section's lines ran in, as written and in order (the export comes before the line that reads
    it), on the LoRA run: ``merged/2`` from the export line and, where lm-eval is installed, each ``lm_eval`` line's
    output under ``out/<k>`` (``--device cpu --log_samples --output_path out/<k>`` added) on what
    ``evolve-data export-lm-eval`` wrote to ``lm_eval_tasks`` from the run's timeline and prompts. Read it; never
    write into it."""
    from evolve_train.cli.data import main as evolve_data

    run, _ = lora_run
    where = tmp_path_factory.mktemp("documented")
    harness = importlib.util.find_spec("lm_eval") is not None
    if harness:
        data = [o for o in TINY if o.startswith(("data.", "eval."))]  # the run's timeline and prompts
        assert evolve_data(["export-lm-eval", "--out", str(where / "lm_eval_tasks"), *data]) == 0
    for line in documented_lines():
        if not line.startswith("lm_eval "):
            run_documented(line, run, where)
        elif harness:
            extra = ["--device", "cpu", "--log_samples", "--output_path", f"out/{lm_eval_step(line)}"]
            run_documented(line, run, where, *extra)
    return where


@pytest.mark.slow
def test_the_documented_export_gives_the_model_the_run_held(lora_run, documented):
    """docs/evaluation.md's export command, as written, on step 2: the exported dir loads with plain transformers
    to the weights the project's loader rebuilds."""
    import torch
    from transformers import AutoModelForCausalLM

    from evolve_train.config import ModelConfig
    from evolve_train.models.build import load_model

    run, _ = lora_run
    (export,) = [line for line in documented_lines() if line.startswith("evolve-data export-merged")]
    assert "merged/2" in export.split()  # the documented export writes the folder read here
    exported = AutoModelForCausalLM.from_pretrained(documented / "merged" / "2").state_dict()
    rebuilt = load_model(str(run / "steps" / "2"), ModelConfig()).state_dict()
    assert exported.keys() == rebuilt.keys() and all(torch.equal(exported[k], rebuilt[k]) for k in exported)
    assert (documented / "merged" / "2" / "tokenizer.json").is_file()


@needs_harness
@pytest.mark.slow
def test_the_documented_lm_eval_commands_give_the_runs_own_predictions(lora_run, documented):
    """Each documented case (k=0: ``steps/0``; k=1: ``steps/0`` with ``peft=steps/1/adapter``; k=2: exported, then
    ``merged/2``), run as written on the exported tasks (the ``documented`` fixture): lm-eval's answers are the
    run's own predictions of that checkpoint item by item, and its exact match the run's EM."""
    run, _ = lora_run
    lm_eval = [line for line in documented_lines() if line.startswith("lm_eval ")]
    steps = [lm_eval_step(line) for line in lm_eval]
    assert steps == [0, 1, 2]
    metrics = [r for r in read_jsonl(run / "metrics.jsonl") if r.get("group") == "splits" and r["set_name"] == SET]
    ours = {}
    for step in (0, 1, 2):
        ours[step] = {
            r["id"]: r["prediction"] for r in read_jsonl(run / "predictions" / f"step_{step}" / f"{SET}.jsonl")
        }
        (samples,) = (documented / "out" / str(step)).rglob(f"samples_evolve_{SET}_*.jsonl")
        assert {s["doc"]["id"]: s["filtered_resps"][0] for s in read_jsonl(samples)} == ours[step], step
        (results,) = (documented / "out" / str(step)).rglob("results_*.json")
        em = json.loads(results.read_text())["results"][f"evolve_{SET}"]["exact_match,answer"]
        assert em == pytest.approx(next(r["em"] for r in metrics if r["checkpoint"] == step), abs=1e-12)
    assert len({tuple(sorted(p.items())) for p in ours.values()}) == 3  # the checkpoints answer differently


@pytest.mark.slow
def test_a_lora_run_says_first_what_trains_at_step_0(lora_run, tmp_path):
    """The run's first line, on the console and in its ``train.log``: step 0 trains all weights (the default); its
    report's provenance section says it again."""
    from evolve_train.methods.lora import step0_policy
    from evolve_train.reporting.report import build_report

    run, console = lora_run
    policy = step0_policy("lora", ["lora"], False)
    assert policy in console.splitlines()[0]
    assert policy in (run / "train.log").read_text(encoding="utf-8").splitlines()[0]
    build_report([run], tmp_path / "report", ci=False)
    assert policy in (tmp_path / "report" / "report.md").read_text(encoding="utf-8")
