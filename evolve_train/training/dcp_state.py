"""The model and optimizer of a mid-step state through ``torch.distributed.checkpoint`` (DCP), as FSDP2 saves them.

Every process writes its own shards (``dcp/__<rank>_0.distcp``) and the main process the ``dcp/.metadata`` that maps
them to the global tensors, so nothing is gathered on one rank. The state dict is
``torch.distributed.checkpoint.state_dict.get_state_dict``'s: the *trainable* parameters by name
(``ignore_frozen_params``) and the optimizer state keyed by parameter name, whole tensors in the metadata's view
whatever the sharding. So a state reads back on another number of processes, or on one process without a
process group (DCP reshards at load: :func:`load`); ``train_state.py`` decides when continuing is correct.

:func:`save` writes at once; :func:`start_async_save` stages a CPU copy of every shard (a real copy: training may
change the parameters right after) and writes it in a background thread (``dcp.async_save``) over a gloo group
of its own, so its collectives never interleave with training's. :class:`PendingSave` is the write in flight.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Optional

import torch

from evolve_train.training.collectives import group_initialized

log = logging.getLogger(__name__)

DCP_DIR = "dcp"
_async_group: Any = None


def _options(load: bool):
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(ignore_frozen_params=True, strict=not load)


def unwrapped(accelerator, model, optimizer) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """The module whose parameter names the state uses and the torch optimizer under accelerate's wrapper."""
    module = accelerator.unwrap_model(model) if accelerator is not None else model
    return module, getattr(optimizer, "optimizer", optimizer)


def state_dict(accelerator, model, optimizer) -> dict:
    """``{"model": trainable parameters, "optim": optimizer state}`` (sharded DTensors under FSDP2)."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    module, optim = unwrapped(accelerator, model, optimizer)
    model_state, optim_state = get_state_dict(module, optim, options=_options(load=False))
    return {"model": without_tied_copies(model_state), "optim": optim_state}


def _local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def without_tied_copies(model_state: dict) -> dict:
    """The state without the second name of a tied parameter (e.g. ``lm_head.weight`` beside
    ``model.embed_tokens.weight``): ``get_state_dict`` lists it under both and DCP would write its shards twice
    (a 128k-vocabulary 1B model: 1 GB more per state). A tied pair shares its storage; an empty local shard
    shares nothing. Loading reads the first name into the one parameter both names are."""
    seen, out = set(), {}
    for name, tensor in model_state.items():
        local = _local(tensor) if isinstance(tensor, torch.Tensor) else None
        key = None
        if local is not None and local.numel() > 0:
            key = (local.untyped_storage().data_ptr(), local.storage_offset(), tuple(local.shape), local.dtype)
        if key is not None and key in seen:
            continue
        seen.add(key)
        out[name] = tensor
    return out


def save(path: Path, accelerator, model, optimizer) -> float:
    """Write the state into ``path`` now (a collective under a process group); the seconds it took."""
    import torch.distributed.checkpoint as dcp

    began = time.perf_counter()
    dcp.save(state_dict(accelerator, model, optimizer), checkpoint_id=str(path), no_dist=not group_initialized())
    return time.perf_counter() - began


class PendingSave:
    """A state being written in the background; :meth:`wait` blocks until every process's files are written."""

    def __init__(self, future: Future, began: float, staged_s: float):
        self.future, self.began, self.staged_s = future, began, staged_s

    def done(self) -> bool:
        return self.future.done()

    def wait(self) -> float:
        """Block until the write finished (re-raising its error); seconds from the start of the save."""
        result = self.future.result()
        upload = getattr(result, "upload_completion", None)  # an AsyncSaveResponse (torch versions that split it)
        if upload is not None:
            upload.result()
        return time.perf_counter() - self.began


def start_async_save(path: Path, accelerator, model, optimizer) -> PendingSave:
    """Stage a CPU copy of the state and write it into ``path`` in a background thread (a collective: every
    process calls it at the same point). Training may go on at once."""
    import torch.distributed.checkpoint as dcp

    global _async_group
    began = time.perf_counter()
    if group_initialized() and _async_group is None:  # once per process, by every rank together
        _async_group = torch.distributed.new_group(backend="gloo")
    future = dcp.async_save(
        state_dict(accelerator, model, optimizer),
        checkpoint_id=str(path),
        process_group=_async_group,
        no_dist=not group_initialized(),
    )
    staged = getattr(future, "staging_completion", None)
    if staged is not None:
        staged.result()
    return PendingSave(future, began, time.perf_counter() - began)


def load(path: Path, accelerator, model, optimizer) -> None:
    """Read the state in ``path`` into ``model`` and ``optimizer`` as they are sharded now (any number of processes;
    one process without a process group too)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict

    module, optim = unwrapped(accelerator, model, optimizer)
    state = state_dict(accelerator, model, optimizer)  # the shapes and shards to read into
    dcp.load(state, checkpoint_id=str(path), no_dist=not group_initialized())
    set_state_dict(
        module, optim, model_state_dict=state["model"], optim_state_dict=state["optim"], options=_options(load=True)
    )


def is_dcp_state(path: Path) -> bool:
    return (Path(path) / DCP_DIR / ".metadata").is_file()


def saved_on(path: Path) -> Optional[int]:
    """How many ``.distcp`` files (processes) wrote the state in ``path``."""
    folder = Path(path) / DCP_DIR
    return len(list(folder.glob("*.distcp"))) if folder.is_dir() else None
