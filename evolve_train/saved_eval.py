"""Evaluate checkpoints that are already saved, without training: ``evolve-eval`` / ``python evaluate.py``.

:class:`SavedCheckpoints` composes the evaluation half of a run
(:class:`~evolve_train.evaluation.checkpoints.CheckpointEvaluation`) with checkpoints loaded instead of
trained: each requested checkpoint (a run's ``steps/<k>/``, or any Hugging Face model dir given as
``model.name_or_path``, scored as checkpoint k) goes through the same ``evaluate(k)`` as in training.

Where the rows go: ``<run>/evaluations/<name>/`` by default (``metrics.jsonl``, ``predictions/``,
``summary.json``, ``state.json``, ``.hydra/config.yaml`` and ``evaluation.json`` with the command), a dir
that ``evolve-report`` and ``evolve-gate`` read like a run dir; the run's own training rows are never
touched. With ``replace=True`` the rows of the requested checkpoints in the run's own ``metrics.jsonl``
are replaced instead (atomically, per checkpoint). A checkpoint already evaluated under that name is
skipped, so running the same command twice leaves the same files.
"""

from __future__ import annotations

import json
import logging
import shlex
import sys
from pathlib import Path
from typing import Optional, Sequence

from omegaconf import DictConfig, OmegaConf

from evolve_train.errors import ConfigError
from evolve_train.evaluation.checkpoints import CheckpointEvaluation
from evolve_train.evaluation.inputs import load_inputs
from evolve_train.evaluation.rows import read_metrics
from evolve_train.models.build import build_text_format, load_model, load_tokenizer
from evolve_train.models.source import check_model_source
from evolve_train.run import shut_down, start_loggers, summarize, validate
from evolve_train.training.checkpoint import RunState, ensure_writable, step_dir
from evolve_train.training.distributed import build_accelerator
from evolve_train.utils.io import atomic_write_text, write_jsonl

log = logging.getLogger(__name__)


