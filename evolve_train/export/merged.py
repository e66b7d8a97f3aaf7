"""A run's checkpoint as a plain Hugging Face directory (``evolve-data export-merged RUN_DIR --step K OUT_DIR``).

A LoRA run (``method.lora.save_merged=false``, the default) keeps full weights at step 0 only; a later
``steps/<k>/`` holds ``adapter/`` and no weights, so ``from_pretrained`` and ``lm_eval --model hf`` cannot read
it alone. :func:`export_merged` writes the model the run held after step k (``load_model``: its adapters merged
in order, ``models/lora_checkpoint.py``; a step with full weights is read as it is) with ``save_pretrained``
(safetensors, ``config.json``) and the step's tokenizer, in the run's ``model.dtype``. The directory is written
under a temporary sibling and renamed into place when complete: a failed export leaves nothing at ``OUT_DIR``.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Optional

from evolve_train.config import ModelConfig
from evolve_train.errors import ConfigError
from evolve_train.models.lora_checkpoint import has_weights, is_adapter_only
from evolve_train.utils.io import AlreadyPublished, atomic_dir


def saved_steps(run_dir: Path) -> list[int]:
    """The step numbers of ``run_dir/steps/<k>/`` in order."""
    steps = Path(run_dir) / "steps"
    return sorted(int(p.name) for p in steps.iterdir() if p.is_dir() and p.name.isdigit()) if steps.is_dir() else []


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    """``run_dir/steps/<step>/``, checked: the run dir exists, the step was saved, and it is a checkpoint (full
    weights, or a LoRA adapter without them). Each failure is a :class:`ConfigError` naming the path."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: no such run dir")
    saved = saved_steps(run_dir)
    if not saved:
        raise ConfigError(f"{run_dir}: not a run dir (no checkpoints under steps/)")
    path = run_dir / "steps" / str(step)
    if step not in saved:
        raise ConfigError(f"{path}: no such step (saved: {', '.join(map(str, saved))})")
    if not (path / "config.json").is_file() or not (has_weights(path) or is_adapter_only(path)):
        raise ConfigError(
            f"{path}: not a checkpoint (it holds neither model weights with config.json nor a LoRA adapter/)"
        )
    return path


def check_out_dir(out: Path) -> None:
    """``out`` must not exist yet, or be an empty directory: an export never mixes with other files."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"{out}: exists and is not an empty directory; give a new one (nothing was written)")


def run_model_config(run_dir: Path) -> ModelConfig:
    """The run's ``model`` settings (dtype, architecture, loading options) from ``state.json``'s identity config,
    else ``.hydra/config.yaml``; the defaults where the run recorded neither."""
    values = _identity_model(Path(run_dir)) or _hydra_model(Path(run_dir)) or {}
    fields = {f.name for f in dataclasses.fields(ModelConfig)}
    return ModelConfig(**{k: v for k, v in values.items() if k in fields and k != "name_or_path"})


def _identity_model(run_dir: Path) -> Optional[dict[str, Any]]:
    try:
        state = json.loads((run_dir / "state.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    config = ((state or {}).get("identity") or {}).get("config") or {}
    model = {k[len("model.") :]: v for k, v in config.items() if k.startswith("model.")}
    return model or None


def _hydra_model(run_dir: Path) -> Optional[dict[str, Any]]:
    path = run_dir / ".hydra" / "config.yaml"
    if not path.is_file():
        return None
    from omegaconf import OmegaConf

    model = OmegaConf.to_container(OmegaConf.load(path), resolve=False).get("model")
    return dict(model) if isinstance(model, dict) else None


def export_merged(run_dir: Path, step: int, out: Path) -> dict[str, Any]:
    """Write step ``step`` of ``run_dir`` to ``out`` (see the module docstring); returns what was written:
    ``{"checkpoint", "merged_adapters", "dtype", "out"}``."""
    from evolve_train.models.build import load_model, load_tokenizer

    path = checkpoint_dir(run_dir, step)
    check_out_dir(out)
    cfg = run_model_config(run_dir)
    model = load_model(str(path), cfg)
    tokenizer = load_tokenizer(str(path), cfg)
    out = Path(out)
    try:
        with atomic_dir(out, replace=False) as tmp:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
    except AlreadyPublished as error:  # a directory appeared at ``out`` while the export ran
        raise ConfigError(f"{out}: was written by something else during the export (nothing was written)") from error
    return {
        "checkpoint": str(path),
        "merged_adapters": is_adapter_only(path),
        "dtype": str(cfg.dtype),
        "out": str(out),
    }
