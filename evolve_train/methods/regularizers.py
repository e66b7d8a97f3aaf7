"""Quadratic pulls toward the previous time step's weights: ``l2_init`` (RecAdam-style) and ``ewc``.

Both snapshot, in ``prepare_model``, every parameter that is trainable at that moment: the model
entering step k holds step k-1's weights, in a continuing run and in a resumed one alike, so nothing
needs saving. The penalty covers ALL trainable parameters — selected by ``requires_grad``, never by
a name filter (a name filter that matches nothing silently turns the method into plain fine-tuning;
the tests assert the penalty is non-zero after a step).

    penalty = weight(t) / 2 * sum_i F_i * (w_i - w_prev_i)^2

``l2_init``: F_i = 1. ``ewc``: F_i is the diagonal empirical Fisher (squared gradients of the loss)
on the previous step's data, averaged over ``fisher_batches`` batches and normalised to mean 1, so
``coef`` is on the same scale for both. With ``anneal_t0 > 0``, weight(t) = coef * (1 - s(t)) with
s(t) = 1 / (1 + exp(-anneal_k * (t - anneal_t0))), RecAdam's annealing applied to the penalty term
(RecAdam also scales the task loss by s(t); here the language-model loss keeps weight 1).

Memory (docs/methods.md, "Memory of l2_init and ewc"): anchors and the Fisher are kept in
``method.<l2_init|ewc>.anchor_dtype`` (``float32``, or ``bfloat16`` for half the bytes). The penalty is one
small autograd node per parameter (:class:`AnchorTerm`) that saves nothing: its forward computes the
parameter's term with one parameter-sized temporary at a time, its backward the gradient
``2 F (w - w_prev)`` the same way, so no full-model temporary lives between forward and backward.

Anchors are kept by parameter name. Under FSDP2 the run snapshots them from the plain model, then
``accelerator.prepare`` replaces every parameter by a sharded one (a DTensor); the first penalty of the step
finds the model's current parameters by name and shards each anchor (and Fisher) the same way, from the
full copy every process holds, without communication (``distribute_tensor(..., src_data_rank=None)``); the
full copies are dropped, so from then on each process keeps only its shard, like the parameters. (Anchors
taken from parameters that are DTensors already, ``p.detach().to(dtype, copy=True)``, keep their placement.)
"""

from __future__ import annotations

import logging
import math
import random
from typing import Optional

import torch

from evolve_train.methods.base import Strategy, register_strategy

log = logging.getLogger(__name__)


class AnchorPenalty(Strategy):
    """Shared mechanics; subclasses choose the config section and the per-parameter importance."""

    section = "l2_init"

    def __init__(self, cfg):
        super().__init__(cfg)
        self.c = getattr(cfg, self.section)  # ranges: checked by the schema (config.py: L2InitConfig, EwcConfig)
        self.anchors: list[tuple[str, torch.nn.Parameter, torch.Tensor, Optional[torch.Tensor]]] = []
        """(name, parameter, anchor, Fisher or None) of every anchored parameter."""
        self._followed = False

    def importance(self, model, params: list[tuple[str, torch.nn.Parameter]]) -> Optional[list[torch.Tensor]]:
        """Per-parameter weights F (``None``: all ones)."""
        return None

    def prepare_model(self, model, step):
        params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        weights = self.importance(model, params) or [None] * len(params)
        dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[str(self.c.anchor_dtype)]
        self.anchors = [
            (n, p, p.detach().to(dtype, copy=True), None if w is None else w.to(dtype))
            for (n, p), w in zip(params, weights)
        ]
        self._followed = False
        log.info(
            "%s (step %d): anchored %d tensors (%d values, %s) at the previous step's weights, coef %g",
            self.name,
            step,
            len(params),
            sum(p.numel() for _, p in params),
            dtype,
            self.c.coef,
        )
        return model

    def weight(self, optimizer_step: int) -> float:
        if self.c.anneal_t0 <= 0:
            return self.c.coef
        z = -self.c.anneal_k * (optimizer_step - self.c.anneal_t0)
        return self.c.coef * (1.0 - 1.0 / (1.0 + math.exp(min(z, 700.0))))

    def penalty(self) -> torch.Tensor:
        """sum_i F_i * (w_i - w_prev_i)^2 over every anchored (trainable) parameter, unweighted."""
        terms = [
            AnchorTerm.apply(param, anchor, fisher) for _, param, anchor, fisher in self.anchors if param.requires_grad
        ]
        return torch.stack(terms).sum() if terms else torch.zeros(())

    def extra_loss(self, model, optimizer_step):
        if not self.anchors or self.c.coef == 0:
            return None
        if not self._followed:  # the first penalty of the step: after prepare (which may shard the model)
            self.follow(model)
        return 0.5 * self.weight(optimizer_step) * self.penalty()

    def follow(self, model) -> None:
        """Point the anchors at ``model``'s current parameters (by name), shaped like them: under FSDP2 the
        parameters prepared for training are sharded DTensors, and so become the anchors and the Fisher."""
        current = dict(model.named_parameters())
        followed = []
        for name, param, anchor, fisher in self.anchors:
            now = current.get(name)
            if now is None:
                raise RuntimeError(f"{self.name}: the anchored parameter '{name}' is not in the model being trained")
            if now is not param:
                anchor, fisher = _shaped_like(now, anchor), _shaped_like(now, fisher)
            followed.append((name, now, anchor, fisher))
        self.anchors, self._followed = followed, True

    def after_step(self, model, step, examples):
        self.anchors = []  # the anchors hold a copy of the weights: free it
        return model


