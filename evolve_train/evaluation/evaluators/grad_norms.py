"""``grad_norms``: per-example gradient norms of the answer loss per split (the Carpe Diem analysis).

Outdated facts are hypothesised to persist because the loss on them yields small gradients. For each
split set of the checkpoint (Unchanged, New_k, Updated_k with the new answer, Outdated_k with the old one),
a seeded sample of at most ``eval.grad_norm_items`` items is scored one at a time: the training loss of
the gold answer given the prompt (``TextFormat.encode_example``: the answer and an EOS after the prompt,
as training formats a masked-entity pair; the loss on the answer and EOS), backward, and
the L2 norm of the gradient over the trainable parameters (all parameters when none is trainable).
Rows: ``mean_grad_norm``, ``median_grad_norm``, ``mean_loss``, ``n`` per set. Gradients are cleared after.
Enabled by listing it in ``eval.evaluators`` (``eval=full`` does); ``eval.grad_norms=true``, the former
second switch, is refused by the config with a ConfigError saying so.
"""

from __future__ import annotations

import statistics

import torch

from evolve_train.evaluation.context import EvalContext
from evolve_train.evaluation.evaluators.common import mean, row, sample, split_sets
from evolve_train.evaluation.registry import register_evaluator


def _example(ctx: EvalContext, prompt: str, answer: str, device) -> dict:
    """The gold answer as one training example, formatted by the model's text format."""
    example = ctx.text_format.encode_example(prompt, answer)
    return {key: torch.tensor([ids], device=device) for key, ids in example.items()}


def example_grad_norms(ctx: EvalContext, prompts: list[str], answers: list[str]) -> tuple[list[float], list[float]]:
    """(gradient L2 norms, losses), one per (prompt, answer), each from its own backward pass."""
    model = ctx.model
    params = [p for p in model.parameters() if p.requires_grad]
    frozen = not params
    if frozen:
        params = list(model.parameters())
        for p in params:
            p.requires_grad_(True)
    device = params[0].device
    was_training = model.training
    model.eval()
    norms, losses = [], []
    try:
        for prompt, answer in zip(prompts, answers):
            model.zero_grad(set_to_none=True)
            loss = model(**_example(ctx, prompt, answer, device)).loss
            loss.backward()
            squared = sum(p.grad.float().pow(2).sum() for p in params if p.grad is not None)
            norms.append(float(torch.as_tensor(squared).sqrt()))
            losses.append(float(loss.detach()))
    finally:
        model.zero_grad(set_to_none=True)
        if frozen:
            for p in params:
                p.requires_grad_(False)
        model.train(was_training)
    return norms, losses


@register_evaluator("grad_norms")
def grad_norms_evaluator(ctx: EvalContext) -> list[dict]:
    """Rows of group ``grad_norms``, one per split set."""
    cap = getattr(ctx.cfg, "grad_norm_items", 64)
    rows = []
    for eval_set in split_sets(ctx):
        items = sample(eval_set.items, cap, f"grad-{eval_set.name}")
        norms, losses = example_grad_norms(
            ctx, [ctx.timeline.prompt(i) for i in items], [i["answers"][0] for i in items]
        )
        rows.append(
            row(
                ctx,
                "grad_norms",
                eval_set.kind,
                eval_set.name,
                eval_set.step,
                n=len(items),
                mean_grad_norm=mean(norms),
                median_grad_norm=statistics.median(norms) if norms else None,
                mean_loss=mean(losses),
            )
        )
    return rows
