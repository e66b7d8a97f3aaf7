"""The accelerator of a run and what sharded backends need (accelerate_configs/, docs/distributed.md).

* :func:`resolve_precision`: what ``trainer.mixed_precision=auto`` means on a device (bf16 where it computes
  bf16 natively, ``no`` elsewhere), and why.
* :func:`build_accelerator`: accelerate's ``Accelerator`` in the resolved precision, with the process group's
  timeout (``trainer.dist_timeout_s``); under an FSDP2 launch on CPU (``accelerate launch --config_file
  accelerate_configs/fsdp.yaml`` with ``ACCELERATE_USE_CPU=1``), where accelerate itself falls back to DDP,
  it switches the accelerator to its own FSDP2 engine (:func:`enable_fsdp2_on_cpu`), so the GPU code path
  is what runs and is tested on CPU with gloo; across nodes FSDP2 runs as HSDP (:func:`use_mesh`: shards
  within a node, replicas across nodes, ``trainer.fsdp_mesh``).
* :func:`train_sharded`: one time step's training of a model that accelerate shards (FSDP2) in place;
  afterwards the run continues with a plain, unsharded model rebuilt from the gathered weights
  (:func:`unsharded_copy`), so methods (LoRA merge, EWC), checkpoints, the step-0 cache and evaluation
  see an ordinary model, and the next step's LoRA is applied before sharding.
"""

from __future__ import annotations

import copy
import logging
import os
from datetime import timedelta
from pathlib import Path
from typing import Callable, Optional

import torch

from evolve_train.training.collectives import flight_recorder_defaults

log = logging.getLogger(__name__)


def fsdp2_requested() -> bool:
    """The launch asks for FSDP2: ``accelerate launch`` sets these from accelerate_configs/fsdp.yaml."""
    return (
        os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true" and os.environ.get("FSDP_VERSION", "1") == "2"
    )


CPU_BF16_FLAGS = ("amx_bf16", "avx512_bf16")
"""CPU flags (``/proc/cpuinfo``) of native bf16 arithmetic: AMX tiles, AVX-512 BF16 (``vdpbf16ps``)."""


def cpu_flags() -> set[str]:
    """The CPU's feature flags as ``/proc/cpuinfo`` lists them (empty where there is none: not Linux)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return set()


def cpu_bf16() -> tuple[bool, str]:
    """Whether this CPU computes bf16 natively under torch, and what shows it: a bf16 flag
    (:data:`CPU_BF16_FLAGS`) while ATen runs its AVX-512 kernels (``torch.backends.cpu.get_cpu_capability()``;
    ``ATEN_CPU_CAPABILITY=avx2`` lowers it, and with it every bf16 kernel to an emulation)."""
    capability = torch.backends.cpu.get_cpu_capability()
    found = [flag for flag in CPU_BF16_FLAGS if flag in cpu_flags()]
    if not found:
        return False, f"CPU without AVX-512 BF16 or AMX, torch capability {capability}"
    if not capability.startswith("AVX512"):
        return False, f"CPU has {found[0]} but torch's kernels run at {capability}"
    return True, f"CPU has {found[0]}"


def cuda_bf16(device: torch.device) -> tuple[bool, str]:
    """Whether the CUDA (or ROCm) device computes bf16 natively (Ampere and later), and its name."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    name = torch.cuda.get_device_name(index)
    try:  # properties only: no tensor, so no CUDA context on a device this process does not own
        native = torch.cuda.is_bf16_supported(including_emulation=False)
    except TypeError:  # an older torch without the argument
        native = torch.cuda.get_device_capability(index)[0] >= 8
    return native, f"CUDA device {name} {'has' if native else 'has no'} native bf16"


def native_bf16(device: torch.device) -> tuple[bool, str]:
    """Whether ``device`` computes bf16 natively, and why (one phrase for the log)."""
    if device.type == "cuda":
        return cuda_bf16(device)
    if device.type == "cpu":
        return cpu_bf16()
    return False, f"device {device.type}: auto picks bf16 on CUDA and CPU only"


def resolve_precision(trainer, device: torch.device) -> tuple[str, str]:
    """``(precision, reason)``: ``trainer.mixed_precision`` as accelerate gets it on ``device``. ``auto`` is
    ``bf16`` where the device computes bf16 natively (:func:`native_bf16`), else ``no`` (fp32); an explicit
    value is itself (reason ``"set"``)."""
    setting = str(trainer.mixed_precision)
    if setting != "auto":
        return setting, "set"
    native, reason = native_bf16(device)
    return ("bf16" if native else "no"), reason


