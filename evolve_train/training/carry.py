"""What one time step hands to the next besides its checkpoint: ``<run_dir>/train_state/carry/<k>/``.

- ``optimizer.safetensors``: the AdamW state at the end of step k by parameter name
  (``<name>/exp_avg``, ``<name>/exp_avg_sq``, ``<name>/step``), for ``trainer.optimizer_state=keep``; under
  FSDP2 ``optimizer/`` instead: the same state sharded through ``torch.distributed.checkpoint`` (one
  ``.distcp`` file per process and the ``.metadata``, keyed ``optim.state.<name>.<key>``), written by every
  process into ``carry/.<k>.optimizer-staged/`` at the end of the step's training and moved into the carry by the
  main process: no process ever holds the whole state. The next step's processes read their own shards back
  (any number of processes: DCP reshards);
- ``raw.safetensors``: step k's trained (raw) weights when ``steps/<k>/`` holds an average
  (``method.average``, ``method.average_continue=raw``): what step k+1 trains from.

Written into a temporary dir and renamed (complete or absent) *before* ``state.json`` marks step k trained, so
a resumed run finds the carry of its last complete step; :func:`prune` deletes the older ones once a step is
recorded. Tensors only (safetensors), no pickle. The mid-step training states (``training/train_state.py``)
are separate: inside a step they hold the optimizer as before.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any, Optional

import torch

from evolve_train.training.collectives import group_initialized
from evolve_train.training.train_state import state_root
from evolve_train.utils.io import atomic_dir, discard

CARRY_DIR = "carry"
OPTIMIZER_FILE = "optimizer.safetensors"
OPTIMIZER_DCP = "optimizer"
RAW_FILE = "raw.safetensors"
log = logging.getLogger(__name__)


def carry_dir(run_dir: Path, step: int) -> Path:
    return state_root(run_dir) / CARRY_DIR / str(step)


def staging_dir(run_dir: Path, step: int) -> Path:
    """Where the processes write step ``step``'s sharded optimizer state before :func:`save` moves it in."""
    return state_root(run_dir) / CARRY_DIR / f".{step}.optimizer-staged"


def save(run_dir: Path, step: int, files: dict[str, Any]) -> Path:
    """Write ``{file name: tensors}`` as ``carry/<step>/`` atomically (replacing an earlier attempt's); a value
    that is a directory (a sharded state every process wrote: :func:`staging_dir`) is moved in whole."""
    from safetensors.torch import save_file

    final = carry_dir(run_dir, step)
    with atomic_dir(final) as tmp:
        for name, tensors in files.items():
            if isinstance(tensors, Path):
                shutil.move(str(tensors), str(tmp / name))
                continue
            save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, str(tmp / name))
    return final


def sharded_carry(run_dir: Path, step: int) -> Optional[Path]:
    """``carry/<step>/optimizer/`` when step ``step`` left its optimizer state sharded (FSDP2), else ``None``."""
    path = carry_dir(run_dir, step) / OPTIMIZER_DCP
    return path if (path / ".metadata").is_file() else None


def load(run_dir: Path, step: int, name: str) -> Optional[dict[str, torch.Tensor]]:
    """The tensors of ``carry/<step>/<name>``, or ``None`` when absent."""
    from safetensors.torch import load_file

    path = carry_dir(run_dir, step) / name
    return load_file(str(path)) if path.is_file() else None


def prune(run_dir: Path, before: int) -> None:
    """Delete the carries of steps ``< before`` and leftovers of interrupted writes."""
    root = state_root(run_dir) / CARRY_DIR
    for path in root.iterdir() if root.is_dir() else []:
        if path.name.startswith(".") or (path.name.isdigit() and int(path.name) < before):
            shutil.rmtree(path, ignore_errors=True)


# -- AdamW state by parameter name -------------------------------------------------------------------------


def _torch_optimizer(optimizer):
    return getattr(optimizer, "optimizer", optimizer)  # accelerate's wrapper holds the torch optimizer


def optimizer_state(model, optimizer, sharded: bool = False) -> dict[str, torch.Tensor]:
    """``{"<param name>/<key>": tensor}`` of every parameter with a state (full tensors, on the CPU).

    ``sharded`` (FSDP2): gathered through ``torch.distributed.checkpoint.state_dict`` (a collective: every
    process calls it) into the main process's host memory, one tensor at a time; the other processes get an
    empty dict (no process but the main one ever holds the full state). Otherwise read from the optimizer by
    the model's parameter names."""
    if sharded:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        full = get_optimizer_state_dict(
            model,
            _torch_optimizer(optimizer),
            options=StateDictOptions(full_state_dict=True, cpu_offload=True),  # rank 0 only, on its CPU
        )
        states = full.get("state", {}) if full else {}
    else:
        torch_optimizer = _torch_optimizer(optimizer)
        states = {
            name: torch_optimizer.state[p]
            for name, p in model.named_parameters()
            if p in torch_optimizer.state and torch_optimizer.state[p]
        }
    return {
        f"{name}/{key}": (value if isinstance(value, torch.Tensor) else torch.tensor(value)).detach().cpu().clone()
        for name, state in states.items()
        for key, value in state.items()
    }


