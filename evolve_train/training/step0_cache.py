"""Share the step-0 checkpoint across the runs of a sweep: step 0 is trained once.

Step 0 is method-independent (``Method.at_step``), so every run of a sweep that agrees on data, model,
seed, tokenizer and step-0 training settings trains exactly the same step 0. The first run to finish
it stores the weights under ``<cache root>/<key>/`` (written to a temporary name and renamed, so a
parallel job never sees half a checkpoint; if two jobs race, the first rename wins and the other
simply keeps its own identical result); the later runs load them instead of training.

The key is a SHA-256 of everything step 0 depends on (:func:`step0_key`): ``data``, ``model`` and the
``trainer`` settings that shape step 0 (each section without its fields marked ``runtime``, ``later_steps``
or ``label`` in ``evolve_train/config.py``: ``data.cache_dir``, ``data.keep_history``,
:data:`TRAINER_FIELDS_NOT_IN_KEY`), the content of step 0's training corpus (when the run passes it),
``seed``, ``method.at_step0`` (and, were it true, the method's settings), the tokenizer, the number of
processes, the device type and distributed type, and the package/torch/transformers/accelerate versions.
``trainer.mixed_precision=auto`` enters it as the precision it resolved to on this machine, so an ``auto`` run
shares step 0 with the runs that set that precision, and a bf16 machine's entry is never an fp32 machine's.
With ``method.at_step0=true`` step 0 depends on the method, and the cache is off.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from pathlib import Path
from typing import Callable, Optional

from evolve_train.config import DataConfig, TrainerConfig
from evolve_train.config_keys import STEP0_LEAVES_OUT, key_part, keys_where
from evolve_train.utils.io import AlreadyPublished, atomic_dir

log = logging.getLogger(__name__)

TRAINER_FIELDS_NOT_IN_KEY = keys_where(TrainerConfig, *STEP0_LEAVES_OUT, deep=False)
"""The ``trainer`` fields step 0 does not depend on: the runtime ones and those of the later steps only
(``epochs``, and ``rewarm``, ``peak_schedule``, ``optimizer_state``: step 0 always warms up, peaks at 1 and
starts a fresh AdamW)."""
DATA_FIELDS_NOT_IN_KEY = keys_where(DataConfig, *STEP0_LEAVES_OUT, deep=False)
"""``data.cache_dir`` (where, not what) and ``data.keep_history`` (step 0's corpus is the same with or
without the earlier steps kept)."""
META = "step0_meta.json"


def cache_root(cfg) -> Optional[Path]:
    """Where this run's step-0 cache lives (``None``: caching off). See ``method.step0_cache``."""
    setting = cfg.method.step0_cache
    if cfg.method.at_step0 or setting is None or str(setting).lower() in ("null", "none", "off", "false", ""):
        return None
    if setting != "auto":
        return Path(setting)
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
        return Path(HydraConfig.get().sweep.dir) / ".step0_cache"
    return None


def tokenizer_fingerprint(tokenizer) -> str:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    text = backend.to_str() if backend is not None else json.dumps(sorted(tokenizer.get_vocab().items()))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def step0_corpus_fingerprint(step) -> str:
    """SHA-256 of a time step's training corpus (its masked-entity pairs and plain-text documents)."""
    blob = json.dumps({"pairs": step.pairs, "texts": step.texts}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def accelerate_runtime() -> dict:
    """Device type and distributed type of the Accelerator this process created (``unset`` before one)."""
    from accelerate.state import AcceleratorState, is_initialized

    if not is_initialized():
        return {"device": "unset", "distributed_type": "unset"}
    state = AcceleratorState()
    return {"device": state.device.type, "distributed_type": str(state.distributed_type)}


def _method_part(method) -> dict:
    if not method.at_step0:  # step 0 is plain full training whatever the method (Method.at_step)
        return {"at_step0": False}
    return key_part(method, STEP0_LEAVES_OUT)  # without its label (name) and the cache's location


def step0_key(cfg, tokenizer, num_processes: int, step0=None, runtime: Optional[dict] = None) -> str:
    """The cache key of ``cfg``'s step 0; ``step0``: its :class:`TimeStep` (its corpus is hashed, so data
    changed in place under ``data.root`` is a miss); ``runtime``: device/distributed type (default: this
    process's Accelerator, :func:`accelerate_runtime`)."""
    parts = step0_parts(cfg, tokenizer, num_processes, step0, runtime)
    blob = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:20]