def launch_device(cpu: bool = False) -> torch.device:
    """The device accelerate will give this process, found without creating its state (that would start the
    process group before the run's timeout is passed): the existing state's, else CPU when asked for
    (``cpu=True``, ``ACCELERATE_USE_CPU``), else this process's CUDA device, else CPU."""
    from accelerate.state import PartialState

    if PartialState._shared_state:
        return PartialState().device
    if cpu or os.environ.get("ACCELERATE_USE_CPU", "false").lower() in ("1", "true", "yes"):
        return torch.device("cpu")
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)) % torch.cuda.device_count())
    return torch.device("cpu")


def resolved_precision(trainer) -> str:
    """The precision this process trains ``trainer`` in: the accelerator's, once one exists (``auto`` resolved
    by :func:`build_accelerator`), else :func:`resolve_precision` on :func:`launch_device`."""
    if str(trainer.mixed_precision) != "auto":
        return str(trainer.mixed_precision)
    from accelerate.state import AcceleratorState, is_initialized

    if is_initialized():
        return str(AcceleratorState().mixed_precision)
    return resolve_precision(trainer, launch_device())[0]


def announce_precision(trainer, device: torch.device, main: bool = True) -> str:
    """Resolve ``trainer.mixed_precision`` on ``device``, say it in one log line (``auto``) or warn (``bf16``
    on a CPU that emulates it); returns the precision."""
    precision, reason = resolve_precision(trainer, device)
    if not main:
        return precision
    if str(trainer.mixed_precision) == "auto":
        log.info("mixed precision: auto -> %s (%s)", precision, reason)
    elif precision == "bf16" and device.type == "cpu":
        native, why = cpu_bf16()
        if not native:
            log.warning(
                "trainer.mixed_precision=bf16 on a CPU without native bf16 (%s): torch emulates it, many times "
                "slower than fp32; trainer.mixed_precision=auto picks fp32 (no) on this machine",
                why,
            )
    return precision


def build_accelerator(trainer, **kwargs):
    """The run's ``Accelerator``: ``trainer.mixed_precision`` (``auto`` resolved for this device:
    :func:`resolve_precision`), the process-group timeout ``trainer.dist_timeout_s`` (``InitProcessGroupKwargs``),
    gradient accumulation (under FSDP2 gradients reduced after every micro-batch: ``trainer.fsdp_sync_each_batch``)
    and FSDP2 on CPU where asked for. NCCL's flight recorder is on unless the launch set its variables
    (``training/collectives.py: flight_recorder_defaults``)."""
    from accelerate import Accelerator
    from accelerate.utils import GradientAccumulationPlugin, InitProcessGroupKwargs

    handler = InitProcessGroupKwargs(timeout=timedelta(seconds=trainer.dist_timeout_s))
    flight_recorder_defaults()  # before the process group: NCCL reads them when it is created
    main = int(os.environ.get("RANK", 0)) == 0
    precision = announce_precision(trainer, launch_device(kwargs.get("cpu", False)), main)
    forget_single_process_state(precision)
    accumulation = GradientAccumulationPlugin(
        num_steps=kwargs.pop("gradient_accumulation_steps", 1),
        sync_each_batch=fsdp2_requested() and bool(getattr(trainer, "fsdp_sync_each_batch", True)),
    )
    accelerator = Accelerator(
        mixed_precision=precision, kwargs_handlers=[handler], gradient_accumulation_plugin=accumulation, **kwargs
    )
    enable_fsdp2_on_cpu(accelerator)
    plugin = getattr(accelerator.state, "fsdp_plugin", None)
    if plugin is not None and getattr(plugin, "fsdp_version", 1) == 2:
        reduce_in(plugin, str(getattr(trainer, "fsdp_reduce_dtype", "float32")))
        use_mesh(accelerator, trainer)
    return accelerator


FSDP_MESHES = ("auto", "fsdp", "hsdp")


def mesh_sizes(mode: str, replicate: int, world: int, local: int) -> Optional[tuple[int, int]]:
    """``(replicas, shards per replica)`` of FSDP2's 2-D mesh under ``trainer.fsdp_mesh`` / ``fsdp_replicate``
    for ``world`` processes, ``local`` per node; ``None`` for plain FSDP (one dimension: every process one shard).
    ``auto`` is ``hsdp`` when the job spans nodes or ``replicate`` > 1; ``replicate`` 0 means one replica per node."""
    from evolve_train.errors import ConfigError

    if mode not in FSDP_MESHES:
        raise ConfigError(f"trainer.fsdp_mesh must be one of {', '.join(FSDP_MESHES)}, got {mode!r}")
    replicas = replicate if replicate > 0 else world // max(1, min(local, world))
    if mode == "fsdp" or world <= 1 or (mode == "auto" and replicas <= 1):
        return None
    if replicas <= 1 or replicas >= world or world % replicas:
        raise ConfigError(
            f"trainer.fsdp_mesh=hsdp: {replicas} replica(s) of {world} processes; needs from 2 to {world // 2} "
            "replicas dividing the processes (trainer.fsdp_replicate; 0 = one per node), or trainer.fsdp_mesh=fsdp"
        )
    return replicas, world // replicas


