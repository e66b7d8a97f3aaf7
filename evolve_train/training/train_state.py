"""Mid-step training states: resume inside a time step, after a kill, a crash or a Ctrl-C.

With ``trainer.save_every_n_steps=N`` the loop saves, every N optimizer steps of a time step (and at its
last one), everything the rest of the step depends on, under ``<run_dir>/train_state/step<k>-opt<n>/``:

- ``model.safetensors``   the *trainable* parameters (every weight for ``full``, the adapter for ``lora``);
                          the frozen ones are rebuilt exactly by re-running the step's setup (load
                          ``steps/<k-1>``, ``method.mix_examples``, ``method.prepare_model``, same seeds);
- ``tensors.safetensors`` the tensors of the optimizer state (AdamW moments, step counts) and the torch
                          RNG states (CPU, CUDA);
- ``train_state.json``    written last: the scheduler state, the optimizer's param groups, the Python and
                          NumPy RNG states, the data position (epoch, index of the next batch of the
                          deterministic ``LengthGroupedBatches.epoch(e)`` order), the counters, the
                          step's training-log rows so far, ``Method.state_dict()``, a fingerprint of the
                          step's plan (batch size, rows, planned steps...) and the size of every file.

Under FSDP2 ``model.safetensors`` and the optimizer's tensors give way to ``dcp/``: the trainable parameters and
the AdamW state through ``torch.distributed.checkpoint`` (``training/dcp_state.py``), one ``__<rank>_0.distcp``
file per process and the ``.metadata``, nothing gathered; the scheduler goes to the JSON. With
``trainer.async_save`` (on by default) a due state is staged (a CPU copy) and written in the background; it is
renamed complete only once every process's file is written (:meth:`StepStates.poll` at the next optimizer step,
or :meth:`StepStates.wait` before the next save, at the end of the step and before a signal's stop). DeepSpeed
saves through ``accelerator.save_state`` (``accelerate/``). ``trainer.save_every_minutes`` adds a state once that
much training time passed since the last, read where the processes agree anyway (the same gather as a signal).

No pickle: tensors go to safetensors, the rest to JSON. A state is written into ``.step<k>-opt<n>.tmp-<pid>``
and renamed when complete (files fsynced first); the last ``trainer.keep_last_states`` of the step are
kept, and a step's states are deleted once the step is checkpointed and evaluated. On resume
(``resume=auto``) the step being resumed restarts from its newest complete state whose fingerprint
matches; a state dir with missing or short files, or a different plan, is ignored with a warning naming it.

Ctrl-C (SIGINT) and SIGTERM (what SLURM and most schedulers send before they kill a preempted or timed-out
job) inside the loop are deferred to the end of the optimizer step in progress: a state is saved there
(whatever ``save_every_n_steps``) and :class:`TrainingInterrupted` is raised; the run exits with 128 + the
signal's number (130 for Ctrl-C, 143 for SIGTERM) and the same command resumes. A second signal (more than
``signals.REPEAT_WINDOW_S`` after the first; the same signal arriving twice at once counts once) stops at once.
With several processes the ranks agree at the loop's logging steps (every ``trainer.log_every`` updates), at
every due state and at the end of the step (one gather of an integer each): a signal that reached any rank
makes every rank save (the main process writes) and stop at the same step. A run stopped by a
signal outside training (checkpoint, evaluation, sampling) stops at the next boundary (``run.py``).

A state records the number of processes that saved it. A resume on another number of processes (a requeue onto
fewer or more GPUs) continues it when the global micro-batch (processes x ``trainer.batch_size``),
``grad_accum`` and the order of the global batches (a digest in the fingerprint) are the same
(:func:`why_not_continued`): every optimizer step then trains the same rows, and DCP reshards the model and
optimizer (a DDP or one-process state is whole anyway); the per-process token counters are rescaled. Otherwise,
or for a DeepSpeed state, the step restarts from the previous step's checkpoint with a warning naming both
numbers and why.

This module holds the state dirs and :class:`StepStates`; the pieces they are made of live apart: the
tensors-and-JSON encoding in ``training/tensor_json.py``, the RNG states in ``training/rng.py``, the deferred
signals in ``training/signals.py`` and the atomic write in ``utils/io.py`` (``split_tensors``,
``join_tensors``, ``rng_state`` and ``set_rng_state`` are importable from here too).
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from evolve_train.training import dcp_state, faults
from evolve_train.training.collectives import agreed_signal, agreed_signal_and_flag, set_collective_timeout
from evolve_train.training.rng import rng_state, set_rng_state
from evolve_train.training.signals import REPEAT_WINDOW_S, SIGNAL_NAMES, DeferredSignals
from evolve_train.training.tensor_json import join_tensors, split_tensors
from evolve_train.utils.io import discard, publish, remove_stale_tmp, tmp_path

log = logging.getLogger(__name__)

STATE_DIR = "train_state"
MANIFEST = "train_state.json"
MODEL_FILE = "model.safetensors"
TENSORS_FILE = "tensors.safetensors"
ACCELERATE_DIR = "accelerate"
DCP_DIR = dcp_state.DCP_DIR
NAME = re.compile(r"^step(\d+)-opt(\d+)$")
FORMAT = 2
PER_PROCESS = ("batch_size", "num_processes")
"""Fingerprint entries that may differ between the run that saved a state and one that continues it, as long as
their product (the global micro-batch) and the batch order are the same (:func:`portable`)."""


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM during training: a resumable state was saved (the message says where)."""

    def __init__(self, message: str, signum: int = signal.SIGINT):
        super().__init__(message)
        self.signum = int(signum)

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


