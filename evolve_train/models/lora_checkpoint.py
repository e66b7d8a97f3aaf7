"""LoRA checkpoints saved without merged weights (``method.lora.save_merged=false``), and their loading.

Such a checkpoint ``steps/<k>/`` holds ``config.json``, the tokenizer and ``adapter/`` (peft format plus
``evolve_train.json``: ``across_steps``) but no weights. :func:`load_adapter_only` rebuilds the merged model
exactly as the run held it after step k: the last checkpoint before k that has full weights, then, for
every LoRA step after it in order, the same peft operations the run did (``stack``: the previous step's
adapter subtracted from the merged weights, i.e. ``methods/lora.py``'s ``prepare_model``; then the step's
adapter merged in, ``merge_and_unload``). The same operations on the same saved tensors give the same
weights, bit for bit, so a resumed run continues as the uninterrupted one did.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import torch

ADAPTER_DIR = "adapter"
ADAPTER_META = "evolve_train.json"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt")


def has_weights(directory: Path) -> bool:
    """Whether ``directory`` itself holds model weights (one file or a sharded index)."""
    return any(p.is_file() and p.suffix in WEIGHT_SUFFIXES for p in directory.iterdir())


def is_adapter_only(path) -> bool:
    """A run's LoRA checkpoint saved without merged weights."""
    directory = Path(path)
    return directory.is_dir() and (directory / ADAPTER_DIR / ADAPTER_META).is_file() and not has_weights(directory)


def subtract_adapter(peft_model) -> None:
    """base weight -= alpha/r * B @ A for every adapted layer (the inverse of merging)."""
    from peft.tuners.lora import LoraLayer

    with torch.no_grad():
        for module in peft_model.modules():
            if isinstance(module, LoraLayer) and "default" in module.lora_A:
                weight = module.get_base_layer().weight
                weight -= module.get_delta_weight("default").to(weight.dtype)


def chain(path) -> tuple[Path, list[Path]]:
    """(the last checkpoint at or before ``path`` with full weights, the adapter-only ones after it, in order)."""
    directory = Path(path)
    steps_root, step = directory.parent, int(directory.name)
    after = []
    while step >= 0 and is_adapter_only(steps_root / str(step)):
        after.append(steps_root / str(step))
        step -= 1
    base = steps_root / str(step)
    if step < 0 or not base.is_dir() or not has_weights(base):
        raise FileNotFoundError(
            f"{path} holds a LoRA adapter without merged weights; rebuilding it needs the "
            f"last full checkpoint before it, and {base} holds none (was it deleted?)"
        )
    return base, after[::-1]


def load_adapter_only(path, cfg, from_pretrained: Callable) -> torch.nn.Module:
    """The merged model of the adapter-only checkpoint ``path`` (see the module docstring);
    ``from_pretrained(dir, cfg)`` loads a checkpoint that has full weights."""
    from peft import PeftModel

    base, steps = chain(path)
    model = from_pretrained(str(base), cfg).to(merge_device())
    previous = base / ADAPTER_DIR if (base / ADAPTER_DIR / ADAPTER_META).is_file() else None
    for step in steps:
        if _across_steps(step) == "stack" and previous is not None:
            live = PeftModel.from_pretrained(model, str(previous))
            subtract_adapter(live)  # merged -> base, as prepare_model does before the step trains on
            model = live.unload()
        model = PeftModel.from_pretrained(model, str(step / ADAPTER_DIR)).merge_and_unload()
        previous = step / ADAPTER_DIR
    return model


def merge_device() -> torch.device:
    """Where the run merged its adapters: this process's CUDA device when there is one (so the rebuild
    computes ``B @ A`` with the same kernels as the run did), else the CPU."""
    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")


def _across_steps(step: Path) -> str:
    return json.loads((step / ADAPTER_DIR / ADAPTER_META).read_text(encoding="utf-8"))["across_steps"]
