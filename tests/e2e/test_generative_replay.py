"""Generative replay (``method=generative_replay``, ``methods/generative.py``): the previous step's model samples
documents before each step k >= 1, saved in ``generated/step_<k>.jsonl`` and mixed into step k; a step trained
again reads the same samples back, and a killed run resumed has the uninterrupted run's samples and results."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers import TINY, forked, tiny_cfg, wall_clock

from evolve_train.config import GenerativeConfig
from evolve_train.methods import generative
from evolve_train.methods.generative import GenerativeReplay, generate_samples, generation_seed, samples_path
from evolve_train.models.build import load_model, load_tokenizer
from evolve_train.models.text_format import make_text_format


GEN = ["method=generative_replay", "method.generative.samples=6", "method.generative.max_new_tokens=12"]


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    from evolve_train.run import ContinualRun

    run_dir = tmp_path_factory.mktemp("generative") / "run"
    run = ContinualRun(tiny_cfg(run_dir, "eval.evaluators=[splits]", *GEN))
    run.run()
    return run


def checkpoint(run, step):
    path = str(run.run_dir / "steps" / str(step))
    model, tokenizer = load_model(path, run.cfg.model), load_tokenizer(path, run.cfg.model)
    return model, make_text_format(tokenizer)


def test_samples_are_saved_per_step_and_mixed_in(reference):
    run_dir = reference.run_dir
    assert not samples_path(run_dir, 0).exists()  # step 0 has no previous model
    mixed = [r for r in read(run_dir / "train_log.jsonl") if r.get("group") == "mix"]
    assert [r["time_step"] for r in mixed] == [1, 2]
    for row in mixed:
        samples = read(samples_path(run_dir, row["time_step"]))
        assert len(samples) == 6 and row["samples"] == 6 and row["source"] == "generated"
        assert row["samples_reused"] is False and row["mix_rows"] >= 1 and row["mix_tokens"] > 0
        meta = json.loads((run_dir / "generated" / f"step_{row['time_step']}.json").read_text())
        assert meta["from_checkpoint"] == row["time_step"] - 1 and meta["new_tokens"] == row["generated_tokens"]
        assert row["generation_flops"] == pytest.approx(2 * meta["positions"] * reference.model.num_parameters())
        assert all(s["new_tokens"] <= 12 for s in samples)
        at = [
            r
            for r in read(run_dir / "metrics.jsonl")
            if r.get("checkpoint") == row["time_step"] and "train_tokens" in r
        ]
        assert at and {(r["mix_source"], r["mix_tokens"], r["generation_flops"]) for r in at} == {
            ("generated", row["mix_tokens"], row["generation_flops"])
        }
        assert all(r["generation_seconds"] == row["generation_seconds"] for r in at)


def test_the_samples_are_the_previous_checkpoint_s_seeded_draw(reference):
    # what a resumed run regenerates when it was killed before a step's samples were written: the saved
    # checkpoint k-1 with the same seed draws the same samples the uninterrupted run drew from the model in memory
    gen = reference.cfg.method.generative
    for step in (1, 2):
        model, text_format = checkpoint(reference, step - 1)
        samples, meta = generate_samples(
            model, text_format, gen, reference.timeline.steps[0], generation_seed(reference.cfg.seed, step)
        )
        assert samples == read(samples_path(reference.run_dir, step))
    other, _ = generate_samples(model, text_format, gen, reference.timeline.steps[0], generation_seed(1, 2))
    assert other != samples  # another seed, another draw


def test_sampler_initial_samples_the_model_before_step_0_and_leaves_the_training_rng_alone(tmp_path):
    """``method.generative.sampler=initial``: every later step's samples are the initial model's seeded draw
    (rebuilt for it), and the run trains exactly as one that read those samples back (the RNG is restored)."""
    from evolve_train.run import ContinualRun

    overrides = ("eval.evaluators=[splits]", *GEN, "method.generative.sampler=initial")
    run = ContinualRun(tiny_cfg(tmp_path / "initial", *overrides))
    run.run()
    initial, text_format, gen = run.initial_weights(), run.text_format, run.cfg.method.generative
    for step in (1, 2):
        meta = json.loads((run.run_dir / "generated" / f"step_{step}.json").read_text())
        assert meta["from_checkpoint"] == -1
        seed = generation_seed(run.cfg.seed, step)
        samples, _ = generate_samples(initial, text_format, gen, run.timeline.steps[0], seed)
        assert samples == read(samples_path(run.run_dir, step))
        trained, _ = generate_samples(checkpoint(run, step - 1)[0], text_format, gen, run.timeline.steps[0], seed)
        assert trained != samples  # not the previous checkpoint's draw
    again = tmp_path / "again"  # the samples already on disk: nothing rebuilt or seeded, the same training
    (again / "generated").mkdir(parents=True)
    for path in (run.run_dir / "generated").iterdir():
        (again / "generated" / path.name).write_bytes(path.read_bytes())
    ContinualRun(tiny_cfg(again, *overrides)).run()

    def losses(path):
        return [(r["time_step"], r["optimizer_step"], r["loss"]) for r in read(path / "train_log.jsonl") if "loss" in r]

    assert losses(run.run_dir) == losses(again)


def test_a_step_trained_again_reuses_its_samples(reference, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("sampled again")

    monkeypatch.setattr(generative, "generate_samples", refuse)
    model, text_format = checkpoint(reference, 2)  # another model: the file decides, not the weights
    stub = SimpleNamespace(
        run_dir=reference.run_dir,
        main=True,
        accelerator=SimpleNamespace(wait_for_everyone=lambda: None),
        model=model,
        text_format=text_format,
        cfg=reference.cfg,
        timeline=reference.timeline,
    )
    strategy = GenerativeReplay(reference.cfg.method)
    strategy.bind(stub)
    samples, meta = strategy.samples(stub, 1)
    assert samples == read(samples_path(reference.run_dir, 1)) and meta["reused"] is True


def test_corpus_prompts_start_from_step0_text(reference):
    model, text_format = checkpoint(reference, 0)
    gen = GenerativeConfig(samples=4, max_new_tokens=5, prompt="corpus", prompt_tokens=3)
    samples, meta = generate_samples(model, text_format, gen, reference.timeline.steps[0], 11)
    assert meta["prompt"] == "corpus" and meta["prompt_tokens"] == 3
    for sample in samples:
        assert sample["prompt"] and sample["text"].startswith(sample["prompt"].strip())


def command(run_dir: Path) -> list[str]:
    extra = [*TINY, "eval.evaluators=[splits]", *GEN, "trainer.save_every_n_steps=4"]
    return [sys.executable, "train.py", *extra, f"hydra.run.dir={run_dir}"]


def train(run_dir: Path, fault: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_MODE": "disabled", "PYTHONUNBUFFERED": "1"}
    env.pop("EVOLVE_TRAIN_FAULT", None)
    if fault:
        env["EVOLVE_TRAIN_FAULT"] = fault
    return forked.python(command(run_dir), env=env, timeout=600)


def results(run_dir: Path) -> tuple[list, list]:
    """Metric rows and training-log rows without wall-clock figures (and whether the samples were read back)."""

    def plain(rows):
        return [{k: v for k, v in r.items() if not wall_clock(k) and k != "samples_reused"} for r in rows]

    metrics = [r for r in read(run_dir / "metrics.jsonl") if r.get("group") != "timing"]
    return plain(metrics), plain(read(run_dir / "train_log.jsonl"))


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("uninterrupted") / "run"
    done = train(run_dir)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return run_dir


@pytest.mark.slow
@pytest.mark.parametrize(
    "fault, reused",
    [
        ("optimizer_step:27", True),  # mid step 1: its samples were written, the rerun reads them back
        ("checkpoint_write:1", False),  # writing steps/0: step 1's samples never made, the rerun samples them
    ],
)
def test_killed_and_resumed_the_samples_and_results_are_the_uninterrupted_run_s(uninterrupted, tmp_path, fault, reused):
    run_dir = tmp_path / "run"
    killed = train(run_dir, fault)
    assert killed.returncode == -signal.SIGKILL, killed.stdout[-3000:] + killed.stderr[-3000:]
    assert samples_path(run_dir, 1).exists() == reused
    again = train(run_dir)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    for step in (1, 2):
        assert samples_path(run_dir, step).read_bytes() == samples_path(uninterrupted, step).read_bytes()
    assert results(run_dir) == results(uninterrupted)
    step1 = next(r for r in read(run_dir / "train_log.jsonl") if r.get("group") == "mix" and r["time_step"] == 1)
    assert step1["samples_reused"] is reused
    from safetensors.torch import load_file

    for step in (0, 1, 2):
        got = load_file(str(run_dir / "steps" / str(step) / "model.safetensors"))
        want = load_file(str(uninterrupted / "steps" / str(step) / "model.safetensors"))
        assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
