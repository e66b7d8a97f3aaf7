"""Per-step checkpoints in Hugging Face format, written atomically, and the run's progress state.

A checkpoint is written into ``steps/.<k>.tmp-<pid>`` (files fsynced; ``utils/io.py: atomic_dir``) and
renamed to ``steps/<k>`` only when complete, so a crash never leaves a half checkpoint under a real name; a
failed write (a full disk) removes its temporary dir before the error propagates. ``state.json`` (also replaced atomically) records which steps
are trained and which are evaluated; resume trusts it. Under FSDP / DeepSpeed the weights are gathered
(every process) and written by the main process as an ordinary safetensors directory
(:func:`gathered_state_dict`). :func:`preflight` checks, before step 0, that the run
dir is writable and that the disk can hold what the run will write.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from evolve_train.training import faults
from evolve_train.utils.io import atomic_dir, atomic_write_text
from evolve_train.utils.provenance import provenance
from evolve_train.utils.io import remove_stale_tmp as _remove_tmp

log = logging.getLogger(__name__)
MARGIN_BYTES = 16 * 2**20  # tokenizer, configs, metrics, predictions of a checkpoint (generous for small runs)


def step_dir(run_dir: Path, step: int) -> Path:
    return run_dir / "steps" / str(step)


def save_checkpoint(
    run_dir: Path, step: int, model, tokenizer, extra_files=None, state_dict=None, weights: bool = True
) -> Path:
    """Save model + tokenizer for ``step`` atomically; ``extra_files(dir)`` may add method files.

    ``state_dict``: the gathered full weights of a sharded (FSDP / DeepSpeed) model, see
    :func:`gathered_state_dict`; ``None`` saves ``model``'s own. ``weights=False``: only the model's
    ``config.json`` (``extra_files`` writes what rebuilds the weights: a LoRA adapter).
    """
    final = step_dir(run_dir, step)
    try:
        with atomic_dir(final) as tmp:  # replaces the checkpoint of an unfinished earlier attempt at this step
            if weights:
                model.save_pretrained(
                    tmp, safe_serialization=True, **({"state_dict": state_dict} if state_dict is not None else {})
                )
            else:
                model.config.save_pretrained(tmp)
            faults.point("checkpoint_write")
            tokenizer.save_pretrained(tmp)
            if extra_files is not None:
                extra_files(tmp)
    except BaseException as error:
        if isinstance(error, OSError):
            hint = " (the disk is full)" if error.errno == errno.ENOSPC else ""
            raise OSError(
                error.errno,
                f"could not write the checkpoint of step {step} under {final}{hint}: "
                f"{error}; no partial checkpoint was left. Free space and run the same "
                "command again to resume.",
            ) from error
        raise
    faults.point("checkpoint_saved")
    return final


def gathered_state_dict(accelerator, model):
    """Full weights of a model sharded by FSDP or DeepSpeed, gathered for the main process to save (a
    collective: every process must call it); ``None`` for a plain or DDP model (saved as it is).

    Under FSDP2 the run trains sharded and continues with a plain model (``training/distributed.py:
    train_sharded``): that one is saved as it is. A model still sharded (``FSDPModule``) is gathered with
    torch's ``get_model_state_dict`` (full, offloaded to the main process's CPU; the others get ``{}``)."""
    from accelerate.utils import DistributedType

    if accelerator.distributed_type not in (DistributedType.FSDP, DistributedType.DEEPSPEED):
        return None
    if getattr(accelerator, "is_fsdp2", False):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
        from torch.distributed.fsdp import FSDPModule

        if not any(isinstance(m, FSDPModule) for m in model.modules()):
            return None
        return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    wrapped = next((m for m in getattr(accelerator, "_models", []) if accelerator.unwrap_model(m) is model), model)
    return accelerator.get_state_dict(wrapped)


def remove_stale_tmp(run_dir: Path) -> list[Path]:
    """Delete leftovers of interrupted writes (checkpoints, training states, metrics and prediction
    files being replaced); returns what was removed."""
    run_dir = Path(run_dir)
    removed = []
    for folder in (run_dir / "steps", run_dir / "train_state", run_dir):
        removed.extend(_remove_tmp(folder))
    removed.extend(_remove_tmp(run_dir / "predictions", recursive=True))
    return removed


def estimate_bytes(model) -> tuple[int, int]:
    """(bytes of a checkpoint's weights, bytes of a mid-step training state: trainable weights + AdamW's
    two moments)."""
    seen, total, trainable = set(), 0, 0
    for parameter in model.parameters():
        key = parameter.data_ptr()
        if key in seen:  # tied weights are stored once
            continue
        seen.add(key)
        size = parameter.numel() * parameter.element_size()
        total += size
        if parameter.requires_grad:
            trainable += parameter.numel() * (parameter.element_size() + 2 * 4)
    return total, trainable


def ensure_writable(run_dir: Path) -> None:
    """Create the run dir and write (and fsync) a probe file in it; a clear error if that fails."""
    from evolve_train.errors import ConfigError

    run_dir = Path(run_dir)
    probe = run_dir / f".write-probe-{os.getpid()}"
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        with probe.open("wb") as handle:
            handle.write(b"0" * 4096)
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as error:
        raise ConfigError(
            f"the run dir {run_dir} is not writable ({error}); choose another run_dir / hydra.run.dir"
        ) from error
    finally:
        try:
            probe.unlink(missing_ok=True)
        except OSError:
            pass


def preflight(run_dir: Path, model, remaining_steps: int, save_every_n_steps: int, keep_last_states: int) -> None:
    """Before training: fail now if the disk cannot hold the next checkpoint (and its training states);
    warn if it cannot hold every checkpoint the run will write."""
    from evolve_train.errors import ConfigError

    run_dir = Path(run_dir)
    checkpoint, state = estimate_bytes(model)
    checkpoint += MARGIN_BYTES
    states = (keep_last_states + 1) * state if save_every_n_steps > 0 else 0  # +1: the one being written
    free = shutil.disk_usage(run_dir).free
    needed_next = checkpoint + states
    if free < needed_next:
        raise ConfigError(
            f"not enough free disk space under {run_dir}: {free / 2**20:.1f} MiB free, about "
            f"{needed_next / 2**20:.1f} MiB needed for the next checkpoint"
            f"{' and training states' if states else ''}; free space or choose another run dir"
        )
    needed_all = remaining_steps * checkpoint + states
    if free < needed_all:
        log.warning(
            "the disk under %s has %.1f MiB free; the %d remaining checkpoints need about %.1f MiB: "
            "the run will fail when the disk fills (it stops with a clear error and resumes after)",
            run_dir,
            free / 2**20,
            remaining_steps,
            needed_all / 2**20,
        )


@dataclass
class RunState:
    trained: list[int] = field(default_factory=list)
    """Steps whose checkpoint is complete."""
    evaluated: list[int] = field(default_factory=list)
    """Checkpoints whose metrics rows are all in metrics.jsonl."""
    method_state: dict = field(default_factory=dict)
    results: dict = field(default_factory=dict)
    """What training each trained step took (``StepResult`` fields by step): the rows of a step evaluated by a
    later attempt carry it."""
    hook_state: dict = field(default_factory=dict)
    """The run hooks' ``state_dict()`` by hook name (``training/hooks.py``), as of the last checkpoint."""
    identity: Optional[dict] = None
    """The run's result-affecting config and its fingerprint (training/identity.py); ``None`` in a run dir
    from before fingerprints."""
    provenance: Optional[dict] = None
    """Commit, versions, hardware and command of the process that last saved this state (utils/provenance.py)."""

    @classmethod
    def load(cls, run_dir: Path) -> "RunState":
        path = run_dir / "state.json"
        if not path.exists():
            return cls()
        return cls(**json.loads(path.read_text(encoding="utf-8")))

    def save(self, run_dir: Path) -> None:
        self.provenance = provenance()
        atomic_write_text(run_dir / "state.json", json.dumps(asdict(self), indent=2) + "\n")

    @property
    def last_complete(self) -> int:
        """Last step both trained and evaluated (-1 if none)."""
        done = set(self.trained) & set(self.evaluated)
        last = -1
        while last + 1 in done:
            last += 1
        return last
