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

:class:`CheckpointSeries` scores a series of models someone else trained in time order (``evolve-eval --series
M0 M1 ... --out DIR``: local dirs, hub ids, ``id@revision``) as checkpoints 0, 1, ... of one run dir: the
forgetting matrix, the paired metrics and the time slices of a series this project did not train. The series
is resumable (entries already evaluated are skipped) and pinned: ``evaluation.json`` records the entries and
``state.json`` the result-affecting config, and a call that changes either is refused.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import logging
import re
import shlex
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

import torch
from omegaconf import DictConfig, OmegaConf

from evolve_train.config_identity import config_diff, holds_run, result_config
from evolve_train.errors import ConfigError
from evolve_train.evaluation.checkpoints import CheckpointEvaluation
from evolve_train.evaluation.inputs import load_inputs
from evolve_train.evaluation.rows import read_metrics
from evolve_train.models.build import build_text_format, load_model, load_tokenizer
from evolve_train.models.source import check_model_source, looks_local
from evolve_train.run import shut_down, start_loggers, summarize, validate
from evolve_train.training.checkpoint import RunState, ensure_writable, step_dir
from evolve_train.training.distributed import build_accelerator
from evolve_train.training.identity import fingerprint
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
        self._check_sources()
        self.timeline, qa_adaptation = load_inputs(cfg)
        self.steps = self._steps()
        self.run_dir = self.out
        self.state = RunState.load(self.run_dir)
        self._check_out()  # before anything is written
        if cfg.trainer.num_threads > 0:  # the threads a run scores with (the same reduction order)
            torch.set_num_threads(cfg.trainer.num_threads)
        self.accelerator = build_accelerator(cfg.trainer)
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

    def _check_sources(self) -> None:
        if self.source is None:  # a model no run produced: the same clear error as train.py's
            check_model_source(self.cfg.model.name_or_path)

    def _check_out(self) -> None:
        """Refuse, before anything is written, an output dir this evaluation may not add to (none here)."""

    @property
    def todo(self) -> list[int]:
        """The requested checkpoints still to score (all of them with ``replace``)."""
        return [k for k in self.steps if self.replace or k not in self.state.evaluated]

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
            todo = self.todo
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
        if self.main and (self.replace or k not in self.state.evaluated):  # rows an interrupted call left
            drop_checkpoint_rows(self.run_dir / "metrics.jsonl", k)
        rows = self.evaluation.evaluate(k, model)
        model.train()
        self.accelerator.wait_for_everyone()
        del model  # one model in memory at a time: freed before the next is loaded
        free_memory()
        return rows

    def load(self, step: int):
        """The model and tokenizer scored as checkpoint ``step``."""
        path = str(step_dir(self.source, step)) if self.source else self.cfg.model.name_or_path
        model = load_model(path, self.cfg.model, device=self.accelerator.device)
        return model, load_tokenizer(self.cfg.model.tokenizer or path, self.cfg.model)

    def close(self, ok: bool) -> None:
        shut_down(getattr(self, "logger", None), getattr(self, "accelerator", None), ok)


def free_memory() -> None:
    """Return what models no longer referenced held: Python's cycles, and CUDA's cached blocks."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


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


# --- a series of checkpoints trained elsewhere --------------------------------------------------------------

HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")
"""A hub model id: ``name`` or ``org/name``."""
ENTRY_KEYS = ("model", "revision", "name", "date")


@dataclasses.dataclass(frozen=True)
class SeriesEntry:
    """One checkpoint of a series: a local model dir or a hub id (at ``revision``), and the time step's
    ``name`` it stands for and its ``date`` when the series says them."""

    model: str
    """A local dir (absolute) or a hub id."""
    revision: Optional[str] = None
    """A hub branch, tag or commit (``step143000``); ``None``: the default branch, or a local dir."""
    name: Optional[str] = None
    """The name of the time step this checkpoint stands for; checked against the timeline's."""
    date: Optional[str] = None
    """When the checkpoint's training data ends (recorded, not checked)."""

    @property
    def label(self) -> str:
        return f"{self.model}@{self.revision}" if self.revision else self.model

    @property
    def local(self) -> bool:
        return self.revision is None and Path(self.model).is_absolute()

    def scored(self) -> dict:
        """What is loaded: two entries with the same ``scored()`` are the same checkpoint."""
        return {"model": self.model, "revision": self.revision}