def _by_name(tensors: dict[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
    grouped: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        name, _, field = key.rpartition("/")
        grouped.setdefault(name, {})[field] = value
    return grouped


def load_optimizer_state(model, optimizer, tensors: dict[str, torch.Tensor], sharded: bool = False) -> int:
    """Start ``optimizer`` from :func:`optimizer_state`'s ``tensors`` (parameters matched by name; the others
    start fresh); returns how many parameters got a state. ``sharded`` (FSDP2, a collective): the main
    process's ``tensors`` are broadcast one at a time and each process keeps its shard; the others pass ``{}``."""
    grouped = _by_name(tensors)
    torch_optimizer = _torch_optimizer(optimizer)
    if sharded:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        names = {name for name, p in model.named_parameters() if p.requires_grad}
        state = {name: value for name, value in grouped.items() if name in names}
        groups = [
            {**{k: v for k, v in group.items() if k != "params"}, "params": sorted(state)}
            for group in torch_optimizer.param_groups
        ]
        set_optimizer_state_dict(
            model,
            torch_optimizer,
            {"state": state, "param_groups": groups} if state else {},
            options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True),
        )
        return len(state)
    index = {p: i for i, p in enumerate(p for group in torch_optimizer.param_groups for p in group["params"])}
    state = {index[p]: grouped[name] for name, p in model.named_parameters() if p in index and name in grouped}
    current = torch_optimizer.state_dict()
    torch_optimizer.load_state_dict({"state": state, "param_groups": current["param_groups"]})
    return len(state)


def save_sharded_optimizer_state(model, optimizer, path: Path, main: bool) -> int:
    """Write the optimizer state into ``path`` through DCP, each process its own shards (a collective);
    returns the values this process wrote."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    if main:
        discard(path)
        path.parent.mkdir(parents=True, exist_ok=True)
    if group_initialized():
        torch.distributed.barrier()
    state = get_optimizer_state_dict(model, _torch_optimizer(optimizer))
    dcp.save({"optim": state}, checkpoint_id=str(path), no_dist=not group_initialized())
    local = getattr(torch.distributed.tensor, "DTensor", ())

    def held(value) -> int:
        if isinstance(local, type) and isinstance(value, local):
            return value.to_local().numel()
        return value.numel() if isinstance(value, torch.Tensor) else 1

    return sum(held(v) for per in state.get("state", {}).values() for v in per.values())


def load_sharded_optimizer_state(model, optimizer, path: Path) -> int:
    """Start ``optimizer`` from the state :func:`save_sharded_optimizer_state` wrote (every process reads its
    shards; parameters matched by name, the others start fresh; this step's learning rates and other param-group
    settings kept); returns how many parameters got a state."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

    torch_optimizer = _torch_optimizer(optimizer)
    saved = FileSystemReader(str(path)).read_metadata().state_dict_metadata
    template = get_optimizer_state_dict(model, torch_optimizer)  # this run's shapes and shards
    state = {
        name: per
        for name, per in template.get("state", {}).items()
        if per and all(f"optim.state.{name}.{key}" in saved for key in per)
    }
    if state:
        dcp.load({"optim": {"state": state}}, checkpoint_id=str(path), no_dist=not group_initialized())
    groups = [
        {**{k: v for k, v in group.items() if k != "params"}, "params": [p for p in group["params"] if p in state]}
        for group in template["param_groups"]
    ]
    set_optimizer_state_dict(model, torch_optimizer, {"state": state, "param_groups": groups})
    return len(state)


class OptimizerCarry:
    """The AdamW state handed from one time step to the next (``trainer.optimizer_state=keep``): the loop
    starts its optimizer from ``tensors`` (when set) and leaves the step's final state in it."""

    def __init__(self, tensors: Optional[dict[str, torch.Tensor]] = None, path: Optional[Path] = None):
        self.tensors = tensors
        self.path = path
        """A sharded state to start from (``carry/<k-1>/optimizer/``), read by every process."""
        self.staged: Optional[Path] = None
        """The sharded state this step left (FSDP2: :func:`staging_dir`), moved into its carry by :func:`save`."""

    def restore(self, model, optimizer, sharded: bool) -> None:
        if self.path is not None:
            count = load_sharded_optimizer_state(model, optimizer, self.path)
            log.info("trainer.optimizer_state=keep: the AdamW state of %d parameters read from %s", count, self.path)
        elif sharded:  # the main process holds the state; every process takes part when it has one
            import torch.distributed as dist

            present = [bool(self.tensors)]
            dist.broadcast_object_list(present, src=0)
            if present[0]:
                load_optimizer_state(model, optimizer, self.tensors or {}, sharded=True)
        elif self.tensors:
            load_optimizer_state(model, optimizer, self.tensors, sharded=False)

    def capture(self, model, optimizer, sharded: bool, staged: Optional[Path] = None, main: bool = True) -> None:
        if sharded and staged is not None:  # FSDP2: each process writes its shards; nothing is gathered
            import torch.distributed as dist

            mine = save_sharded_optimizer_state(model, optimizer, staged, main)
            self.tensors, self.staged = None, staged
            held = [None] * dist.get_world_size()
            dist.all_gather_object(held, mine)
            log.info(
                "trainer.optimizer_state=keep: the AdamW state saved sharded (torch.distributed.checkpoint, one "
                "file per process); processes held %s values",
                held,
            )
            return
        self.tensors = optimizer_state(model, optimizer, sharded=sharded)
        if sharded:
            import torch.distributed as dist

            held = [None] * dist.get_world_size()
            dist.all_gather_object(held, sum(t.numel() for t in self.tensors.values()))
            log.info(
                "trainer.optimizer_state=keep: the AdamW state gathered to the main process; processes held %s values",
                held,
            )
