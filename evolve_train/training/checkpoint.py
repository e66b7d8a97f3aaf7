"""Per-step checkpoints in Hugging Face format, written atomically, and the run's progress state.

A checkpoint is written into ``steps/.<k>.tmp-<pid>`` and renamed to ``steps/<k>`` only when
complete, so a crash never leaves a half checkpoint under a real name. ``state.json`` (also
replaced atomically) records which steps are trained and which are evaluated; resume trusts it.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path


def atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with tmp.open("w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def step_dir(run_dir: Path, step: int) -> Path:
    return run_dir / "steps" / str(step)


def save_checkpoint(run_dir: Path, step: int, model, tokenizer, extra_files=None) -> Path:
    """Save model + tokenizer for ``step`` atomically; ``extra_files(dir)`` may add method files."""
    final = step_dir(run_dir, step)
    tmp = final.with_name(f".{step}.tmp-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    if extra_files is not None:
        extra_files(tmp)
    if final.exists():  # a checkpoint of an unfinished earlier attempt at this step
        shutil.rmtree(final)
    os.replace(tmp, final)
    return final


def remove_stale_tmp(run_dir: Path) -> list[Path]:
    """Delete leftovers of interrupted writes; returns what was removed."""
    removed = []
    steps = run_dir / "steps"
    for path in steps.glob(".*.tmp-*") if steps.exists() else []:
        shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
        removed.append(path)
    return removed


@dataclass
class RunState:
    trained: list[int] = field(default_factory=list)
    """Steps whose checkpoint is complete."""
    evaluated: list[int] = field(default_factory=list)
    """Checkpoints whose metrics rows are all in metrics.jsonl."""
    method_state: dict = field(default_factory=dict)

    @classmethod
    def load(cls, run_dir: Path) -> "RunState":
        path = run_dir / "state.json"
        if not path.exists():
            return cls()
        return cls(**json.loads(path.read_text(encoding="utf-8")))

    def save(self, run_dir: Path) -> None:
        atomic_write_text(run_dir / "state.json", json.dumps(asdict(self), indent=2) + "\n")

    @property
    def last_complete(self) -> int:
        """Last step both trained and evaluated (-1 if none)."""
        done = set(self.trained) & set(self.evaluated)
        last = -1
        while last + 1 in done:
            last += 1
        return last
