"""``lm_eval``: lm-evaluation-harness tasks scored on every checkpoint (docs/evaluation.md "lm-eval tasks").

The model in memory is wrapped in lm-eval's ``HFLM`` with its tokenizer (a LoRA step is the model the run
evaluates: its adapter merged in memory, nothing written) and ``lm_eval.simple_evaluate`` runs
``eval.lm_eval.tasks`` with ``num_fewshot``, ``limit``, ``batch_size`` and the local task folders of
``include_path``, with the command line's seeds (0, 1234, 1234, 1234), so the numbers are those of
``lm_eval --model hf`` on the saved checkpoint. With several processes each scores its share of every task's
documents (lm-eval's own split by rank) and the main process's results are shared with the others.

One row per task (or group) and metric: ``task``, ``metric`` (lm-eval's name, its filter appended after a
comma unless it is ``none``), ``value``, ``stderr`` and ``n`` (documents scored). The run's random state is
restored afterwards: lm-eval seeds the global generators.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import random
from pathlib import Path
from typing import Optional

from evolve_train.errors import ConfigError
from evolve_train.evaluation.context import EvalContext
from evolve_train.evaluation.evaluators.common import row
from evolve_train.evaluation.registry import LM_EVAL_TASKS, register_evaluator

GROUP = "lm_eval"
NOT_METRICS = ("alias", "name", "sample_len", "sample_count")
"""Keys of lm-eval's per-task results that are not metrics."""
INSTALL = "pip install 'evolve-train[lmeval]' (lm-evaluation-harness)"


def require_harness() -> None:
    if importlib.util.find_spec("lm_eval") is None:
        raise ConfigError(f"eval.evaluators lists lm_eval, but lm-evaluation-harness is not installed: {INSTALL}")


def include_paths(settings) -> list[Path]:
    return [Path(folder).expanduser().resolve() for folder in settings.include_path]


_INDEX: dict = {}
"""The last task index built in this process, by its key (:func:`task_manager`)."""


def _task_files(paths: list[str]) -> tuple:
    """Every task file under ``paths`` with its size and modification time: a new or edited file is a new key."""
    files = []
    for root in paths:
        for path in sorted(Path(root).rglob("*.y*ml")):
            stat = path.stat()
            files.append((str(path), stat.st_size, stat.st_mtime_ns))
    return tuple(files)


def task_manager(settings):
    """lm-eval's index of tasks (built-in and under ``include_path``). Indexing reads every built-in task file
    (about 6 s), so it is built once per process for the same folders and files: the check before training and
    every checkpoint's evaluation share it."""
    from lm_eval.tasks import TaskManager

    paths = [str(path) for path in include_paths(settings)]
    key = (tuple(paths), _task_files(paths))
    if key not in _INDEX:
        _INDEX.clear()
        _INDEX[key] = TaskManager(include_path=paths or None)
    return _INDEX[key]


def check_inputs(cfg, timeline) -> None:
    """Before training: lm-eval installed, tasks listed, every ``include_path`` a folder, every task known."""
    require_harness()
    settings = cfg.eval.lm_eval
    if not settings.tasks:
        raise ConfigError("eval.lm_eval.tasks: empty; list the lm-eval tasks to score (e.g. [arc_easy,hellaswag])")
    for index, path in enumerate(include_paths(settings)):
        if not path.is_dir():
            raise ConfigError(f"eval.lm_eval.include_path[{index}]: {path} is not a folder")
    known = set(task_manager(settings).all_tasks)
    unknown = [name for name in settings.tasks if name not in known]
    if unknown:
        raise ConfigError(
            f"eval.lm_eval.tasks: unknown task '{unknown[0]}' (not an lm-eval task, nor in eval.lm_eval.include_path)"
        )


