"""lm-evaluation-harness asks what our evaluator asks on a tokenizer that prepends a BOS (a Llama-family setup,
built offline): with lm-eval's default ``--model_args`` every prediction equals ours, item by item, and with
``add_bos_token=False`` some differ — so the check can see how BOS is handled (docs/evaluation.md, "BOS handled
alike, checked item by item").

The run trains 20 epochs at step 0 and 10 at step 1 (docs/evaluation.md's table was measured at 60 and 30): enough
for the BOS to matter. Measured 2026-12-07 at these epochs: with ``add_bos_token=False`` 16 of 140 predictions differ
(evolve_new_1 12 of 90, evolve_unchanged 4 of 50), against the assertion's more than 0; at 60 and 30, 39 of 140.
With the defaults 0 differ at any length of training: that check is item by item."""

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import forked
from helpers.llama import smollm_like_tokenizer, tiny_llama
from helpers.processes import ROOT

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("lm_eval") is None,
        reason="lm-evaluation-harness is not installed (pip install -e '.[lmeval]'; CI installs it)",
    ),
]

REPO = ROOT
TASKS = "evolve_unchanged,evolve_new_1"


def bos_llama(directory: Path) -> Path:
    """The tiny Llama with a tokenizer whose post-processor prepends its BOS (``<|im_start|> $A``)."""
    from tokenizers.processors import TemplateProcessing
    from transformers import AutoTokenizer

    tokenizer = smollm_like_tokenizer()
    bos = tokenizer.bos_token
    tokenizer.backend_tokenizer.post_processor = TemplateProcessing(
        single=f"{bos} $A", special_tokens=[(bos, tokenizer.bos_token_id)]
    )
    tiny_llama(tokenizer).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    again = AutoTokenizer.from_pretrained(directory)
    assert again("The capital")["input_ids"][0] == again.bos_token_id  # saved and loaded, it still prepends
    return directory


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("bos")
    model = bos_llama(root / "base")
    run = root / "run"
    command = [
        sys.executable,
        "train.py",
        "model=llama",
        f"model.name_or_path={model}",
        "data.world.n_entities=20",
        "data.world.n_steps=2",
        "trainer.epochs_step0=20",
        "trainer.epochs=10",
        "trainer.lr=3e-3",
        "eval.evaluators=[splits]",
        "eval.eval_initial=false",
        f"hydra.run.dir={run}",
    ]
    env = {**os.environ, "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = forked.python(command, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return run


def check(run: Path, out: Path, model_args: str = "") -> dict[str, int]:
    """``scripts/lm_eval_check.sh`` on checkpoint 1: differing predictions per task."""
    env = {**os.environ, "PYTHON": sys.executable, "MODEL_ARGS": model_args}
    done = subprocess.run(
        ["bash", "scripts/lm_eval_check.sh", str(run), "1", str(out), TASKS],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    rows = [line.split() for line in done.stdout.splitlines() if re.match(r"^evolve_\w+\s+\d+", line)]
    assert {row[0] for row in rows} == set(TASKS.split(",")), done.stdout
    return {row[0]: int(row[-1]) for row in rows}


def test_lm_eval_defaults_ask_what_we_ask_with_a_bos(run_dir, tmp_path):
    assert check(run_dir, tmp_path / "defaults") == {task: 0 for task in TASKS.split(",")}
    without = check(run_dir, tmp_path / "no_bos", "add_bos_token=False")
    assert sum(without.values()) > 0, without  # the check sees the BOS: dropping it changes answers