def step0_parts(cfg, tokenizer, num_processes: int, step0=None, runtime: Optional[dict] = None) -> dict:
    """What :func:`step0_key` hashes (arguments as there)."""
    import accelerate
    import torch
    import transformers

    import evolve_train

    data = key_part(cfg.data, STEP0_LEAVES_OUT)
    trainer = key_part(cfg.trainer, STEP0_LEAVES_OUT)
    if str(trainer.get("mixed_precision")) == "auto":  # what it trains in here (training/distributed.py)
        from evolve_train.training.distributed import resolved_precision

        trainer["mixed_precision"] = resolved_precision(cfg.trainer)
    step0_schedule = trainer.pop("step0_schedule", None)
    if step0_schedule is not None:  # step 0 runs this shape whatever trainer.schedule says (training/schedule.py)
        trainer["schedule"] = step0_schedule
    parts = {
        "data": data,
        "model": key_part(cfg.model, STEP0_LEAVES_OUT),
        "seed": cfg.seed,
        "trainer": trainer,
        "method": _method_part(cfg.method),
        "num_processes": num_processes,
        "runtime": runtime if runtime is not None else accelerate_runtime(),
        "tokenizer": tokenizer_fingerprint(tokenizer),
        "corpus": step0_corpus_fingerprint(step0) if step0 is not None else None,
        "versions": [evolve_train.__version__, torch.__version__, transformers.__version__, accelerate.__version__],
    }
    return parts


class Step0Cache:
    """One cache entry: ``<root>/<key>/`` holds the step-0 model (HF format) and ``step0_meta.json``."""

    def __init__(self, root: Path, key: str):
        self.root, self.key = Path(root), key
        self.path = self.root / key
        self.train_rows: list[dict] = []

    @classmethod
    def for_run(cls, cfg, tokenizer, num_processes: int, step0=None) -> Optional["Step0Cache"]:
        """The entry of this run's step 0 (``step0``: its TimeStep, whose corpus is part of the key), or
        ``None`` when caching is off."""
        root = cache_root(cfg)
        return None if root is None else cls(root, step0_key(cfg, tokenizer, num_processes, step0))

    def exists(self) -> bool:
        return (self.path / META).exists()

    def recording(self, log_fn: Optional[Callable]) -> Callable:
        """Wrap the training-row logger so the rows are stored with the checkpoint (and replayed on a hit)."""

        def record(row: dict) -> None:
            self.train_rows.append(dict(row))
            if log_fn is not None:
                log_fn(row)

        return record

    def load(self, model_cfg, accelerator, log_fn: Optional[Callable] = None):
        """``(model, StepResult)`` from the cache, or ``None`` on a miss (decided once, on the main process)."""
        from accelerate.utils import broadcast_object_list

        from evolve_train.models.build import load_model
        from evolve_train.training.loop import StepResult

        hit = [self.exists()]
        if accelerator.num_processes > 1:
            broadcast_object_list(hit)  # every rank must take the same branch
        if not hit[0]:
            return None
        meta = json.loads((self.path / META).read_text(encoding="utf-8"))
        model = load_model(str(self.path), model_cfg, device=accelerator.device)
        for row in meta.get("train_rows", []):
            if log_fn is not None:
                log_fn({**row, "from_step0_cache": True})
        log.info(
            "step 0: loaded from the step-0 cache %s (trained by %s); not training it again",
            self.path,
            meta.get("trained_by"),
        )
        return model, StepResult(**meta["result"])

    def store(self, model, tokenizer, result, trained_by: str) -> Optional[Path]:
        """Write the entry atomically; a no-op when another run stored it first."""
        if self.exists():
            return None
        try:
            with atomic_dir(self.path, replace=False) as tmp:
                model.save_pretrained(tmp, safe_serialization=True)
                tokenizer.save_pretrained(tmp)
                meta = {
                    "key": self.key,
                    "trained_by": trained_by,
                    "result": dataclasses.asdict(result),
                    "train_rows": self.train_rows,
                }
                (tmp / META).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        except AlreadyPublished:  # another run won the race: its entry is the same step 0
            return None
        log.info("step 0: stored in the step-0 cache %s", self.path)
        return self.path
