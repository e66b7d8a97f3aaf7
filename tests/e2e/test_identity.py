"""Run identity: run dirs named after the configuration, the config recorded in state.json and checked on
resume, the step-0 cache key (evolve_train/training/identity.py, training/step0_cache.py)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import TINY, forked

from evolve_train.training import identity
from helpers.identity import cfg_of, step0_key_of, tokenizer  # noqa: F401  (a fixture)


def test_fingerprint_follows_result_affecting_keys_only():
    base = identity.identity(cfg_of())
    assert identity.identity(cfg_of())["fingerprint"] == base["fingerprint"]
    for same in (
        "eval.batch_size=3",
        "trainer.num_threads=2",
        "logger.backends=[disk,console]",
        "trainer.log_every=5",
        "run_dir=/elsewhere",
        "resume=false",
        "+extra.note=hi",
    ):
        assert identity.identity(cfg_of(same))["fingerprint"] == base["fingerprint"], same
    for changed in (
        "trainer.lr=0.5",
        "method=lora",
        "method.lora.r=4",
        "seed=1",
        "data.world.change_share=0.5",
        "model.n_embd=64",
        "eval.max_items_per_set=3",
        "trainer.mixed_precision=bf16",
    ):
        assert identity.identity(cfg_of(changed))["fingerprint"] != base["fingerprint"], changed


def test_step0_key_follows_the_shape_step0_runs(tokenizer):
    assert step0_key_of(tokenizer, "trainer.schedule=cosine") != step0_key_of(tokenizer)
    # with trainer.step0_schedule set, trainer.schedule shapes the later steps only: one step 0 for the sweep
    shared = [
        step0_key_of(tokenizer, f"trainer.schedule={kind}", "trainer.step0_schedule=linear")
        for kind in ("linear", "cosine", "wsd", "infinite")
    ]
    assert set(shared) == {step0_key_of(tokenizer)}
    assert step0_key_of(tokenizer, "trainer.step0_schedule=cosine") == step0_key_of(
        tokenizer, "trainer.schedule=cosine"
    )


def train_py(run_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "train.py", f"hydra.run.dir={run_dir}", *TINY, *overrides]
    return forked.python(command, env={**os.environ, "WANDB_MODE": "disabled"}, timeout=300)


def file_hashes(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("identity") / "run"
    done = train_py(run_dir)
    assert done.returncode == 0, done.stderr[-3000:]
    return run_dir


@pytest.mark.slow
def test_a_changed_hyper_parameter_on_a_finished_run_dir_is_refused_and_touches_nothing(finished_run):
    before = file_hashes(finished_run)
    done = train_py(finished_run, "trainer.lr=1e-3")
    assert done.returncode != 0
    assert "trainer.lr: 0.002 -> 0.001" in done.stderr, done.stderr[-2000:]
    assert file_hashes(finished_run) == before  # every file byte-identical, none added or removed


@pytest.mark.slow
def test_the_same_command_twice_resumes_and_trains_nothing(finished_run):
    train_log = (finished_run / "train_log.jsonl").read_bytes()
    weights = file_hashes(finished_run / "steps")
    for extra in ([], ["eval.batch_size=7"]):  # the same command; then with a key that may differ on resume
        done = train_py(finished_run, *extra)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "after step 2" in done.stdout + done.stderr
        assert (finished_run / "train_log.jsonl").read_bytes() == train_log  # no training row
        assert file_hashes(finished_run / "steps") == weights


@pytest.mark.slow
def test_a_run_dir_from_before_fingerprints_resumes_with_a_warning(finished_run, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(finished_run, old)
    state = json.loads((old / "state.json").read_text())
    del state["identity"]
    (old / "state.json").write_text(json.dumps(state))
    done = train_py(old)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "records no config" in done.stdout + done.stderr and "after step 2" in done.stdout + done.stderr
    assert json.loads((old / "state.json").read_text())["identity"]["fingerprint"]  # recorded from now on
    refused = train_py(old, "trainer.lr=1e-3")
    assert refused.returncode != 0 and "trainer.lr: 0.002 -> 0.001" in refused.stderr
