"""Gradient accumulation in the loop equals a hand-written accumulation loop over the same micro-batches."""

import torch
from accelerate import Accelerator
from helpers.methods import PAD, method, one_thread, tiny_gpt2, token_rows, trainer_cfg

from evolve_train.training.examples import LengthGroupedBatches, as_array_rows, collate
from evolve_train.training.loop import lr_lambda, train_time_step
from evolve_train.training.plan import StepPlan


def reference(model, examples, cfg, seed: int, epochs: int):
    """Plain PyTorch: each micro-batch's loss / grad_accum backward, then clip, AdamW, schedule, zero."""
    rows = as_array_rows(examples)
    batches = LengthGroupedBatches([len(r["input_ids"]) for r in rows], cfg.batch_size, seed)
    micro = [b for e in range(epochs) for b in batches.epoch(e)]
    total = len(micro) // cfg.grad_accum
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(cfg.warmup_steps, total, cfg.min_lr_ratio))
    for index, batch in enumerate(micro):
        (model(**collate([rows[i] for i in batch], PAD)).loss / cfg.grad_accum).backward()
        if (index + 1) % cfg.grad_accum == 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad(set_to_none=True)
    return total


def test_grad_accum_steps_once_per_window_like_a_plain_accumulation_loop():
    examples = token_rows(64, 2, 64, seed=3)
    cfg = trainer_cfg(batch_size=8, grad_accum=2)
    with one_thread():
        ours = tiny_gpt2()
        result = train_time_step(
            StepPlan(
                step=1,
                trainer=cfg,
                examples=examples,
                epochs=2,
                strategies=method("full"),
                collate=lambda rows: collate(rows, PAD),
                seed=5,
            ),
            ours,
            Accelerator(cpu=True, gradient_accumulation_steps=2),
        )
        theirs = tiny_gpt2()
        planned = reference(theirs, examples, cfg, seed=5, epochs=2)
    assert result.optimizer_steps == planned == 8  # 2 epochs x 8 micro-batches / 2
    for (name, a), b in zip(ours.named_parameters(), theirs.parameters()):
        assert torch.allclose(a, b, atol=1e-6), name
    assert not torch.equal(ours.transformer.wte.weight, tiny_gpt2().transformer.wte.weight)  # it trained