class SavedCheckpoints:
    """Score saved checkpoints on the timeline's sets: ``setup()``, then ``evaluate(k)`` per checkpoint, through
    the same evaluation half as a training run (:class:`~evolve_train.evaluation.checkpoints.CheckpointEvaluation`)."""

    def __init__(
        self,
        cfg: DictConfig,
        *,
        out: Path,
        source: Optional[Path] = None,
        steps: Optional[Sequence[int]] = None,
        replace: bool = False,
        command: str = "",
    ):
        self.cfg = OmegaConf.to_object(cfg)
        self.dict_cfg, self.out, self.source = cfg, Path(out), Path(source) if source else None
        self.requested, self.replace, self.command = steps, replace, command

    def setup(self) -> "SavedCheckpoints":
        cfg = self.cfg
        validate(cfg)
        if self.source is None:  # a model no run produced: the same clear error as train.py's
            check_model_source(cfg.model.name_or_path)
        self.timeline, qa_adaptation = load_inputs(cfg)
        self.steps = self._steps()
        self.run_dir = self.out
        self.accelerator = build_accelerator(cfg.trainer)
        self.state = RunState.load(self.run_dir)
        if self.main:
            ensure_writable(self.run_dir)
            self._write_metadata()
        self.logger = start_loggers(cfg, self.run_dir, self.main)
        self.evaluation = CheckpointEvaluation(
            cfg, self.run_dir, self.timeline, qa_adaptation, self.accelerator, self.logger, self.state
        )
        return self

    @property
    def main(self) -> bool:
        return self.accelerator.is_main_process

    def _steps(self) -> list[int]:
        last = len(self.timeline.steps) - 1
        steps = (
            list(self.requested)
            if self.requested
            else (
                sorted(int(p.name) for p in (self.source / "steps").iterdir() if p.name.isdigit())
                if self.source
                else [last]
            )
        )
        bad = [k for k in steps if not 0 <= k <= last]
        if bad:
            raise ConfigError(f"--steps: checkpoint {bad[0]} is not a step of this timeline (0..{last})")
        if self.source is not None:
            missing = [k for k in steps if not (step_dir(self.source, k) / "config.json").is_file()]
            if missing:
                raise ConfigError(f"--steps: {step_dir(self.source, missing[0])} holds no saved checkpoint")
        return steps

    def _write_metadata(self) -> None:
        if self.replace:
            return  # the run dir keeps its own config
        hydra_dir = self.run_dir / ".hydra"
        hydra_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(hydra_dir / "config.yaml", OmegaConf.to_yaml(self.dict_cfg))
        meta = {
            "source": str(self.source) if self.source else None,
            "model": self.cfg.model.name_or_path,
            "steps": self.steps,
            "command": self.command,
        }
        atomic_write_text(self.run_dir / "evaluation.json", json.dumps(meta, indent=2) + "\n")

    def run(self) -> dict:
        self.setup()
        ok = False
        try:
            todo = [k for k in self.steps if self.replace or k not in self.state.evaluated]
            for k in [k for k in self.steps if k not in todo]:
                log.info("checkpoint %d: already evaluated in %s; skipped", k, self.run_dir)
            for k in todo:
                self.evaluate(k)
            summary = summarize(self.evaluation) if todo or not (self.run_dir / "summary.json").exists() else {}
            ok = True
            return summary
        finally:
            self.close(ok)

    def evaluate(self, k: int) -> list[dict]:
        """Load checkpoint ``k`` and score it (the rows of an earlier evaluation of it replaced with ``replace``)."""
        model, tokenizer = self.load(k)
        self.evaluation.text_format = build_text_format(self.cfg.model, tokenizer)
        self.evaluation.tokenizer = tokenizer
        if self.replace and self.main:
            drop_checkpoint_rows(self.run_dir / "metrics.jsonl", k)
        rows = self.evaluation.evaluate(k, model)
        model.train()
        self.accelerator.wait_for_everyone()
        return rows

    def load(self, step: int):
        """The model and tokenizer scored as checkpoint ``step``."""
        path = str(step_dir(self.source, step)) if self.source else self.cfg.model.name_or_path
        model = load_model(path, self.cfg.model).to(self.accelerator.device)
        return model, load_tokenizer(self.cfg.model.tokenizer or path, self.cfg.model)

    def close(self, ok: bool) -> None:
        shut_down(getattr(self, "logger", None), getattr(self, "accelerator", None), ok)


def drop_checkpoint_rows(path: Path, checkpoint: int) -> None:
    """Remove one checkpoint's rows from ``metrics.jsonl`` (one atomic replace), before it is re-evaluated."""
    rows = read_metrics(path)
    kept = [row for row in rows if row.get("checkpoint") != checkpoint]
    if len(kept) != len(rows):
        write_jsonl(path, kept)


def output_dir(source: Optional[Path], name: str, out: Optional[str], replace: bool) -> Path:
    if replace:
        if source is None:
            raise ConfigError("--replace needs a run dir (it replaces that run's own rows)")
        return source
    if out:
        return Path(out)
    if source is None:
        raise ConfigError("--out DIR is needed when no run dir is given (model.name_or_path=...)")
    return source / "evaluations" / name


def command_line(argv: Sequence[str]) -> str:
    return " ".join(shlex.quote(a) for a in ["evolve-eval", *argv])


def evaluate_saved(
    cfg: DictConfig,
    *,
    source: Optional[Path],
    steps: Optional[Sequence[int]],
    name: str,
    out: Optional[str] = None,
    replace: bool = False,
    argv: Sequence[str] = (),
) -> dict:
    """Evaluate saved checkpoints (see the module docstring); returns the summary of the output dir."""
    if source is None and not cfg.model.name_or_path:
        raise ConfigError("nothing to evaluate: give a run dir (evolve-eval RUN_DIR ...) or model.name_or_path=DIR")
    target = output_dir(source, name, out, replace)
    runner = SavedCheckpoints(
        cfg, out=target, source=source, steps=steps, replace=replace, command=command_line(argv or sys.argv[1:])
    )
    return runner.run()