@dataclass
class Progress:
    """Where the loop stands inside a time step (what it needs to continue exactly)."""

    epoch: int = 0
    next_batch: int = 0
    """Index, in ``epoch``'s batch order, of the next batch to train on."""
    optimizer_steps: int = 0
    micro: int = 0
    tokens: int = 0
    """Tokens seen by this process (the loop reports ``tokens * num_processes``)."""
    loss_tokens: int = 0
    """Of those, the positions with a label (the loss tokens; docs/metrics.md#11-compute)."""
    skipped: int = 0
    """Micro-batches skipped for a non-finite loss or gradient (``trainer.nonfinite=skip``)."""
    last_loss: float = float("nan")
    rows: list[dict] = field(default_factory=list)
    """The step's training-log rows so far (logged again on resume, so logs match an uninterrupted run)."""


def state_root(run_dir: Path) -> Path:
    return Path(run_dir) / STATE_DIR


def state_name(step: int, optimizer_step: int) -> str:
    return f"step{step}-opt{optimizer_step}"


def list_states(run_dir: Path) -> list[tuple[int, int, Path]]:
    """``(step, optimizer_step, path)`` of every state dir with a final name, oldest first (not validated)."""
    root = state_root(run_dir)
    found = []
    for path in root.iterdir() if root.is_dir() else []:
        match = NAME.match(path.name)
        if match and path.is_dir():
            found.append((int(match.group(1)), int(match.group(2)), path))
    return sorted(found)


def check_complete(path: Path) -> Optional[str]:
    """``None`` if ``path`` holds a complete state, else why not."""
    manifest = path / MANIFEST
    if not manifest.is_file():
        return f"no {MANIFEST} (written last)"
    try:
        meta = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        return f"unreadable {MANIFEST}: {error}"
    for name, size in meta.get("files", {}).items():
        file = path / name
        if not file.is_file():
            return f"missing {name}"
        if file.stat().st_size != size:
            return f"{name} has {file.stat().st_size} bytes, {size} expected"
    return None


def prune_states(run_dir: Path, through_step: int) -> None:
    """Delete the states of steps up to ``through_step`` (checkpointed and evaluated: never resumed again)."""
    for step, _, path in list_states(run_dir):
        if step <= through_step:
            shutil.rmtree(path, ignore_errors=True)


def remove_incomplete(run_dir: Path) -> list[Path]:
    """Delete leftovers of interrupted state writes (``.step<k>-opt<n>.tmp-<pid>``); returns them."""
    return remove_stale_tmp(state_root(run_dir))


def _sharded(accelerator) -> bool:
    from evolve_train.training.distributed import is_sharded

    return is_sharded(accelerator)


def _fsdp2(accelerator) -> bool:
    from evolve_train.training.distributed import is_fsdp2

    return is_fsdp2(accelerator)


