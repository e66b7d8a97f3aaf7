"""``trainer.compile``: ``torch.compile`` per transformer block (docs/training.md, "Compile and activation
checkpointing").

The order is torchtitan's (``parallelize_llama``: activation checkpointing, then compile per block, then
``fully_shard``): activation checkpointing per block is set when the model is built (``model.gradient_checkpointing``,
transformers' ``activation_checkpointing_enable``: models/build.py), :func:`compile_blocks` then compiles each block
before ``accelerator.prepare``, which under an FSDP2 launch shards each block with ``fully_shard``. At run time
they nest as in torchtitan, ``fully_shard(compile(checkpoint(block)))``: FSDP2's hooks (all-gather before a block,
reshard after it) run eagerly around the compiled forward, outside its graph, and the compiled forward holds
transformers' checkpoint of the block's forward, so the recompute is traced into the compiled backward.

Each block keeps its class, its place and its parameter names: only its ``forward`` is replaced (an instance
attribute; the class's forward is looked up at call time, so FSDP2's subclass swap and transformers' checkpoint
wrapper still apply). accelerate still finds the blocks by class name (``_no_split_modules``), state dicts and
checkpoints are unchanged, and :func:`uncompile_blocks` gives the model back its plain forward at the end of the
time step (evaluation runs uncompiled). Every block, in every time step of the process, goes through one compiled
function: blocks of one class share its graph (their parameters are graph inputs) instead of compiling per block.
"""

from __future__ import annotations

import functools
import logging

import torch

log = logging.getLogger(__name__)


def decoder_blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's transformer blocks: the outermost modules whose class is one of its ``_no_split_modules``
    (transformers' list of the classes never split across devices: the decoder layers, which accelerate's
    TRANSFORMER_BASED_WRAP shards one by one too). A PEFT model answers for its base model. Empty when the
    model names none."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    blocks, prefixes = [], []
    for name, module in model.named_modules():
        if type(module).__name__ in names and not any(name.startswith(p) for p in prefixes):
            blocks.append(module)
            prefixes.append(name + ".")
    return blocks


def _block_forward(block: torch.nn.Module, *args, **kwargs):
    """The block's own forward, looked up on its class when called: transformers' checkpointing wrapper, and
    after ``fully_shard`` the FSDP subclass's (whose wrapper is the one that checkpoints)."""
    return type(block).forward(block, *args, **kwargs)


@functools.lru_cache(maxsize=None)
def compiled_block_forward(backend: str = "inductor", fullgraph: bool = False):
    """One compiled :func:`_block_forward` per process and backend: a new ``torch.compile`` each time step would
    compile again each time step and count against dynamo's recompile limit. ``fullgraph=False``: a graph break
    in a model's block costs speed, where torchtitan's ``fullgraph=True`` would stop the run."""
    return torch.compile(_block_forward, backend=backend, fullgraph=fullgraph)


def is_compiled_forward(forward) -> bool:
    return isinstance(forward, functools.partial) and getattr(forward.func, "__wrapped__", None) is _block_forward


def compile_blocks(model: torch.nn.Module, backend: str = "inductor") -> int:
    """Replace the forward of each of ``model``'s :func:`decoder_blocks` by the compiled one, in place; the
    number of blocks compiled (0: none found, nothing changed)."""
    blocks = decoder_blocks(model)
    # dynamo traces transformers' checkpoint as one region, refusing any side effect inside it that the backward's
    # recompute would not replay; the hub-kernels layer wrapper (``kernels``) sets and resets a context variable
    # around each attention forward, which would turn every checkpointed block back to eager. Nothing of it needs
    # replaying: the recompute sets and resets it again. (An older torch without the setting keeps its default.)
    if hasattr(torch._dynamo.config, "skip_fwd_side_effects_in_bwd_under_checkpoint"):
        torch._dynamo.config.skip_fwd_side_effects_in_bwd_under_checkpoint = True
    compiled = compiled_block_forward(backend)
    for block in blocks:
        block.forward = functools.partial(compiled, block)
    if blocks:
        log.info(
            "trainer.compile: torch.compile per transformer block (%d x %s, backend %s)",
            len(blocks),
            type(blocks[0]).__name__,
            backend,
        )
    return len(blocks)


def uncompile_blocks(model: torch.nn.Module) -> int:
    """Remove what :func:`compile_blocks` set: each block calls its class's forward again. The number restored;
    when any, the log says what dynamo compiled so far (:func:`compile_counts`)."""
    restored = 0
    for module in model.modules():
        if is_compiled_forward(module.__dict__.get("forward")):
            del module.__dict__["forward"]
            restored += 1
    if restored:
        graphs, breaks = compile_counts()
        log.info("trainer.compile: %d graph(s) compiled in this process so far, %d graph break(s)", graphs, breaks)
    return restored


def compile_counts() -> tuple[int, int]:
    """(graphs dynamo compiled in this process, graph breaks it met): one graph per block class and shape regime
    (a first static one, then one with dynamic sequence lengths); every graph break is a part run eagerly."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"]), int(sum(counters["graph_break"].values()))


def compile_model(model: torch.nn.Module, backend: str = "inductor") -> torch.nn.Module:
    """``trainer.compile``: per block where the model has blocks (:func:`compile_blocks`, in place: ``model``
    itself is returned), else the whole model wrapped in ``torch.compile`` (said in the log)."""
    if compile_blocks(model, backend):
        return model
    log.info(
        "trainer.compile: %s names no transformer blocks (_no_split_modules), so the whole model is compiled",
        type(model).__name__,
    )
    return torch.compile(model, backend=backend)
