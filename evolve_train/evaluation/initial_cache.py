"""Share the evaluation of checkpoint ``initial`` (the model before step 0) across the runs of a sweep.

The runs of a sweep that share step 0 (the same step-0 cache key: data, model, seed, tokenizer, step-0 training
settings, processes, device, versions: ``training/step0_cache.py``) start from the same model. With the same
``eval`` settings, the same eval sets and corpora and the same evaluation code, their ``initial`` rows are the
same, so the first run to evaluate ``initial`` stores its rows and ``predictions/step_-1/`` under
``<step-0 cache root>/initial-<key>/`` and the later runs copy them instead of evaluating again (for a
pretrained model asked open-book at every step's store, minutes per arm). Copied rows carry
``from_eval_cache: true`` and keep the seconds, tokens and FLOPs of the evaluation that made them.

The key adds to the step-0 key the ``eval`` settings (:func:`eval_part`), a fingerprint of the timeline (every step's corpus and
held-out slice, every eval set, the prompt template, the few-shot demonstrations) and of the evaluation code
(the source of ``evolve_train/evaluation`` and ``evolve_train/models``), so an edited evaluator is a miss; with
``lm_eval`` listed, also the files under ``eval.lm_eval.include_path`` and lm-eval's version. Off
where the step-0 cache is off. With several processes (``accelerate launch``, a point of a multi-process sweep)
the main process decides hit or miss, reads the entry and copies the predictions; the others receive the rows
from it (one broadcast), so every rank takes the same branch; the main process stores. The number of processes
and the distributed type are in the key (the step-0 part), as for step 0.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from functools import lru_cache
from pathlib import Path
from typing import Optional

from evolve_train.config_keys import INITIAL_EVAL_LEAVES_OUT, key_part
from evolve_train.data.corpus import records_fingerprint, step_fingerprint
from evolve_train.evaluation.evaluators.harness import tasks_fingerprint
from evolve_train.training.step0_cache import cache_root, step0_key
from evolve_train.utils.io import AlreadyPublished, atomic_dir

log = logging.getLogger(__name__)

ROWS = "rows.json"
PREDICTIONS = Path("predictions") / "step_-1"
FLAG = "from_eval_cache"


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """SHA-256 of the evaluation code: every ``.py`` file under ``evolve_train/evaluation`` and ``/models``."""
    package = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for folder in ("evaluation", "models"):
        for path in sorted((package / folder).rglob("*.py")):
            digest.update(str(path.relative_to(package)).encode("utf-8"))
            digest.update(path.read_bytes())
    return digest.hexdigest()


def eval_part(eval_cfg) -> dict:
    """The ``eval`` settings the key hashes: the section without its runtime fields, but for those marked
    ``hashed`` in ``evolve_train/config.py`` (``eval.batch_size``, ``eval.oracle_run``, ``eval.gate``,
    ``eval.grad_norms``), which the key has hashed from the start: today every ``eval`` field."""
    return key_part(eval_cfg, INITIAL_EVAL_LEAVES_OUT)


def timeline_fingerprint(timeline) -> str:
    """SHA-256 of what an evaluation of ``timeline`` reads: corpora (retrieval stores), slices, sets, prompts."""
    parts = {
        "steps": [[step.name, step_fingerprint(step), records_fingerprint(step.heldout)] for step in timeline.steps],
        "sets": [[s.name, s.kind, s.step, records_fingerprint(s.items)] for s in timeline.eval_sets],
        "prompt_template": timeline.prompt_template,
        "few_shot": timeline.few_shot,
        "demonstrations": records_fingerprint(timeline.demonstrations),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode("utf-8")).hexdigest()


class InitialEvalCache:
    """One entry: ``<root>/initial-<key>/`` holds ``rows.json`` and the ``predictions/step_-1/`` tree."""

    def __init__(self, root: Path, key: str):
        self.path = Path(root) / f"initial-{key}"

    @classmethod
    def for_run(cls, cfg, tokenizer, timeline, num_processes: int) -> Optional["InitialEvalCache"]:
        """The entry of this run's ``initial`` evaluation, or ``None`` where sharing is off."""
        root = cache_root(cfg)
        if root is None:
            return None
        parts = {
            "step0": step0_key(cfg, tokenizer, num_processes, timeline.steps[0]),
            "eval": eval_part(cfg.eval),
            "timeline": timeline_fingerprint(timeline),
            "code": code_fingerprint(),
        }
        if "lm_eval" in cfg.eval.evaluators:  # the local task files and lm-eval's version (evaluators/harness.py)
            parts["lm_eval"] = tasks_fingerprint(cfg.eval.lm_eval)
        blob = json.dumps(parts, sort_keys=True, default=str)
        return cls(root, hashlib.sha256(blob.encode("utf-8")).hexdigest()[:20])

    def load(self, run_dir: Path, accelerator=None) -> Optional[dict]:
        """``{"rows", "seconds", "evaluated", "evaluated_by"}`` with the predictions copied into ``run_dir``, or
        ``None`` on a miss. With several processes (``accelerator``) every process must call it: the main process
        reads and copies, the others receive what it read."""
        if accelerator is None or accelerator.num_processes == 1:
            return self._read(run_dir)
        from accelerate.utils import broadcast_object_list

        shared = [self._read(run_dir) if accelerator.is_main_process else None]
        broadcast_object_list(shared)  # every rank takes the main process's branch, with its rows
        return shared[0]

    def _read(self, run_dir: Path) -> Optional[dict]:
        if not (self.path / ROWS).is_file():
            return None
        stored = json.loads((self.path / ROWS).read_text(encoding="utf-8"))
        target = Path(run_dir) / PREDICTIONS
        shutil.rmtree(target, ignore_errors=True)
        if (self.path / PREDICTIONS).is_dir():
            shutil.copytree(self.path / PREDICTIONS, target)
        for row in stored["rows"]:
            row[FLAG] = True
        log.info(
            "checkpoint initial: rows and predictions copied from %s (evaluated by %s); not evaluating it again",
            self.path,
            stored.get("evaluated_by"),
        )
        return stored

    def store(self, run_dir: Path, rows: list[dict], seconds: float, evaluated: dict) -> None:
        """Write the entry atomically (a no-op when another run stored it first)."""
        if (self.path / ROWS).is_file():
            return
        source = Path(run_dir) / PREDICTIONS
        try:
            with atomic_dir(self.path, replace=False) as tmp:
                if source.is_dir():
                    shutil.copytree(source, tmp / PREDICTIONS)
                record = {"rows": rows, "seconds": seconds, "evaluated": evaluated, "evaluated_by": str(run_dir)}
                (tmp / ROWS).write_text(json.dumps(record, default=str) + "\n", encoding="utf-8")
        except AlreadyPublished:  # another run won the race: its entry is the same evaluation
            pass
