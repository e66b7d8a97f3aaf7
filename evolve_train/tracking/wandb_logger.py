"""Weights & Biases logger: forgetting curves per split, training loss, prediction samples, the EM matrix.

Offline by default (``logger.wandb.mode``; the ``WANDB_MODE`` variable wins when set): the run is written
to ``<run_dir>/wandb/offline-run-*`` and uploaded later with ``wandb sync``. What it logs:

- ``em/<set_name>``, ``f1/<set_name>``, ``n/<set_name>`` per checkpoint against the ``time_step`` step
  metric, so W&B draws one forgetting curve per split; other evaluator groups land under
  ``<group>/<set_name>/<metric>`` against ``time_step`` too (open-book rows: ``retrieval/<set_name>/em_open``...;
  those of the model before training at step i's store: ``retrieval/store_<i>/<set_name>/...`` at time step -1);
- ``train/loss``, ``train/lr``, ``train/tokens``, ``train/tokens_per_s`` (and on GPU ``train/peak_mem_gb``,
  ``train/mfu``) against ``train/global_step`` (optimizer steps counted across time steps, continued from
  ``train_log.jsonl`` after a resume), and each checkpoint's ``time/train_tokens_per_s``;
- a ``wandb.Table`` sample of each checkpoint's predictions (``predictions/step_<k>``);
- at the end, the step x set matrices as tables (``final/matrix_em``, ``final/matrix_f1``) and the final checkpoint's
  metrics in the run summary (``em/<set_name>``, ``f1/<set_name>``, ``final_checkpoint``). A run of corpora only
  (no QA items) logs no EM: its ``slices``, ``heldout`` and ``lm_eval`` groups, ``time/*`` and the TiC-LM
  aggregates (``timesliced/nll/*``).

Group and name (:func:`run_identity`): one group per sweep (``hydra.sweep.dir`` in a Hydra multirun, else the
experiment; ``logger.wandb.group`` wins), and run names that show the job's overrides in a multirun
(``<experiment>/<hydra.job.override_dirname>``), else ``<experiment>/<method>/seed<seed>``.

The run id is kept in ``<run_dir>/wandb_run_id.txt`` and reused with ``resume="allow"``, so a resumed run
continues the same W&B run. ``close(ok)`` always calls ``finish`` (exit code 1 when not ok).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import random
from pathlib import Path
from typing import Any, Optional

from evolve_train.evaluation.rows import ROW_META, column_key
from evolve_train.tracking.base import MetricLogger, register_logger
from evolve_train.utils.io import read_jsonl
from evolve_train.utils.provenance import provenance
from evolve_train.utils.secrets import is_secret_key

log = logging.getLogger(__name__)

RUN_ID_FILE = "wandb_run_id.txt"


def strip_secrets(value: Any) -> Any:
    """A copy of ``value`` (nested dicts/lists) without the keys :func:`is_secret_key` flags."""
    if isinstance(value, dict):
        return {k: strip_secrets(v) for k, v in value.items() if not is_secret_key(k)}
    if isinstance(value, (list, tuple)):
        return [strip_secrets(v) for v in value]
    return value


def config_dict(cfg: Any) -> dict:
    """The resolved config as a plain dict, secrets stripped (dataclass or mapping)."""
    if cfg is None:
        return {}
    if dataclasses.is_dataclass(cfg):
        raw = dataclasses.asdict(cfg)
    else:
        from omegaconf import DictConfig, OmegaConf

        raw = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)
    return strip_secrets(raw)


def new_run_id(length: int = 8) -> str:
    """A fresh W&B run id (lowercase letters and digits, as W&B's own)."""
    import secrets
    import string

    alphabet = string.ascii_lowercase + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(length))


def resolve_mode(configured: str) -> str:
    """``WANDB_MODE`` when set, else the configured mode."""
    return os.environ.get("WANDB_MODE") or configured or "offline"


