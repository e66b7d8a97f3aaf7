"""``eval.precision``: evaluation runs in its own precision (default fp32), not the one training used, and every
metric row says which (``eval_precision``)."""

from __future__ import annotations

import torch

from evolve_train.evaluation import checkpoints
from evolve_train.run import train
from evolve_train.tracking.disk import read_jsonl
from helpers import tiny_cfg


FAST = ("eval.evaluators=[splits]", "data.world.n_steps=2", "method.step0_cache=null")


def watched_run(tmp_path, monkeypatch, *overrides) -> tuple[list[dict], list[tuple[bool, torch.dtype]]]:
    """The rows of a tiny run and, per evaluation, whether autocast was on and its dtype."""
    seen = []
    original = checkpoints.evaluate_checkpoint

    def watch(ctx):
        seen.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")))
        return original(ctx)

    monkeypatch.setattr(checkpoints, "evaluate_checkpoint", watch)
    train(tiny_cfg(tmp_path / "run", *FAST, *overrides))
    return read_jsonl(tmp_path / "run" / "metrics.jsonl"), seen


def test_a_bf16_trained_run_is_evaluated_in_fp32_by_default(tmp_path, monkeypatch):
    rows, seen = watched_run(tmp_path, monkeypatch, "trainer.mixed_precision=bf16")
    assert rows and {r["mixed_precision"] for r in rows} == {"bf16"}  # trained in bf16
    assert {r["eval_precision"] for r in rows} == {"fp32"}
    assert seen and not any(enabled for enabled, _ in seen)


def test_evaluation_follows_evals_setting_not_trainings(tmp_path, monkeypatch):
    rows, seen = watched_run(tmp_path, monkeypatch, "trainer.mixed_precision=no", "eval.precision=bf16")
    assert {r["mixed_precision"] for r in rows} == {"no"} and {r["eval_precision"] for r in rows} == {"bf16"}
    assert seen and all(enabled and dtype == torch.bfloat16 for enabled, dtype in seen)


def test_a_run_evaluated_on_a_bf16_copy_says_so_and_trains_as_in_fp32(tmp_path, monkeypatch):
    rows, seen = watched_run(tmp_path / "copy", monkeypatch, "trainer.mixed_precision=no", "eval.precision=bf16_copy")
    assert {r["eval_precision"] for r in rows} == {"bf16_copy"} and not any(enabled for enabled, _ in seen)
    from helpers import losses

    train(tiny_cfg(tmp_path / "fp32" / "run", *FAST, "trainer.mixed_precision=no"))
    assert losses(tmp_path / "copy" / "run") == losses(tmp_path / "fp32" / "run")  # evaluation changed no weight
