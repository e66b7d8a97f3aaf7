"""The memory preflight: before any weights load, an estimate per device of what a training step holds, printed,
and a stop with the settings that would fit when it exceeds the device's memory.

Parts (bytes per device; ``W`` = the world size, sharded parts divided by it under FSDP):

* parameters: every weight in ``model.dtype`` (fp32 4 bytes, bf16 2); under FSDP sharded over ``W``. Under FSDP2
  with mixed precision the trainable weights are float32 masters whatever ``model.dtype`` says (accelerate's
  ``fsdp2_prepare_model`` upcasts them before ``fully_shard``; ``masters=True``);
* gradients: the trainable weights (every weight, or LoRA's adapters), in the masters' dtype, sharded under FSDP;
* optimizer state: AdamW's two moments per trainable weight, in the masters' dtype, sharded under FSDP;
* activations: per token and transformer block ``ACT_PER_H`` x width + ``ACT_PER_FF`` x MLP width elements
  saved for the backward (norm inputs, q/k/v, attention output, MLP inputs and products), in the compute dtype
  (bf16 under ``mixed_precision=bf16``); with ``model.gradient_checkpointing`` one width per block (its input)
  plus one block's full set during its recompute;
* loss: the logits held at once: ``LOSS_CHUNK`` positions (the chunked loss, ``models/head.py``) or every
  token (the model's own loss: small vocabularies), x vocabulary x ``LOGIT_BYTES`` (float32 logits, their
  log-softmax and gradient);
* working (FSDP only): the weights ``fully_shard`` gathers for compute and their unsharded gradients, in the
  compute dtype: the root's (embeddings, head: kept through the step) and two blocks' (the one computing and the
  one prefetched);
* unsharded (FSDP only): the full copy of the model a process holds beside its shards between time steps: at
  the start of a step the whole model with its trainable weights upcast to the masters' dtype, before
  ``fully_shard`` splits it; at the end the gathered copy in ``model.dtype`` (``training/distributed.py:
  unsharded_copy``, for saving and evaluation) plus one float32 embedding matrix being gathered.

The estimate (:attr:`Estimate.total`) is the larger of the two phases: a training step (every part but
``unsharded``) and the time between steps (``parameters`` + ``unsharded``; no gradients, no optimizer state).
Calibrated against measured peaks on CPU (tests/unit/training/test_preflight.py and tests/e2e/test_preflight.py, tests/e2e/test_preflight_masters.py: within
25 %); a GPU adds the CUDA context and the allocator's fragmentation, which :data:`HEADROOM` leaves room for.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, fields
from typing import Optional

from evolve_train.errors import ConfigError

log = logging.getLogger(__name__)

ACT_PER_H = 14
ACT_PER_FF = 5
LOGIT_BYTES = 12
HEADROOM = 0.9
"""Share of a device's memory a run may plan to use."""
GIB = 1024**3


@dataclass
class Shape:
    """What the estimate reads of a decoder-only model: parameter count, width, MLP width, blocks, vocabulary."""

    parameters: int
    hidden: int
    ffn: int
    layers: int
    vocab: int


@dataclass
class Estimate:
    parameters: float
    gradients: float
    optimizer: float
    activations: float
    loss: float
    working: float = 0.0
    unsharded: float = 0.0

    @property
    def step(self) -> float:
        """Bytes held during a training step."""
        return self.parameters + self.gradients + self.optimizer + self.activations + self.loss + self.working

    @property
    def between_steps(self) -> float:
        """Bytes held while the model is unsharded between time steps (FSDP: shards and a full copy)."""
        return self.parameters + self.unsharded

    @property
    def total(self) -> float:
        return max(self.step, self.between_steps)

    def lines(self) -> str:
        parts = ", ".join(f"{f.name} {getattr(self, f.name) / GIB:.2f}" for f in fields(self))
        return f"{self.total / GIB:.2f} GiB ({parts})"


