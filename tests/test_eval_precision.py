"""``eval.precision``: evaluation runs in its own precision (default fp32), not the one training used, and every
metric row says which (``eval_precision``)."""

from __future__ import annotations

import pytest
import torch

from evolve_train.evaluation import checkpoints
from evolve_train.evaluation.precision import eval_autocast
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


def test_train_follows_the_trainings_autocast():
    from accelerate import Accelerator

    model = torch.nn.Linear(2, 2)
    accelerator = Accelerator(cpu=True, mixed_precision="no")
    context, used = eval_autocast("train", accelerator, model)
    assert used == "fp32"
    with context:
        assert not torch.is_autocast_enabled("cpu")


def test_weights_stored_in_bf16_record_bf16_without_autocast():
    model = torch.nn.Linear(2, 2).to(torch.bfloat16)
    _, used = eval_autocast("fp32", None, model)
    assert used == "bf16"


def test_an_unknown_precision_is_refused(tmp_path):
    from omegaconf import OmegaConf

    with pytest.raises(Exception, match="eval.precision"):
        OmegaConf.to_object(tiny_cfg(tmp_path, "eval.precision=fp8"))


def tiny_lm():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50, n_positions=32)).eval()


def test_a_bf16_copy_is_the_model_cast_to_bf16_and_leaves_the_weights_untouched():
    import copy

    from evolve_train.evaluation.precision import evaluated_weights

    model = tiny_lm()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    objects = [id(p) for p in model.parameters()]
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    expected = copy.deepcopy(model).to(torch.bfloat16)(ids).logits  # the same computation
    with evaluated_weights("bf16_copy", model) as evaluated:
        assert evaluated is not model
        assert {p.dtype for p in evaluated.parameters()} == {torch.bfloat16}
        assert evaluated.transformer.wte.weight is evaluated.lm_head.weight  # tied weights stay tied
        context, used = eval_autocast("bf16_copy", None, evaluated)
        with context:
            assert not torch.is_autocast_enabled("cpu")
            assert torch.equal(evaluated(ids).logits, expected)
    assert used == "bf16_copy"
    assert [id(p) for p in model.parameters()] == objects
    assert all(torch.equal(p, before[name]) and p.dtype == torch.float32 for name, p in model.named_parameters())
    with evaluated_weights("fp32", model) as evaluated:
        assert evaluated is model


def test_a_run_evaluated_on_a_bf16_copy_says_so_and_trains_as_in_fp32(tmp_path, monkeypatch):
    rows, seen = watched_run(tmp_path / "copy", monkeypatch, "trainer.mixed_precision=no", "eval.precision=bf16_copy")
    assert {r["eval_precision"] for r in rows} == {"bf16_copy"} and not any(enabled for enabled, _ in seen)
    from helpers import losses

    train(tiny_cfg(tmp_path / "fp32" / "run", *FAST, "trainer.mixed_precision=no"))
    assert losses(tmp_path / "copy" / "run") == losses(tmp_path / "fp32" / "run")  # evaluation changed no weight