def portable(fingerprint: dict) -> dict:
    """``fingerprint`` with the per-process batch size and the number of processes replaced by the global
    micro-batch (their product): what must match for a state to continue on another number of processes."""
    kept = {k: v for k, v in fingerprint.items() if k not in PER_PROCESS}
    kept["global_batch"] = int(fingerprint.get("batch_size") or 0) * int(fingerprint.get("num_processes") or 0)
    return kept


def why_not_continued(path: Path, saved: dict, current: dict) -> Optional[str]:
    """``None`` when the state in ``path``, saved with the fingerprint ``saved`` by another number of processes,
    continues exactly in a run with the fingerprint ``current``; else why not."""
    if (path / ACCELERATE_DIR).is_dir():
        return "its sharded state (accelerate's save_state: DeepSpeed) is laid out for the processes that saved it"
    a, b = portable(saved), portable(current)
    if a["global_batch"] != b["global_batch"]:
        return (
            f"the global batch differs ({saved.get('num_processes')} x {saved.get('batch_size')} rows then, "
            f"{current.get('num_processes')} x {current.get('batch_size')} now; set trainer.batch_size so that "
            "batch_size x processes is the same)"
        )
    if a != b:
        changed = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
        return f"the step's plan differs ({', '.join(changed)})"
    return None