def shape_of(config) -> Shape:
    """The :class:`Shape` of a transformers config (parameters counted on the meta device: no memory)."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    hidden = getattr(config, "hidden_size", None) or config.n_embd
    ffn = getattr(config, "intermediate_size", None) or getattr(config, "n_inner", None) or 4 * hidden
    layers = getattr(config, "num_hidden_layers", None) or config.n_layer
    return Shape(sum(p.numel() for p in model.parameters()), hidden, ffn, layers, config.vocab_size)


def estimate(
    shape: Shape,
    *,
    tokens: int,
    weight_bytes: int = 4,
    compute_bytes: int = 4,
    world: int = 1,
    sharded: bool = False,
    masters: bool = False,
    trainable: Optional[int] = None,
    checkpointing: bool = False,
    chunked: bool = True,
    chunk: int = 1024,
) -> Estimate:
    """Bytes per device of one training step at ``tokens`` tokens per micro-batch and device. ``masters``: the
    trainable weights are float32 masters under FSDP2 with mixed precision, whatever ``weight_bytes``."""
    trainable = shape.parameters if trainable is None else trainable
    frozen = shape.parameters - trainable
    master_bytes = 4 if masters and sharded else weight_bytes
    share = world if sharded else 1
    per_block = ACT_PER_H * shape.hidden + ACT_PER_FF * shape.ffn
    if checkpointing:
        elements = tokens * (shape.layers * shape.hidden + per_block)
    else:
        elements = tokens * shape.layers * per_block
    elements += 4 * tokens * shape.hidden  # embeddings, final norm, the hidden states the loss reads
    logits = min(tokens, chunk) if chunked else tokens
    full = trainable * master_bytes + frozen * weight_bytes
    return Estimate(
        parameters=full / share,
        gradients=trainable * master_bytes / share,
        optimizer=2 * trainable * master_bytes / share,
        activations=elements * compute_bytes,
        loss=logits * shape.vocab * LOGIT_BYTES,
        working=2 * gathered_parameters(shape) * compute_bytes if sharded else 0.0,
        unsharded=_unsharded(shape, full, weight_bytes) if sharded else 0.0,
    )


def block_parameters(shape: Shape) -> int:
    """Weights of one transformer block: four width x width attention projections (an upper bound under grouped
    keys and values) and three width x MLP width ones."""
    return 4 * shape.hidden * shape.hidden + 3 * shape.hidden * shape.ffn


def gathered_parameters(shape: Shape) -> int:
    """Weights ``fully_shard`` holds gathered at once during a step: the root's (what is outside the blocks:
    embeddings, final norm, an untied head) and two blocks'."""
    blocks = shape.layers * block_parameters(shape)
    root = max(shape.parameters - blocks, shape.vocab * shape.hidden)
    return root + 2 * min(block_parameters(shape), blocks)


def _unsharded(shape: Shape, full: float, weight_bytes: int) -> float:
    """The full copy beside the shards between steps: the model in the masters' dtype before sharding, or the
    gathered copy in ``model.dtype`` with one float32 embedding matrix being gathered into it."""
    return max(full, shape.parameters * weight_bytes + 4 * shape.vocab * shape.hidden)


def what_fits(shape: Shape, budget: float, **settings) -> list[str]:
    """Settings (as overrides) under which the estimate fits ``budget`` bytes, the cheapest changes first."""
    tries = [
        ("model.gradient_checkpointing=true", dict(checkpointing=True)),
        ("model.dtype=bfloat16", dict(weight_bytes=2)),
        ("model.gradient_checkpointing=true model.dtype=bfloat16", dict(checkpointing=True, weight_bytes=2)),
    ]
    tokens = settings["tokens"]
    while tokens > 256:
        tokens //= 2
        tries.append((f"{tokens} tokens per micro-batch (trainer.tokens_per_batch or batch_size)", dict(tokens=tokens)))
    found = []
    for overrides, change in tries:
        if estimate(shape, **{**settings, **change}).total <= budget:
            found.append(overrides)
    return found[:3]