class AnchorTerm(torch.autograd.Function):
    """``sum(F * (w - a)^2)`` of one parameter (``F=None``: ones) that saves no activation: forward and
    backward each hold one parameter-sized temporary at a time (anchors may be bf16: promoted per element)."""

    @staticmethod
    def forward(ctx, param, anchor, fisher):
        ctx.anchor, ctx.fisher = anchor, fisher
        ctx.save_for_backward(param)
        with torch.no_grad():
            diff = torch.sub(param, anchor)
            term = diff.square_() if fisher is None else diff.square_().mul_(fisher)
            total = term.sum(dtype=torch.float32)
        return _full(total)

    @staticmethod
    def backward(ctx, grad_output):
        (param,) = ctx.saved_tensors
        grad = torch.sub(param, ctx.anchor).mul_(2 * grad_output.to(param.dtype))
        if ctx.fisher is not None:
            grad.mul_(ctx.fisher)
        return grad, None, None


def _shaped_like(param: torch.Tensor, value: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """``value`` (a full tensor, the same on every process) placed like ``param``: this process's shard of it
    when ``param`` is a DTensor (no communication), else on ``param``'s device."""
    if value is None:
        return None
    from torch.distributed.tensor import DTensor, distribute_tensor

    if isinstance(param, DTensor) and not isinstance(value, DTensor):
        return distribute_tensor(value.to(param.device), param.device_mesh, param.placements, src_data_rank=None)
    return value.to(param.device)


def _full(value: torch.Tensor) -> torch.Tensor:
    """A sharded (DTensor) sum as an ordinary tensor (the sum over all shards)."""
    return value.full_tensor() if hasattr(value, "full_tensor") else value


@register_strategy("l2_init")
class L2Init(AnchorPenalty):
    section = "l2_init"


@register_strategy("ewc")
class EWC(AnchorPenalty):
    section = "ewc"

    def __init__(self, cfg):
        super().__init__(cfg)
        self._history = None

    def mix_examples(self, step, examples, history):
        self._history = history  # prepare_model (called next) estimates the Fisher on history[-1]
        return examples

    def importance(self, model, params):
        if self._history is None or len(self._history) == 0:
            raise RuntimeError(
                "ewc needs the previous step's examples: mix_examples must run before "
                "prepare_model (as in run.py), and not at step 0"
            )
        history = self._history
        return diagonal_fisher(
            model,
            [p for _, p in params],
            history[-1],
            history.pad_id,
            self.c.fisher_batches,
            self.c.fisher_batch_size,
            attention_reset=history.attention_reset,
        )


def diagonal_fisher(
    model, params, examples, pad_id: int, n_batches: int, batch_size: int, seed: int = 0, attention_reset: bool = False
) -> list[torch.Tensor]:
    """Empirical diagonal Fisher: mean over batches of squared loss gradients, normalised to mean 1. Batches
    are collated and fed to the model as the training loop does (packed ``clm`` rows under
    ``attention_reset``: per-document positions, block-diagonal attention)."""
    from evolve_train.training.compact_rows import decode_row
    from evolve_train.training.examples import collate

    order = list(range(len(examples)))
    random.Random(seed).shuffle(order)
    device = params[0].device
    fisher = [torch.zeros_like(p) for p in params]
    was_training = model.training
    model.eval()
    used = 0
    for start in range(0, min(len(order), n_batches * batch_size), batch_size):
        rows = [decode_row(examples[i]) for i in order[start : start + batch_size]]
        batch = {k: v.to(device) for k, v in collate(rows, pad_id, attention_reset).items()}
        grads = torch.autograd.grad(model(**batch, use_cache=False).loss, params, allow_unused=True)
        for f, g in zip(fisher, grads):
            if g is not None:
                f += g.detach().pow(2)
        used += 1
    model.train(was_training)
    total = sum(f.sum() for f in fisher)
    count = sum(f.numel() for f in fisher)
    mean = float(total) / max(1, count)
    if used == 0 or mean == 0:
        log.warning("ewc: the Fisher estimate is zero; falling back to a uniform penalty (l2_init)")
        return [torch.ones_like(f) for f in fisher]
    log.info("ewc: diagonal Fisher from %d batches of the previous step", used)
    return [f / mean for f in fisher]