def hydra_sweep() -> Optional[tuple[str, str]]:
    """``(hydra.sweep.dir, hydra.job.override_dirname)`` inside a Hydra multirun job, else None."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode
    except ImportError:
        return None
    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return None
    hydra_cfg = HydraConfig.get()
    return str(hydra_cfg.sweep.dir), str(hydra_cfg.job.override_dirname or "")


def run_identity(cfg: Any, sweep: Optional[tuple[str, str]] = None) -> tuple[str, str]:
    """The W&B ``(group, name)`` of a run: group = ``logger.wandb.group``, else the sweep dir in a multirun (one
    group per sweep), else the experiment; name = ``<experiment>/<override_dirname>`` in a multirun (the job's
    overrides, e.g. ``method=lora,seed=1``), else ``<experiment>/<method>/seed<seed>``."""
    wcfg = cfg.logger.wandb if cfg is not None else None
    experiment = getattr(cfg, "experiment", "default")
    method = cfg.method.name if cfg is not None else "run"
    sweep_dir, overrides = sweep or (None, "")
    group = getattr(wcfg, "group", None) or sweep_dir or experiment
    name = f"{experiment}/{overrides}" if overrides else f"{experiment}/{method}/seed{getattr(cfg, 'seed', 0)}"
    return group, name


TRAIN_KEYS = ("loss", "lr", "tokens", "tokens_per_s", "peak_mem_gb", "mfu")
"""The ``train_log.jsonl`` keys charted as ``train/<key>``."""


def _column(row: dict) -> str:
    return row.get("set_name") or (row["set"] if row.get("set_step") is None else f"{row['set']}_{row['set_step']}")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def eval_payload(checkpoint: int, rows: list[dict]) -> dict:
    """The ``wandb.log`` dict of one checkpoint's rows: ``em/<set>``, ``f1/<set>``, ``n/<set>``, other groups."""
    payload: dict[str, Any] = {"time_step": checkpoint}
    for row in rows:
        group = row.get("group")
        for metric in ("train_seconds", "train_tokens", "train_tokens_per_s"):  # on every row: QA or not
            if group and group != "timing" and _is_number(row.get(metric)):
                payload.setdefault(f"time/{metric}", row[metric])
        if group == "splits":
            name = _column(row)
            for metric in ("em", "f1", "n"):
                if row.get(metric) is not None:
                    payload[f"{metric}/{name}"] = row[metric]
        elif group:
            prefix = f"{group}/{row['set_name']}" if row.get("set_name") else str(group)
            if row.get("store") is not None and row["store"] != checkpoint:  # the initial model at step i's store
                prefix = f"{group}/store_{row['store']}/{row['set_name']}"
            payload.update(_flatten(prefix, {k: v for k, v in row.items() if k not in ROW_META}))
    return payload


def summary_scalars(summary: dict) -> dict:
    """Run-summary keys of the TiC-LM aggregates and compute (docs/metrics.md#9-time-sliced-perplexity, docs/metrics.md#11-compute): ``timesliced/nll/<aggregate>``
    (and ``_perplexity``), ``timesliced/em/<matrix>/<aggregate>``, ``timesliced/regret/...`` and
    ``compute/<total>``."""
    timesliced = summary.get("timesliced") or {}
    nll = {k: v for k, v in (timesliced.get("nll") or {}).items() if k not in ("P", "P_init", "rows", "ci")}
    em = {kind: {k: v for k, v in entry.items() if k != "rows"} for kind, entry in (timesliced.get("em") or {}).items()}
    regret = {k: v for k, v in (timesliced.get("regret") or {}).items() if k != "oracle_run"}
    return {
        **_flatten("timesliced/nll", nll),
        **_flatten("timesliced/em", em),
        **_flatten("timesliced/regret", regret),
        **_flatten("compute", (summary.get("compute") or {}).get("totals") or {}),
    }


def _flatten(prefix: str, value: Any) -> dict:
    """Numbers of a (nested) dict as ``prefix/key/subkey`` entries (an interval ``<name>_ci: [low, high]`` as
    ``<name>_ci_low`` / ``<name>_ci_high``); other values are skipped."""
    if isinstance(value, dict):
        out = {}
        for key, inner in value.items():
            out.update(_flatten(f"{prefix}/{key}", inner))
        return out
    if prefix.endswith("_ci") and isinstance(value, (list, tuple)) and len(value) == 2:  # a 95 % interval
        return {f"{prefix}_low": value[0], f"{prefix}_high": value[1]}
    return {prefix: value} if _is_number(value) else {}


def sample_predictions(run_dir: Path, checkpoint: int, per_set: int, seed: int = 0) -> list[list]:
    """Rows [set, id, prompt, prediction, golds, correct, f1] sampled (seeded) from each set's file."""
    folder = Path(run_dir) / "predictions" / f"step_{checkpoint}"
    table = []
    for path in sorted(folder.glob("*.jsonl")) if per_set > 0 else []:
        items = read_jsonl(path)
        chosen = sorted(random.Random(f"{seed}/{path.stem}").sample(range(len(items)), min(per_set, len(items))))
        for i in chosen:
            item = items[i]
            table.append(
                [
                    path.stem,
                    str(item.get("id")),
                    item.get("prompt"),
                    item.get("prediction"),
                    " | ".join(map(str, item.get("golds") or [])),
                    item.get("correct"),
                    item.get("f1"),
                ]
            )
    return table


PREDICTION_COLUMNS = ["set", "id", "prompt", "prediction", "golds", "correct", "f1"]