def check(shape: Shape, device_bytes: float, *, enforce: bool = True, **settings) -> Estimate:
    """Log the estimate; above :data:`HEADROOM` of ``device_bytes``, ConfigError naming what would fit (a log
    warning instead when ``enforce`` is false: ``trainer.memory_preflight=warn``)."""
    result = estimate(shape, **settings)
    log.info("memory preflight, per device: %s of %.1f GiB", result.lines(), device_bytes / GIB)
    if result.total <= HEADROOM * device_bytes:
        return result
    fits = what_fits(shape, HEADROOM * device_bytes, **settings) or ["more devices under FSDP, or a smaller model"]
    message = (
        f"memory preflight: a training step needs about {result.lines()} per device, over "
        f"{HEADROOM:.0%} of the device's {device_bytes / GIB:.1f} GiB. Would fit: {'; '.join(fits)}. "
        "To start anyway: trainer.memory_preflight=warn"
    )
    if enforce:
        raise ConfigError(message)
    log.warning(message)
    return result


MODES = ("check", "warn", "off")


def device_memory(device, local_processes: int) -> float:
    """Bytes of one device: the GPU's memory, or the host's shared by the node's processes."""
    import os

    import torch

    if device.type == "cuda":
        return float(torch.cuda.get_device_properties(device).total_memory)
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / max(1, local_processes)


def run_preflight(cfg, accelerator) -> Optional[Estimate]:
    """The preflight of a run (``trainer.memory_preflight``), from the model's config alone: a built model's
    (``models/build.py: model_config``) or a pretrained one's ``config.json``; skipped, saying why, for
    encoder-decoder models and configs that cannot be read."""
    import os

    mode = str(cfg.trainer.memory_preflight)
    if mode not in MODES:
        raise ConfigError(f"trainer.memory_preflight must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "off" or str(cfg.model.arch) == "t5":
        return None
    try:
        shape = shape_of(_transformers_config(cfg.model))
    except Exception as err:  # an unreadable or remote-only config: the run goes on without the estimate
        log.info("memory preflight skipped: the model's config could not be read (%s)", err)
        return None
    from evolve_train.models.head import LOSS_CHUNK, SPARSE_MIN_VOCAB
    from evolve_train.training.distributed import shard_group_size

    trainer, model = cfg.trainer, cfg.model
    weight_bytes = 2 if str(model.dtype) == "bfloat16" else 4
    half = str(getattr(accelerator, "mixed_precision", "no")) in ("bf16", "fp16")
    strategies = [str(s) for s in (getattr(cfg.method, "strategies", None) or [cfg.method.name])]
    trainable = _lora_parameters(shape, cfg.method.lora.r) if "lora" in strategies else None
    sharded = bool(getattr(accelerator, "is_fsdp2", False))
    return check(
        shape,
        device_memory(accelerator.device, int(os.environ.get("LOCAL_WORLD_SIZE", "1"))),
        enforce=mode == "check",
        tokens=trainer.tokens_per_batch or trainer.batch_size * trainer.seq_len,
        weight_bytes=weight_bytes,
        compute_bytes=2 if half else weight_bytes,
        world=shard_group_size(accelerator) if sharded else accelerator.num_processes,
        sharded=sharded,
        masters=sharded and half,  # accelerate upcasts trainable weights to float32 for fully_shard
        trainable=trainable,
        checkpointing=bool(model.gradient_checkpointing),
        chunked=shape.vocab >= SPARSE_MIN_VOCAB,
        chunk=LOSS_CHUNK,
    )


def _transformers_config(model_cfg):
    if model_cfg.name_or_path:
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(model_cfg.name_or_path, trust_remote_code=model_cfg.trust_remote_code)
    from evolve_train.models.build import model_config

    return model_config(model_cfg, model_cfg.vocab_size)


def _lora_parameters(shape: Shape, rank: int) -> int:
    """LoRA's trainable weights, for rank-``rank`` adapters on four projections per block (an upper bound
    for the usual query/value targets)."""
    return 4 * shape.layers * rank * 2 * shape.hidden
