"""Freeze parts of the model: the embeddings and/or the lowest N transformer blocks.

Frozen parameters get ``requires_grad=False`` before the step, so they never reach the optimizer
(no update, no weight decay): they stay bitwise unchanged. GPT-2 ties its output head to the token
embedding, so freezing the embeddings freezes the head too.
"""

from __future__ import annotations

import logging

import torch

from evolve_train.errors import ConfigError
from evolve_train.methods.base import Strategy, register_strategy

log = logging.getLogger(__name__)
BLOCK_LIST_NAMES = ("h", "layers", "layer", "block", "blocks")
POSITION_EMBEDDING_NAMES = ("wpe", "embed_positions", "position_embeddings")


def block_lists(model: torch.nn.Module) -> list[tuple[str, torch.nn.ModuleList]]:
    """The stacks of transformer blocks (one for decoders, encoder and decoder for T5)."""
    return [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.ModuleList) and len(module) > 0 and name.rsplit(".", 1)[-1] in BLOCK_LIST_NAMES
    ]


def embedding_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    found = [model.get_input_embeddings()] if hasattr(model, "get_input_embeddings") else []
    found += [
        m
        for name, m in model.named_modules()
        if isinstance(m, torch.nn.Embedding) and name.rsplit(".", 1)[-1] in POSITION_EMBEDDING_NAMES
    ]
    return [m for m in found if m is not None]


@register_strategy("freeze")
class Freeze(Strategy):
    def __init__(self, cfg):
        super().__init__(cfg)
        c = cfg.freeze  # lower_blocks >= 0: checked by the schema (config.py: FreezeConfig)
        if not c.embeddings and c.lower_blocks == 0:
            raise ConfigError(
                "method.freeze: nothing to freeze; set method.freeze.embeddings=true "
                "and/or method.freeze.lower_blocks=N"
            )

    def frozen_modules(self, model) -> list[torch.nn.Module]:
        c = self.cfg.freeze
        modules = embedding_modules(model) if c.embeddings else []
        if c.lower_blocks:
            stacks = block_lists(model)
            if not stacks:
                raise ConfigError("method.freeze.lower_blocks: no transformer block list found in the model")
            for name, stack in stacks:
                if c.lower_blocks > len(stack):
                    raise ConfigError(
                        f"method.freeze.lower_blocks={c.lower_blocks} but {name} has only {len(stack)} blocks"
                    )
                modules += list(stack[: c.lower_blocks])
        return modules

    def prepare_model(self, model, step):
        frozen = {id(p): p for m in self.frozen_modules(model) for p in m.parameters()}
        for param in frozen.values():
            param.requires_grad_(False)
        n_frozen = sum(p.numel() for p in frozen.values())
        total = sum(p.numel() for p in model.parameters())
        log.info("freeze (step %d): %d of %d parameters frozen (%.1f%%)", step, n_frozen, total, 100 * n_frozen / total)
        return model