def use_mesh(accelerator, trainer) -> Optional[tuple[int, int]]:
    """Under FSDP2, shard within groups and replicate across them (HSDP) where :func:`mesh_sizes` says so:
    accelerate's ``ParallelismConfig`` with ``dp_replicate`` x ``dp_shard``, whose 2-D device mesh
    (``init_device_mesh``) its ``fsdp2_prepare_model`` passes to ``fully_shard``. Set after the accelerator is
    built (accelerate checks a mesh against the FSDP2 state, which CPU runs get from :func:`enable_fsdp2_on_cpu`).
    Returns the sizes, or ``None`` for plain FSDP."""
    local = int(os.environ.get("LOCAL_WORLD_SIZE", accelerator.num_processes))
    mode, replicate = str(getattr(trainer, "fsdp_mesh", "auto")), int(getattr(trainer, "fsdp_replicate", 0))
    sizes = mesh_sizes(mode, replicate, accelerator.num_processes, local)
    if sizes is None:
        return None
    from accelerate.utils import ParallelismConfig

    config = ParallelismConfig(dp_replicate_size=sizes[0], dp_shard_size=sizes[1])
    accelerator.state.parallelism_config = config
    accelerator.state.device_mesh = config.get_device_mesh(accelerator.device.type)
    config._validate_accelerator(accelerator)
    log.info("FSDP2 as HSDP: %d replicas x %d shards (sharded within a group, replicated across groups)", *sizes)
    return sizes


def shard_group_size(accelerator) -> int:
    """Processes one copy of the model is sharded over: the shard dimension under HSDP, else every process."""
    config = getattr(accelerator, "parallelism_config", None)
    shards = int(getattr(config, "dp_shard_size", 1) or 1) if config is not None else 1
    return shards if shards > 1 else accelerator.num_processes


REDUCE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "param": None}


def reduce_in(plugin, reduce_dtype: str) -> None:
    """FSDP2's gradient reduce-scatter in ``trainer.fsdp_reduce_dtype``: ``float32`` (the default, as torchtitan
    and OLMo-core: a bf16 reduce over many GPUs loses gradient precision, pytorch#106395), ``bfloat16`` (half the
    traffic), or ``param`` (the parameters' dtype, accelerate's own policy). The parameters' compute dtype stays
    ``trainer.mixed_precision``'s."""
    import dataclasses

    from torch.distributed.fsdp import MixedPrecisionPolicy

    if reduce_dtype not in REDUCE_DTYPES:
        from evolve_train.errors import ConfigError

        raise ConfigError(f"trainer.fsdp_reduce_dtype must be one of {', '.join(REDUCE_DTYPES)}, got {reduce_dtype!r}")
    if reduce_dtype == "param":
        return
    policy = plugin.mixed_precision_policy or MixedPrecisionPolicy()
    plugin.mixed_precision_policy = dataclasses.replace(policy, reduce_dtype=REDUCE_DTYPES[reduce_dtype])


def forget_single_process_state(mixed_precision: str) -> None:
    """Let a second run in one Python process (a notebook, a test session, a sweep's in-process jobs) choose
    another ``trainer.mixed_precision``: accelerate keeps one ``AcceleratorState`` per process and refuses
    to change its precision ("AcceleratorState has already been initialized and cannot be changed"). In a
    single, non-distributed process that state holds nothing a new run needs, so it is reset; under a
    distributed launch it is left alone (the launch fixes the precision for every rank)."""
    from accelerate.state import AcceleratorState, PartialState

    if not AcceleratorState._shared_state:
        return
    if PartialState().num_processes == 1 and AcceleratorState().mixed_precision != mixed_precision:
        AcceleratorState._reset_state()


def sum_over_processes(accelerator, count: int) -> int:
    """``count`` summed over the processes of the launch (every process must call this; no collective with one)."""
    if accelerator.num_processes == 1:
        return count
    return int(accelerator.reduce(torch.tensor([count], device=accelerator.device), "sum").item())