def parse_entry(text: str, base: Optional[Path] = None, where: str = "--series") -> SeriesEntry:
    """A series entry from its text: a local dir (relative to ``base`` when given, else to the working dir),
    ``org/name`` (a hub id) or ``org/name@revision``."""
    text = str(text).strip()
    if not text:
        raise ConfigError(f"{where}: an empty entry")
    path = Path(text).expanduser()
    if base is not None and not path.is_absolute():
        path = base / path
    if path.exists() or looks_local(text):  # a path that does not exist fails in the source check
        return SeriesEntry(model=str(path.resolve()))
    model, at, revision = text.rpartition("@") if "@" in text else (text, "", "")
    if not HUB_ID.match(model) or (at and not revision):
        raise ConfigError(
            f"{where}: {text!r} is neither a local model dir nor a hub id (org/name, or org/name@revision)"
        )
    return SeriesEntry(model=model, revision=revision or None)


def _text(value: Any) -> Optional[str]:
    return None if value is None else str(value)  # YAML reads 2019 as a number, 2019-12-31 as a date


def parse_item(item: Any, base: Optional[Path] = None, where: str = "--series-file") -> SeriesEntry:
    """A series-file item: an entry's text, or ``{model:, revision:, name:, date:}`` (only ``model`` needed)."""
    if isinstance(item, (str, Path)):
        return parse_entry(str(item), base, where)
    if not isinstance(item, dict) or "model" not in item:
        raise ConfigError(f"{where}: each entry is a model (dir, hub id, id@revision) or a mapping with model:")
    unknown = sorted(set(item) - set(ENTRY_KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown} in {item} (known: {', '.join(ENTRY_KEYS)})")
    entry = parse_entry(str(item["model"]), base, where)
    if item.get("revision") is not None:
        if entry.revision is not None or entry.local:
            raise ConfigError(f"{where}: {item}: give the revision once, to a hub id")
        entry = dataclasses.replace(entry, revision=_text(item["revision"]))
    return dataclasses.replace(entry, name=_text(item.get("name")), date=_text(item.get("date")))


def read_series_file(path: Path | str) -> list[SeriesEntry]:
    """The entries of a YAML or JSON list; relative local dirs are relative to the file's own dir."""
    import yaml

    path = Path(path)
    where = f"--series-file {path}"
    if not path.is_file():
        raise ConfigError(f"{where}: no such file")
    try:
        items = yaml.safe_load(path.read_text(encoding="utf-8"))  # JSON is YAML too
    except yaml.YAMLError as err:
        raise ConfigError(f"{where}: not YAML or JSON ({' '.join(str(err).split())})") from None
    if not isinstance(items, list) or not items:
        raise ConfigError(f"{where}: the file holds a list of entries, one per time step")
    return [parse_item(item, path.parent.resolve(), where) for item in items]


def series_config(cfg) -> dict[str, Any]:
    """The result-affecting config a series is pinned to: a run's (``result_config``), without
    ``model.name_or_path`` (the entries are the models)."""
    return {key: value for key, value in result_config(cfg).items() if key != "model.name_or_path"}


class CheckpointSeries(SavedCheckpoints):
    """Entry i of ``entries`` scored as checkpoint i of the run dir ``out``, in order, one model at a time;
    entries already evaluated there are skipped (see the module docstring)."""

    def __init__(self, cfg: DictConfig, *, entries: Sequence[SeriesEntry], out: Path, command: str = ""):
        super().__init__(cfg, out=out, command=command)
        self.entries = list(entries)

    def _check_sources(self) -> None:
        if not self.entries:
            raise ConfigError("--series: no entries")
        for i, entry in enumerate(self.entries):
            if entry.local:
                check_model_source(entry.model, f"--series entry {i}")

    def _steps(self) -> list[int]:
        names = [step.name for step in self.timeline.steps]
        if len(self.entries) > len(names):
            raise ConfigError(
                f"--series: {len(self.entries)} entries, but the timeline has {len(names)} time steps "
                f"({', '.join(names)}): one entry per time step, in order (or fewer: the first steps)"
            )
        for i, entry in enumerate(self.entries):
            if entry.name is not None and entry.name != names[i]:
                raise ConfigError(
                    f"--series entry {i} ({entry.label}) is named {entry.name!r}, but time step {i} of the "
                    f"timeline is {names[i]!r} (steps: {', '.join(names)})"
                )
        return list(range(len(self.entries)))

    def _metadata_path(self) -> Path:
        return self.out / "evaluation.json"

    def recorded(self) -> Optional[list[dict]]:
        """The entries ``evaluation.json`` records (``None``: no series recorded there)."""
        path = self._metadata_path()
        if not path.is_file():
            return None
        return json.loads(path.read_text(encoding="utf-8")).get("series")

    def _check_out(self) -> None:
        """A dir holding rows must hold this series' (the same entries where both lists have one, the same
        result-affecting config); a ``ConfigError`` lists what differs."""
        out, recorded, identity = self.out, self.recorded(), self.state.identity
        self.config = series_config(self.cfg)
        if not holds_run(out, self.state):
            self._recorded = []  # nothing evaluated: any record there pins nothing
            return
        if recorded is None or identity is None:
            raise ConfigError(
                f"{out} holds evaluation rows that are not a checkpoint series' (evaluation.json records no "
                "series); choose another --out"
            )
        changed = [
            f"  entry {i}: {SeriesEntry(**old_scored(old)).label} -> {new.label}"
            for i, (old, new) in enumerate(zip(recorded, self.entries))
            if old_scored(old) != new.scored()
        ]
        if changed:
            raise ConfigError(
                f"{out} holds a series with other entries (evaluation.json); adding to it would mix two series. "
                "Changed (recorded -> now):\n" + "\n".join(changed) + "\nGive the recorded entries (more may "
                "follow them), or choose another --out."
            )
        diff = config_diff(identity.get("config", {}), self.config)[0]
        if diff:
            lines = "\n".join(f"  {key}: {json.dumps(old)} -> {json.dumps(new)}" for key, old, new in diff)
            raise ConfigError(
                f"{out} holds a series evaluated with a different configuration (state.json); its rows would "
                f"mix two configurations. Changed (recorded -> now):\n{lines}\nRestore the recorded values, or "
                "choose another --out."
            )
        self._recorded = recorded

    def _write_metadata(self) -> None:
        """``.hydra/config.yaml``, ``evaluation.json`` (the entries, the config's fingerprint, the command) and
        ``state.json``'s ``identity``, when this call scores something (else nothing changes)."""
        if not self.todo and self._metadata_path().is_file():
            return
        names = [step.name for step in self.timeline.steps]
        entries = [
            {"step": i, "step_name": names[i], **dataclasses.asdict(entry)} for i, entry in enumerate(self.entries)
        ]
        entries += self._recorded[len(entries) :]  # a longer series recorded earlier keeps its later entries
        hydra_dir = self.out / ".hydra"
        hydra_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(hydra_dir / "config.yaml", OmegaConf.to_yaml(self.dict_cfg))
        self.state.identity = {"fingerprint": fingerprint(self.config), "config": self.config}
        self.state.save(self.out)
        meta = {
            "series": entries,
            "steps": [entry["step"] for entry in entries],
            "fingerprint": self.state.identity["fingerprint"],
            "command": self.command,
        }
        atomic_write_text(self._metadata_path(), json.dumps(meta, indent=2) + "\n")

    def load(self, step: int):
        """Entry ``step``'s model (freed by the caller before the next is loaded) and tokenizer."""
        entry, model_cfg = self.entries[step], self.cfg.model
        log.info("checkpoint %d (%s): %s", step, self.timeline.steps[step].name, entry.label)
        try:
            model = load_model(entry.model, model_cfg, revision=entry.revision, device=self.accelerator.device)
            if model_cfg.tokenizer:
                tokenizer = load_tokenizer(model_cfg.tokenizer, model_cfg)
            else:
                tokenizer = load_tokenizer(entry.model, model_cfg, revision=entry.revision)
        except OSError as err:  # transformers' error for a missing repo, revision or file
            raise ConfigError(f"--series entry {step} ({entry.label}): {' '.join(str(err).split())}") from None
        return model, tokenizer


def old_scored(record: dict) -> dict:
    return {"model": record.get("model"), "revision": record.get("revision")}


def evaluate_series(
    cfg: DictConfig, *, entries: Sequence[SeriesEntry], out: Optional[str], argv: Sequence[str] = ()
) -> dict:
    """Score ``entries`` as checkpoints 0, 1, ... of the run dir ``out`` (:class:`CheckpointSeries`); returns
    its summary."""
    if not out:
        raise ConfigError("--series needs --out DIR (the run dir the series' rows go to)")
    if cfg.model.name_or_path:
        log.info("--series: model.name_or_path=%s is not scored (the entries are)", cfg.model.name_or_path)
    runner = CheckpointSeries(cfg, entries=entries, out=Path(out), command=command_line(argv or sys.argv[1:]))
    return runner.run()