@register_logger("wandb")
class WandbLogger(MetricLogger):
    """One W&B run per run dir; see the module docstring for what is logged where."""

    def __init__(self, run_dir: Path, cfg: Any = None, **_):
        import wandb

        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.cfg = cfg
        wcfg = cfg.logger.wandb if cfg is not None else None
        group, name = run_identity(cfg, hydra_sweep())
        method = cfg.method.name if cfg is not None else "run"
        self.mode = resolve_mode(getattr(wcfg, "mode", "offline"))
        self.sample_size = getattr(wcfg, "predictions_sample", 16)
        id_file = self.run_dir / RUN_ID_FILE
        run_id = id_file.read_text(encoding="utf-8").strip() if id_file.exists() else new_run_id()
        self.run = wandb.init(
            project=getattr(wcfg, "project", "evolve-train"),
            entity=getattr(wcfg, "entity", None),
            group=group,
            job_type=method,
            name=name,
            tags=list(getattr(wcfg, "tags", []) or []),
            config={**config_dict(cfg), "provenance": provenance()},
            dir=str(self.run_dir),
            id=run_id,
            resume="allow",
            mode=self.mode,
            reinit="create_new",
        )
        if self.mode != "disabled":
            id_file.write_text(self.run.id + "\n", encoding="utf-8")
        self.run.define_metric("time_step")
        self.run.define_metric("train/global_step")
        self.run.define_metric("train/*", step_metric="train/global_step")
        self._defined = {"train"}
        self._steps_done: Optional[dict[int, int]] = None
        self._closed = False
        self._warned = False

    # -- helpers -------------------------------------------------------------------------------
    def _guard(self, what: str, fn, *args) -> None:
        """Tracking must not kill a training run: a W&B error is logged (once) and skipped."""
        try:
            fn(*args)
        except Exception:  # noqa: BLE001
            if not self._warned:
                log.warning("wandb: %s failed; continuing without it", what, exc_info=True)
                self._warned = True

    def _define_prefixes(self, keys) -> None:
        for key in keys:
            prefix = key.split("/", 1)[0]
            if "/" in key and prefix not in self._defined:
                self.run.define_metric(f"{prefix}/*", step_metric="time_step")
                self._defined.add(prefix)

    def _global_step(self, time_step: int, optimizer_step: int) -> int:
        if self._steps_done is None:  # optimizer steps of earlier time steps (a resumed run)
            self._steps_done = {}
            for row in read_jsonl(self.run_dir / "train_log.jsonl"):
                if row.get("time_step", time_step) < time_step:
                    ts = row["time_step"]
                    self._steps_done[ts] = max(self._steps_done.get(ts, 0), row.get("optimizer_step", 0))
        self._steps_done[time_step] = max(self._steps_done.get(time_step, 0), optimizer_step)
        return sum(v for k, v in self._steps_done.items() if k < time_step) + optimizer_step

    # -- MetricLogger --------------------------------------------------------------------------
    def log_train(self, row):
        self._guard("log_train", self._log_train, row)

    def _log_train(self, row):
        payload = {
            "train/global_step": self._global_step(row["time_step"], row["optimizer_step"]),
            "train/time_step": row["time_step"],
        }
        payload.update({f"train/{k}": v for k, v in row.items() if k in TRAIN_KEYS and _is_number(v)})
        if row.get("group") == "within_step":  # the within-step probe (evaluation/within_step.py)
            payload.update(_flatten("within_step/em", row.get("em") or {}))
        self.run.log(payload)

    def log_eval(self, checkpoint, rows):
        self._guard("log_eval", self._log_eval, checkpoint, rows)

    def _log_eval(self, checkpoint, rows):
        import wandb

        payload = eval_payload(checkpoint, rows)
        self._define_prefixes(payload)
        sample = sample_predictions(self.run_dir, checkpoint, self.sample_size, getattr(self.cfg, "seed", 0))
        if sample:
            payload[f"predictions/step_{checkpoint}"] = wandb.Table(columns=PREDICTION_COLUMNS, data=sample)
        self.run.log(payload)

    def log_summary(self, summary):
        self._guard("log_summary", self._log_summary, summary)

    def _log_summary(self, summary):
        import wandb

        tables = {}
        for metric in ("em", "f1"):
            matrix = summary.get(metric) or {}
            columns = sorted({c for cells in matrix.values() for c in cells}, key=column_key)
            data = [[int(ckpt)] + [matrix[ckpt].get(c) for c in columns] for ckpt in sorted(matrix, key=int)]
            if matrix:  # a run of corpora only (no QA items) has no EM matrix: no empty table
                tables[f"final/matrix_{metric}"] = wandb.Table(columns=["checkpoint"] + columns, data=data)
                final = max(matrix, key=int)
                for column, value in matrix[final].items():
                    self.run.summary[f"{metric}/{column}"] = value
                self.run.summary["final_checkpoint"] = int(final)
        self.run.summary.update(summary_scalars(summary))
        if tables:
            self.run.log(tables)

    def close(self, ok=True):
        if self._closed:
            return
        self._closed = True
        try:
            self.run.finish(exit_code=0 if ok else 1)
        except Exception:  # noqa: BLE001  (a failed upload must not stop a multirun)
            log.warning("wandb: finish failed", exc_info=True)
