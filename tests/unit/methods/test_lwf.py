"""``lwf``: distillation toward the previous step's model on the current batch (methods/lwf.py)."""

from __future__ import annotations


import pytest
import torch
from helpers.methods import PAD, method, one_thread, tiny_gpt2, token_rows

from evolve_train.methods.lwf import distillation
from evolve_train.training.examples import collate


def batch_of(rows, n: int = 8) -> dict:
    batch = collate([rows[i] for i in range(n)], PAD)
    batch["labels"][:, :3] = -100  # only some tokens are loss tokens, as for masked-entity pairs
    return batch


def test_the_loss_is_exactly_the_task_loss_when_the_student_is_the_teacher():
    with one_thread():
        model = tiny_gpt2()
        m = method("full", "lwf", lwf={"weight": 3.0, "temperature": 2.0})
        model = m.prepare_model(model, step=1)  # the teacher: a frozen copy of the model entering step 1
        model.eval()  # the teacher's mode: the student's forward is then the teacher's computation, run again
        batch = batch_of(token_rows(8, 2, 64, seed=1))
        outputs = model(**batch, use_cache=False)
        extra = m.extra_loss(model, 0, batch=batch, outputs=outputs)
    assert extra is not None and extra.item() == 0.0
    assert torch.equal(outputs.loss + extra, outputs.loss)


def test_in_training_mode_the_term_is_zero_up_to_rounding_and_grows_as_the_student_moves():
    with one_thread():
        model = tiny_gpt2()
        m = method("full", "lwf")
        model = m.prepare_model(model, step=1)
        model.train()  # dropout 0: the same function as the teacher's eval mode
        batch = batch_of(token_rows(8, 2, 64, seed=1))
        assert m.extra_loss(model, 0, batch=batch, outputs=model(**batch, use_cache=False)).item() < 1e-6
        with torch.no_grad():
            model.transformer.h[0].mlp.c_fc.weight.add_(0.05 * torch.randn_like(model.transformer.h[0].mlp.c_fc.weight))
        assert m.extra_loss(model, 0, batch=batch, outputs=model(**batch, use_cache=False)).item() > 1e-4


def test_gradient_flows_only_into_the_student():
    with one_thread():
        model = tiny_gpt2()
        m = method("full", "lwf", lwf={"weight": 1.0})
        model = m.prepare_model(model, step=1)
        teacher = m.strategies[1].teacher
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.01 * torch.randn_like(p))
        batch = batch_of(token_rows(8, 2, 64, seed=2))
        outputs = model(**batch, use_cache=False)
        term = m.extra_loss(model, 0, batch=batch, outputs=outputs)
        term.backward()
    assert term.item() > 0
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    assert all(not p.requires_grad and p.grad is None for p in teacher.parameters())
    assert not teacher.training


def test_distillation_counts_only_the_loss_tokens_and_shifts_like_the_lm_loss():
    torch.manual_seed(0)
    student, teacher = torch.randn(2, 5, 7), torch.randn(2, 5, 7)
    labels = torch.full((2, 5), -100)
    labels[0, 3], labels[1, 1] = 4, 2  # predicted from positions 2 and 0
    expected = (
        torch.stack(
            [
                torch.nn.functional.kl_div(
                    torch.log_softmax(student[i, j] / 2, -1),
                    torch.log_softmax(teacher[i, j] / 2, -1),
                    log_target=True,
                    reduction="sum",
                )
                for i, j in ((0, 2), (1, 0))
            ]
        ).mean()
        * 4
    )
    assert distillation(student, teacher, labels, temperature=2.0).item() == pytest.approx(expected.item(), rel=1e-6)
    changed = student.clone()
    changed[0, 4] += 5.0  # a position whose prediction is not a loss token
    assert distillation(changed, teacher, labels, 2.0).item() == pytest.approx(expected.item(), rel=1e-6)
    argmax = distillation(student, teacher, labels, targets="argmax")
    manual = torch.nn.functional.cross_entropy(student[[0, 1], [2, 0]], teacher[[0, 1], [2, 0]].argmax(-1))
    assert argmax.item() == pytest.approx(manual.item(), rel=1e-6)