def process_group_timeout():
    """The timeout of the default process group (a ``timedelta``), or ``None`` without one."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return None
    group = dist.distributed_c10d._get_default_group()
    return group._get_backend(
        torch.device("cpu") if dist.get_backend() == "gloo" else torch.device("cuda")
    ).options._timeout


def enable_fsdp2_on_cpu(accelerator) -> bool:
    """Under an FSDP2 launch on CPU, accelerate (1.x) ignores the FSDP plugin and runs DDP (``MULTI_CPU``).
    Switch the shared accelerator state to FSDP with the plugin the launch describes (read from the
    ``FSDP_*`` variables): ``accelerator.prepare`` then shards with ``fully_shard`` per transformer block
    and the root (accelerate's ``fsdp2_prepare_model``), as on GPU. True when switched."""
    from accelerate.state import PartialState
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin

    if not fsdp2_requested() or accelerator.distributed_type != DistributedType.MULTI_CPU:
        return False
    plugin = FullyShardedDataParallelPlugin()
    if accelerator.mixed_precision != "no":
        plugin.set_mixed_precision(accelerator.mixed_precision)
    # both shared states: every later AcceleratorState() copies PartialState's distributed_type over its own
    PartialState().distributed_type = DistributedType.FSDP
    accelerator.state.distributed_type = DistributedType.FSDP
    accelerator.state.fsdp_plugin = plugin
    log.info(
        "FSDP2 on CPU: %d gloo processes, parameters sharded by accelerate's fully_shard", accelerator.num_processes
    )
    return True


def is_fsdp2(accelerator) -> bool:
    return bool(getattr(accelerator, "is_fsdp2", False))


def is_sharded(accelerator) -> bool:
    """FSDP or DeepSpeed: the model or its optimizer state is split across processes."""
    from accelerate.utils import DistributedType

    return accelerator.distributed_type in (DistributedType.FSDP, DistributedType.DEEPSPEED)


def plain_forward(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` as ``accelerator.prepare`` first saw it: its class's own ``forward`` (every autocast / outputs-to-
    fp32 wrapper a former ``prepare`` set on the instance removed) and no ``_is_accelerate_prepared`` mark.
    ``prepare`` returns a marked model untouched, and evaluation's ``unwrap_model(keep_fp32_wrapper=False)``
    strips the wrapper but keeps the mark: without this, a step after an evaluated, trained step would train
    without autocast (fp32 under ``mixed_precision=bf16``), where the same step after a model loaded from the
    step-0 cache trains in bf16. Called before each step's ``prepare``, so every step trains under one layer."""
    model.__dict__.pop("_is_accelerate_prepared", None)
    model.__dict__.pop("_original_forward", None)
    forward = model.__dict__.get("forward")
    if forward is not None and getattr(getattr(forward, "__func__", forward), "__wrapped__", None) is not None:
        del model.__dict__["forward"]  # accelerate's wrapper on the instance: the class's forward shows again
    return model


def configure_deepspeed(accelerator, batch_size: int) -> None:
    """DeepSpeed needs its micro-batch size before ``prepare``; accelerate infers it from dataloaders, and
    the loop has none (it batches itself): use ``trainer.batch_size``, unless the config file sets one."""
    plugin = getattr(accelerator.state, "deepspeed_plugin", None)
    if plugin is not None and plugin.deepspeed_config.get("train_micro_batch_size_per_gpu", "auto") == "auto":
        plugin.deepspeed_config["train_micro_batch_size_per_gpu"] = batch_size


def is_plain(accelerator) -> bool:
    """A single process or DDP without a loss scaler: after backward the gradients are plain, already
    reduced tensors, and torch's own clip, step and zero_grad are exact."""
    from accelerate.utils import DistributedType

    plain = (DistributedType.NO, DistributedType.MULTI_CPU, DistributedType.MULTI_GPU)
    return accelerator.distributed_type in plain and accelerator.scaler is None


def clip_gradients(accelerator, model, trainable: list, max_norm: float):
    """Clip the gradients' total norm to ``max_norm``; returns the norm before clipping.

    In a plain setup (``is_plain``) this is torch's clip: accelerate's wrapper (scaler and DTensor checks
    over every parameter) costs about 1 ms per optimizer step, 2-3 % of a small model's step. Sharded,
    scaled or XLA setups go through accelerate."""
    if is_plain(accelerator):
        return torch.nn.utils.clip_grad_norm_(trainable, max_norm)
    return accelerator.clip_grad_norm_(model.parameters(), max_norm)


def update_steppers(accelerator, optimizer, scheduler):
    """What the loop calls ``step``/``zero_grad`` on at an optimizer step (only on synced gradients).

    In a plain setup, the torch optimizer and schedule under accelerate's wrappers: the wrappers only add
    checks that are constant there, yet ``AcceleratedOptimizer.step`` looks the LOMO package up on disk twice
    per call and ``zero_grad`` inspects a signature (~1 ms per step together, 3 % of the demo model's step).
    Elsewhere the wrappers, which handle loss scaling, XLA and sharding."""
    if is_plain(accelerator):
        return optimizer.optimizer, scheduler.scheduler
    return optimizer, scheduler


def meta_skeleton(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of ``model`` whose parameters and buffers live on the meta device (no memory): the module
    tree, configs and adapters, to receive the weights of the sharded original (:func:`unsharded_copy`).
    Tied tensors stay tied (one meta tensor each)."""
    memo = {}
    for tensor in list(model.parameters()) + list(model.buffers()):
        empty = torch.empty_like(tensor, device="meta")
        memo[id(tensor)] = (
            torch.nn.Parameter(empty, requires_grad=tensor.requires_grad)
            if isinstance(tensor, torch.nn.Parameter)
            else empty
        )
    return copy.deepcopy(model, memo)


def _full(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor of a DTensor shard (a collective: every rank calls it, in the same order)."""
    from torch.distributed.tensor import DTensor

    return (tensor.full_tensor() if isinstance(tensor, DTensor) else tensor).detach().clone()


def unsharded_copy(sharded: torch.nn.Module, skeleton: torch.nn.Module) -> torch.nn.Module:
    """``skeleton`` (:func:`meta_skeleton` of the model before sharding) filled with the full weights of
    ``sharded``, gathered on every rank one tensor at a time; buffers (never sharded) are copied. Each weight
    gets back its dtype from before sharding: under mixed precision accelerate upcasts trainable bf16 weights to
    float32 masters for ``fully_shard``; the step ends, is checkpointed and continues in ``model.dtype``, as a
    resume or a step-0 cache hit reloads it."""
    return fill_skeleton(
        skeleton,
        sharded,
        parameter=lambda tensor, meta: _full(tensor).to(meta.dtype),
        buffer=lambda tensor, _: _full(tensor),
    )


Convert = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def fill_skeleton(
    skeleton: torch.nn.Module, source: torch.nn.Module, parameter: Convert, buffer: Optional[Convert] = None
) -> torch.nn.Module:
    """``skeleton`` (:func:`meta_skeleton`) with each meta parameter replaced by ``parameter(tensor, meta)`` of
    ``source``'s parameter of the same name (keeping the meta's ``requires_grad``) and each buffer by ``buffer``
    (default ``parameter``) of ``source``'s buffer, one tensor at a time. Tied weights are one meta tensor: listed
    once, replaced once, still tied."""
    buffer = buffer or parameter
    new: dict[int, torch.Tensor] = {}
    with torch.no_grad():
        for name, meta in skeleton.named_parameters():  # tied: listed once
            tensor = parameter(source.get_parameter(name), meta)
            new[id(meta)] = torch.nn.Parameter(tensor, requires_grad=meta.requires_grad)
        for name, meta in skeleton.named_buffers():
            new[id(meta)] = buffer(source.get_buffer(name), meta)
    for module in skeleton.modules():
        for table in (module._parameters, module._buffers):
            for key, value in table.items():
                if value is not None and id(value) in new:
                    table[key] = new[id(value)]
    return skeleton


def shard_sizes(model: torch.nn.Module) -> tuple[int, int]:
    """(parameter values this process holds, values of the whole model)."""
    from torch.distributed.tensor import DTensor

    params = list(model.parameters())
    local = sum((p.to_local() if isinstance(p, DTensor) else p).numel() for p in params)
    return local, sum(p.numel() for p in params)


def train_sharded(accelerator, model: torch.nn.Module, train):
    """``train(model)`` (which prepares, and under FSDP2 shards, ``model`` in place); returns ``(plain
    model, train's result)``. Under FSDP2 the plain model is rebuilt from the trained shards on every rank
    (one gather per step); otherwise it is ``model`` itself."""
    if not is_fsdp2(accelerator):
        return model, train(model)
    skeleton = meta_skeleton(model)
    result = train(model)
    local, total = shard_sizes(model)
    held = accelerator.gather(torch.tensor([local], device=accelerator.device)).tolist()  # the main process logs
    log.info("FSDP2: processes held %s of %d parameter values while training", held, total)
    plain = unsharded_copy(model, skeleton)
    plain.train(model.training)
    return plain, result
