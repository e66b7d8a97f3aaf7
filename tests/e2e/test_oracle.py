"""The oracle (``method=oracle``): each step trains from the initial weights on the union of the corpora so far,
like step 0, and its compute is in its rows."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import tiny_cfg
from helpers.faults import FAST  # the reference's overrides: its continual arm is conftest's reference
from safetensors.torch import load_file

from evolve_train.errors import ConfigError
from evolve_train.run import ContinualRun, train


@pytest.fixture(autouse=True)
def keep_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def compute(run_dir) -> dict[int, tuple[int, int]]:
    """``{step: (train_tokens, train_optimizer_steps)}`` from the metrics rows."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["checkpoint"]: (r["train_tokens"], r["train_optimizer_steps"]) for r in rows if r["checkpoint"] >= 0}


def test_the_oracle_starts_each_step_from_the_initial_weights_rebuilt_exactly(tmp_path):
    run = ContinualRun(tiny_cfg(tmp_path / "run", *FAST, "method=oracle")).setup()
    try:
        initial = {k: v.clone() for k, v in run.model.state_dict().items()}
        rebuilt = run.initial_weights().state_dict()
        assert initial.keys() == rebuilt.keys() and all(torch.equal(initial[k], rebuilt[k]) for k in initial)
    finally:
        run.close(ok=True)


def test_oracle_trains_on_the_union_with_step0s_epochs_and_reports_its_compute(reference, tmp_path):
    continual, oracle = reference, tmp_path / "oracle"  # continual: conftest's run of tiny_cfg with FAST, read only
    train(tiny_cfg(oracle, *FAST, "method=oracle"))
    epochs_step0, epochs = 3, 2  # tests/helpers.py TINY
    mine, theirs = compute(oracle), compute(continual)
    corpus = {k: theirs[k][0] // (epochs_step0 if k == 0 else epochs) for k in theirs}  # tokens of each corpus
    for k in range(3):
        assert mine[k][0] == epochs_step0 * sum(corpus[j] for j in range(k + 1)), (k, mine, theirs)
    assert mine[2][1] > mine[1][1] > mine[0][1] == theirs[0][1]  # more updates as the union grows
    a, b = (load_file(str(d / "steps/0/model.safetensors")) for d in (continual, oracle))
    assert all(torch.equal(a[k], b[k]) for k in a)  # step 0 is the ordinary step 0
    rows = [json.loads(line) for line in (oracle / "metrics.jsonl").read_text().splitlines()]
    assert {r["method"] for r in rows} == {"oracle"}
    assert {r["set"] for r in rows if r["checkpoint"] == 2 and "set" in r} == {
        r["set"]
        for r in (json.loads(line) for line in (continual / "metrics.jsonl").read_text().splitlines())
        if r["checkpoint"] == 2 and "set" in r
    }  # evaluated on the same sets


def test_the_experiment_overlay_selects_the_oracle(tmp_path):
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_object(tiny_cfg(tmp_path, "experiment=oracle"))
    assert cfg.method.name == "oracle" and "oracle" in cfg.method.strategies and cfg.experiment == "oracle"


def test_the_oracle_refuses_a_corpus_that_already_keeps_history(tmp_path):
    from omegaconf import OmegaConf

    from evolve_train.run import validate

    with pytest.raises(ConfigError, match="keep_history"):
        validate(OmegaConf.to_object(tiny_cfg(tmp_path, "method=oracle", "data.keep_history=true")))


def test_oracle_steps_run_step_0s_lr_curve(tmp_path):
    """From scratch, each oracle step warms up and peaks like step 0, whatever rewarm and the AR peak say."""
    run_dir = tmp_path / "oracle"
    train(
        tiny_cfg(
            run_dir,
            *FAST,
            "method=oracle",
            "trainer.rewarm=none",
            "trainer.peak_schedule=cosine_over_steps",
            "trainer.log_every=1",
            "data.world.n_steps=2",
        )
    )
    log = [json.loads(line) for line in (run_dir / "train_log.jsonl").read_text().splitlines()]
    first = {k: next(r["lr"] for r in log if r["time_step"] == k and r["optimizer_step"] == 1) for k in (0, 1)}
    assert first[1] == first[0] == pytest.approx(2e-3 * 2 / 2)  # update 1 of warmup 2 at lr 2e-3 (peak 1)
    peak1 = max(r["lr"] for r in log if r["time_step"] == 1)
    assert peak1 == pytest.approx(2e-3)