class StepStates:
    """The mid-step states of one time step. Use as a context manager around ``train_time_step``
    (it defers Ctrl-C while inside) and pass it as ``states=``."""

    def __init__(
        self,
        run_dir: Path,
        step: int,
        every: int,
        keep: int,
        accelerator,
        method=None,
        resume: bool = True,
        signals: Optional[DeferredSignals] = None,
        timeout_s: tuple[float, float] = (0, 0),
        async_save: bool = False,
        every_minutes: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.run_dir, self.step = Path(run_dir), step
        self.every, self.keep = max(0, int(every)), max(1, int(keep))
        self.accelerator, self.method, self.resume = accelerator, method, resume
        self.root = state_root(self.run_dir)
        self.fingerprint: dict = {}
        self.rows: list[dict] = []
        self.saved: Optional[Path] = None
        self.own_signals = signals is None  # else the run's, installed for the whole run
        self.signals = DeferredSignals(notify=self._on_signal) if signals is None else signals
        self.timeout_s = timeout_s
        """The process group's timeouts outside and inside training (``trainer.dist_timeout_s``,
        ``trainer.train_timeout_s``): a save runs under the first (``training/collectives.py``)."""
        self._log_fn: Optional[Callable] = None
        self.async_save = async_save
        """FSDP2: write due states in the background (``trainer.async_save``; :meth:`save`)."""
        self.pending: Optional[tuple] = None
        """The state being written in the background: (write, tmp dir, final dir, manifest)."""
        self.every_s = max(0.0, float(every_minutes)) * 60.0
        """``trainer.save_every_minutes`` in seconds (0 = off): a state once this long passed since the step's
        training began or its last state, at the next point where the processes agree anyway."""
        self.clock = clock
        self.since = clock()

    # -- Ctrl-C and SIGTERM -------------------------------------------------------------------------
    @property
    def interrupt_requested(self) -> Optional[int]:
        """The deferred signal's number, once one arrived."""
        return self.signals.received

    def agreed_interrupt(self) -> Optional[int]:
        """The deferred signal as every process sees it: this process's alone, or with several processes the
        largest number any of them received (a collective: every process calls it at the same point)."""
        return agreed_signal(self.signals.received, self.accelerator)

    def __enter__(self) -> "StepStates":
        if self.own_signals:
            self.signals.install()
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        if self.own_signals:
            self.signals.restore()
        if exc_type is not None:  # an error: no collective (the other processes may not be here)
            return
        self.wait()  # the step's last state is complete before its checkpoint
        interrupted = self.agreed_interrupt()
        if interrupted:  # the signal came after the step's last update
            raise TrainingInterrupted(
                f"interrupted ({SIGNAL_NAMES[interrupted]}) at the end of time "
                f"step {self.step}, before its checkpoint; it resumes from "
                f"{self.last_good()}. Run the same command again to resume.",
                interrupted,
            )

    def _on_signal(self, signum: int) -> None:
        log.warning(
            "%s: saving a resumable state at the end of this optimizer step (a second signal, more than "
            "%.0f s later, stops at once, losing the step's progress since the last saved state)",
            SIGNAL_NAMES[signum],
            REPEAT_WINDOW_S,
        )

    # -- the loop's hooks -------------------------------------------------------------------------
    def begin(self, model, optimizer, scheduler, log_fn, **fingerprint) -> tuple[Progress, Optional[Callable]]:
        """Restore the newest matching state of this step (if any); returns the progress to continue from
        and ``log_fn`` wrapped to record the step's rows. Rows of the restored state are logged again."""
        self.fingerprint = {
            "format": FORMAT,
            "step": self.step,
            "num_processes": self.accelerator.num_processes,
            **fingerprint,
        }
        self._log_fn = log_fn
        progress = self._restore(model, optimizer, scheduler) if self.resume else None
        self.since = self.clock()  # the clock of save_every_minutes counts training time from here
        progress = progress or Progress()
        for row in progress.rows:
            if log_fn is not None:
                log_fn(dict(row))
        self.rows = [dict(r) for r in progress.rows]

        def record(row: dict) -> None:
            self.rows.append(dict(row))
            if log_fn is not None:
                log_fn(row)

        return progress, record

    def due(self, optimizer_steps: int, total: int) -> bool:
        return self.every > 0 and (optimizer_steps % self.every == 0 or optimizer_steps >= total)

    def after_optimizer_step(
        self,
        optimizer_steps: int,
        total: int,
        progress: Callable[[], Progress],
        model,
        optimizer,
        scheduler,
        check: Optional[Callable[[], None]] = None,
        agree: bool = True,
    ) -> None:
        """Save a state when due or when Ctrl-C was pressed (then raise :class:`TrainingInterrupted`).
        ``check`` (the non-finite guard) runs first: a state is never saved after a non-finite update. A state is
        also due once ``trainer.save_every_minutes`` passed since the last one (read where the ranks agree).
        ``agree``: with several processes, whether the ranks agree on a signal at this step (a gather and a
        host sync; the loop asks at its logging steps, and a due state always agrees); a single process reads
        its own signal at every step."""
        single = self.accelerator is None or self.accelerator.num_processes == 1
        self.poll()
        due = self.due(optimizer_steps, total)
        interrupted, timed = None, False
        if single or agree or due:  # the clock is read where the processes agree on a signal anyway
            late = self.every_s > 0 and self.clock() - self.since >= self.every_s
            interrupted, timed = agreed_signal_and_flag(self.signals.received, late, self.accelerator)
        if due or timed or interrupted:
            if check is not None:
                check()
            current = progress()
            current.rows = [dict(r) for r in self.rows]
            # in the background unless the run stops here (then at once, after the one in flight)
            self.save(current, model, optimizer, scheduler, background=self.async_save and not interrupted)
            self.since = self.clock()
            if self.pending is not None:
                faults.point("train_state_async")
        if interrupted:
            raise TrainingInterrupted(
                f"interrupted ({SIGNAL_NAMES[interrupted]}) in time step {self.step} after optimizer step "
                f"{optimizer_steps} of {total}; resumable state saved to {self.saved}. Run the same command "
                "again to resume.",
                interrupted,
            )

    def last_good(self) -> str:
        """The newest saved point a rerun resumes from (for error messages)."""
        previous = (
            f"{self.run_dir / 'steps' / str(self.step - 1)} (the checkpoint of step {self.step - 1})"
            if self.step > 0
            else "none (step 0 starts from scratch)"
        )
        if self.saved is not None:
            return f"{self.saved} (mid-step state of step {self.step}); before it {previous}"
        return previous

    # -- save / restore -------------------------------------------------------------------------
    def save(self, progress: Progress, model, optimizer, scheduler, background: bool = False) -> Path:
        """Write a state; ``background`` (FSDP2 with ``trainer.async_save``): stage a CPU copy of the model and
        optimizer and return while DCP writes it; the state is renamed complete by :meth:`wait` (or the first
        optimizer step after the write ended: :meth:`poll`)."""
        accelerator = self.accelerator
        main = accelerator.is_main_process
        self.wait()  # a state written in the background is complete (renamed) before the next one begins
        set_collective_timeout(self.timeout_s[0])  # the others wait while the main process writes
        name = state_name(self.step, progress.optimizer_steps)
        final = self.root / name
        tmp = tmp_path(final)
        sharded, fsdp2 = _sharded(accelerator), _fsdp2(accelerator)
        background = background and fsdp2
        if sharded and accelerator.num_processes > 1:  # every rank writes into the main process's tmp dir
            from accelerate.utils import broadcast_object_list

            shared = [str(tmp)]
            broadcast_object_list(shared)
            tmp = Path(shared[0])
        pending, meta = None, None
        try:
            if main:
                discard(tmp)
                tmp.mkdir(parents=True)
            if sharded:
                accelerator.wait_for_everyone()
                if fsdp2 and background:
                    pending = dcp_state.start_async_save(tmp / DCP_DIR, accelerator, model, optimizer)
                elif fsdp2:
                    dcp_state.save(tmp / DCP_DIR, accelerator, model, optimizer)
                else:
                    accelerator.save_state(str(tmp / ACCELERATE_DIR), safe_serialization=True)
                accelerator.wait_for_everyone()
            if main:
                meta = self._write(tmp, progress, model, optimizer, scheduler, sharded, fsdp2)
                if pending is None:
                    self._finish(tmp, final, meta)
        except BaseException as error:
            if main:
                discard(tmp)
            raise self._failed(final, error) from error
        set_collective_timeout(self.timeout_s[1])  # saves come after an optimizer step: training's timeout
        if pending is not None:
            self.pending = (pending, tmp, final, meta)
            log.info("writing training state %s in the background (staged in %.2f s)", final, pending.staged_s)
            return final
        if accelerator.num_processes > 1:
            accelerator.wait_for_everyone()
        self.saved = final
        log.info("saved training state %s", final)
        return final

    def _failed(self, final: Path, error: BaseException) -> BaseException:
        if isinstance(error, OSError):
            return OSError(
                error.errno,
                f"could not write the training state {final} ({error}); nothing "
                f"half-written was left. Last good: {self.last_good()}",
            )
        return error

    def _finish(self, tmp: Path, final: Path, meta: dict) -> None:
        """The main process, once every process's files are written: sizes, the manifest, the rename."""
        meta["files"] = {str(p.relative_to(tmp)): p.stat().st_size for p in sorted(tmp.rglob("*")) if p.is_file()}
        (tmp / MANIFEST).write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
        faults.point("train_state_write")
        publish(tmp, final)  # fsynced; replaces the state of an earlier attempt that reached this point
        self._prune_own()

    def wait(self) -> None:
        """Block until the state being written in the background (if any) is written, then rename it complete
        (the main process). Called before the next save and at the end of the time step (before its checkpoint)."""
        if self.pending is None:
            return
        pending, tmp, final, meta = self.pending
        self.pending = None
        main = self.accelerator.is_main_process
        try:
            seconds = pending.wait()  # the main process's future ends after every rank's files and the metadata
            if main:
                self._finish(tmp, final, meta)
        except BaseException as error:
            if main:
                discard(tmp)
            raise self._failed(final, error) from error
        self.saved = final
        log.info("saved training state %s (written in the background in %.2f s)", final, seconds)

    def poll(self) -> None:
        """Rename the state written in the background once its write ended (no collective, no wait)."""
        if self.pending is not None and self.pending[0].done():
            self.wait()

    def _write(self, tmp: Path, progress: Progress, model, optimizer, scheduler, sharded: bool, fsdp2: bool) -> dict:
        """The main process's files (all but the manifest, which :meth:`_finish` writes); the manifest's content."""
        from safetensors.torch import save_file

        tensors: dict[str, torch.Tensor] = {}
        meta: dict[str, Any] = {"fingerprint": self.fingerprint, "progress": asdict(progress)}
        meta["rng"] = split_tensors(rng_state(), tensors, "rng")
        meta["method"] = split_tensors(self.method.state_dict() if self.method is not None else {}, tensors, "method")
        if not sharded:
            unwrapped = self.accelerator.unwrap_model(model)
            weights = {n: p.detach().cpu().contiguous() for n, p in unwrapped.named_parameters() if p.requires_grad}
            save_file(weights, str(tmp / MODEL_FILE), metadata={"format": "pt"})
            meta["optimizer"] = split_tensors(optimizer.state_dict(), tensors, "optimizer")
        if not sharded or fsdp2:
            meta["scheduler"] = split_tensors(scheduler.state_dict(), tensors, "scheduler")
        save_file(tensors, str(tmp / TENSORS_FILE))
        return meta

    def _prune_own(self) -> None:
        mine = [(opt, path) for step, opt, path in list_states(self.run_dir) if step == self.step]
        for _, path in mine[: -self.keep]:
            shutil.rmtree(path, ignore_errors=True)

    def _restore(self, model, optimizer, scheduler) -> Optional[Progress]:
        mine = [(opt, path) for step, opt, path in list_states(self.run_dir) if step == self.step]
        for _, path in reversed(mine):  # newest first
            problem = check_complete(path)
            meta = None
            if problem is None:
                meta = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
                saved = meta.get("fingerprint") or {}
                saved_by = saved.get("num_processes")
                if saved_by != self.fingerprint["num_processes"]:
                    why = why_not_continued(path, saved, self.fingerprint)
                    if why is not None:
                        log.warning(
                            "the training state %s was saved by %s processes and this run has %d: it cannot continue "
                            "here (%s), so time step %d restarts from %s",
                            path,
                            saved_by,
                            self.fingerprint["num_processes"],
                            why,
                            self.step,
                            self.last_good(),
                        )
                        return None
                    log.warning(
                        "the training state %s was saved by %s processes and this run has %d: it continues here "
                        "(the same global batch of %d rows and the same batch order)",
                        path,
                        saved_by,
                        self.fingerprint["num_processes"],
                        portable(saved)["global_batch"],
                    )
                elif saved != self.fingerprint:
                    problem = (
                        f"it was saved for another plan of this step ({saved} != "
                        f"{self.fingerprint}; did the config change?)"
                    )
            if problem is None:
                try:
                    progress = self._load(path, meta, model, optimizer, scheduler)
                except Exception as error:  # noqa: BLE001  (a broken state must not block the resume)
                    problem = f"it could not be loaded: {error}"
                else:
                    self.saved = path
                    if saved_by != self.fingerprint["num_processes"]:  # the counters are this process's share
                        n = self.fingerprint["num_processes"]
                        progress.tokens = progress.tokens * saved_by // n
                        progress.loss_tokens = progress.loss_tokens * saved_by // n
                    log.info(
                        "resuming time step %d from the training state %s (optimizer step %d, epoch %d, batch %d)",
                        self.step,
                        path,
                        progress.optimizer_steps,
                        progress.epoch,
                        progress.next_batch,
                    )
                    return progress
            log.warning("ignoring the incomplete or unusable training state %s: %s", path, problem)
        return None

    def _load(self, path: Path, meta: dict, model, optimizer, scheduler) -> Progress:
        from safetensors.torch import load_file

        tensors = load_file(str(path / TENSORS_FILE))
        if dcp_state.is_dcp_state(path):  # any number of processes, sharded or not (DCP reshards)
            dcp_state.load(path / DCP_DIR, self.accelerator, model, optimizer)
            scheduler.load_state_dict(join_tensors(meta["scheduler"], tensors))
        elif (path / ACCELERATE_DIR).is_dir():
            self.accelerator.load_state(str(path / ACCELERATE_DIR))
        else:  # validate everything before touching the model
            weights = load_file(str(path / MODEL_FILE))
            unwrapped = self.accelerator.unwrap_model(model)
            params = {n: p for n, p in unwrapped.named_parameters() if p.requires_grad}
            if set(weights) != set(params):
                raise ValueError(
                    f"its trainable parameters differ from the model's ({len(weights)} vs {len(params)} tensors)"
                )
            for name, value in weights.items():
                if value.shape != params[name].shape:
                    raise ValueError(f"{name} has shape {tuple(value.shape)}, the model {tuple(params[name].shape)}")
            with torch.no_grad():
                for name, value in weights.items():
                    params[name].copy_(value.to(params[name].device, params[name].dtype))
            optimizer.load_state_dict(join_tensors(meta["optimizer"], tensors))
            scheduler.load_state_dict(join_tensors(meta["scheduler"], tensors))
        if self.method is not None:
            self.method.load_state_dict(join_tensors(meta["method"], tensors))
        set_rng_state(join_tensors(meta["rng"], tensors))
        return Progress(**join_tensors(meta["progress"], tensors))