def tasks_fingerprint(settings) -> Optional[str]:
    """SHA-256 of the files under ``include_path`` and lm-eval's version (``None`` when no task is listed): what
    the initial-evaluation cache key adds for this evaluator, so an edited local task is a miss."""
    if not settings.tasks:
        return None
    from importlib.metadata import PackageNotFoundError, version

    digest = hashlib.sha256()
    try:
        digest.update(version("lm_eval").encode("utf-8"))
    except PackageNotFoundError:
        digest.update(b"absent")
    for root in include_paths(settings):
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            digest.update(str(path.relative_to(root)).encode("utf-8"))
            digest.update(path.read_bytes())
    return digest.hexdigest()


class _Collectives:
    """What lm-eval's ``HFLM`` asks of an accelerator when it shards over processes: ``gather``, a barrier and
    ``unwrap_model`` (the model is unwrapped already)."""

    def __init__(self, device):
        self.device = device

    def gather(self, tensor):
        import torch
        import torch.distributed as dist

        parts = [torch.zeros_like(tensor) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, tensor)
        return torch.stack(parts) if tensor.dim() == 0 else torch.cat(parts)

    def unwrap_model(self, model):
        return model

    def wait_for_everyone(self):
        import torch.distributed as dist

        dist.barrier()


def wrap_model(model, tokenizer, settings, shards):
    """lm-eval's ``HFLM`` around the model in memory (a copy of the tokenizer: lm-eval may set its pad token)."""
    from lm_eval.models.huggingface import HFLM

    lm = HFLM(pretrained=model, tokenizer=copy.deepcopy(tokenizer), batch_size=settings.batch_size)
    if shards.count > 1:  # lm-eval splits every task's documents by rank and gathers the metrics on rank 0
        lm._rank, lm._world_size = shards.index, shards.count
        lm.accelerator = _Collectives(lm.device)
    return lm


def run_tasks(model, tokenizer, settings, shards) -> Optional[dict]:
    """``simple_evaluate``'s results (on the main process; ``None`` on the others), global RNG state kept."""
    import lm_eval
    import numpy as np
    import torch

    lm = wrap_model(model, tokenizer, settings, shards)
    was_training = model.training
    states = random.getstate(), np.random.get_state()
    try:
        with torch.random.fork_rng(devices=[]):
            return lm_eval.simple_evaluate(
                model=lm,
                tasks=list(settings.tasks),
                num_fewshot=settings.num_fewshot,
                limit=settings.limit,
                task_manager=task_manager(settings),
                log_samples=False,
            )
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
        model.train(was_training)


def metric_values(results: dict) -> list[dict]:
    """``{task, metric, value, stderr, n}`` per task (and group) and metric of ``simple_evaluate``'s results."""
    out = []
    sizes = results.get("n-samples") or {}
    for section in ("results", "groups"):
        for task, metrics in (results.get(section) or {}).items():
            if section == "groups" and task in (results.get("results") or {}):
                continue
            for key, value in metrics.items():
                name, _, flt = key.partition(",")
                if name.endswith("_stderr") or name in NOT_METRICS or not isinstance(value, (int, float)):
                    continue
                stderr = metrics.get(f"{name}_stderr,{flt}")
                out.append(
                    {
                        "task": task,
                        "metric": name if flt in ("", "none") else f"{name},{flt}",
                        "value": float(value),
                        "stderr": float(stderr) if isinstance(stderr, (int, float)) else None,
                        "n": (sizes.get(task) or {}).get("effective"),
                    }
                )
    return out


@register_evaluator(GROUP, preflight=check_inputs, needs=(LM_EVAL_TASKS,))
def lm_eval_evaluator(ctx: EvalContext) -> list[dict]:
    """Rows of group ``lm_eval``: one per task and metric (``set_name`` = ``<task>/<metric>``)."""
    require_harness()
    settings = ctx.cfg.lm_eval
    results = run_tasks(ctx.model, ctx.text_format.tokenizer, settings, ctx.shards)
    values = ctx.shards.gather(None if results is None else metric_values(results))[0]
    return [row(ctx, GROUP, GROUP, f"{v['task']}/{v['metric']}", None, **v) for v in values]
