"""``eval.precision``: evaluation runs in its own precision (default fp32), not the one training used, and every
metric row says which (``eval_precision``)."""

from __future__ import annotations

import pytest
import torch

from evolve_train.evaluation.precision import eval_autocast
from helpers import tiny_cfg


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
