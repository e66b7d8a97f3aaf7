"""Where a result came from: the code's commit, the package versions, the machine and the command.

``provenance()`` is written into ``summary.json`` and ``state.json``, the W&B run's config and the report's
header, so a number can be traced to the code and hardware that produced it (as lm-evaluation-harness records
its git hash and environment in every result). Fields:

- ``created``: UTC time the record was made (ISO 8601);
- ``commit`` / ``dirty``: the git commit of the evolve-train source in use and whether its tracked files differ
  from it (both ``None`` outside a git checkout, e.g. an installed wheel);
- ``versions``: evolve-train and the libraries that shape results (``None`` for one not installed);
- ``python``, ``platform``;
- ``cpu``: the CPU's model name; ``gpu`` / ``gpu_count``: the first CUDA device's name and the number of devices
  (``None`` / 0 without CUDA);
- ``num_processes``: the processes of the run (``WORLD_SIZE`` under accelerate/torchrun, else 1);
- ``command``: the command line, shell-quoted, with the value of any ``key=value`` whose key may hold a secret
  (``utils/secrets.py``) replaced by ``***``.
"""

from __future__ import annotations

import datetime
import functools
import os
import platform
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any, Optional

from evolve_train.utils.secrets import is_secret_key

PACKAGES = ("evolve-train", "torch", "transformers", "peft", "accelerate", "datasets", "hydra-core", "numpy")
"""Distributions whose versions are recorded."""

SOURCE = Path(__file__).resolve().parents[2]
"""The directory above the ``evolve_train`` package: a git checkout when running from a clone."""


def _git(*args: str) -> Optional[str]:
    try:
        done = subprocess.run(
            ["git", "-C", str(SOURCE), *args], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_state() -> tuple[Optional[str], Optional[bool]]:
    """(commit, dirty) of the source checkout; (None, None) when the package is not in a git work tree."""
    if not (SOURCE / "evolve_train").is_dir() or _git("rev-parse", "--is-inside-work-tree") != "true":
        return None, None
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no")
    return commit, (None if status is None else bool(status))


def versions() -> dict[str, Optional[str]]:
    """Each of ``PACKAGES``' installed version; evolve-train's is the imported package's ``__version__`` (the code
    that runs: an editable install's metadata keeps the version it was installed at)."""
    import evolve_train

    out: dict[str, Optional[str]] = {"evolve-train": evolve_train.__version__}
    for name in PACKAGES[1:]:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else ``platform.processor()``)."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpus() -> tuple[Optional[str], int]:
    """(name of CUDA device 0, number of CUDA devices); (None, 0) without CUDA or torch."""
    torch = sys.modules.get("torch")
    if torch is None:
        try:
            import torch
        except ImportError:
            return None, 0
    if not torch.cuda.is_available():
        return None, 0
    return torch.cuda.get_device_name(0), torch.cuda.device_count()


def redact(argv: list[str]) -> list[str]:
    """``argv`` with the values of secret-looking ``key=value`` arguments replaced by ``***``."""
    out = []
    for arg in argv:
        key, sep, _ = arg.partition("=")
        out.append(f"{key}=***" if sep and is_secret_key(key.lstrip("+~-").rpartition(".")[2]) else arg)
    return out


@functools.lru_cache(maxsize=1)
def _static() -> dict[str, Any]:
    commit, dirty = git_state()
    gpu, gpu_count = gpus()
    return {
        "commit": commit,
        "dirty": dirty,
        "versions": versions(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": cpu_name(),
        "gpu": gpu,
        "gpu_count": gpu_count,
    }


def provenance(num_processes: Optional[int] = None, argv: Optional[list[str]] = None) -> dict[str, Any]:
    """The provenance record (see the module docstring); the machine and code parts are computed once per
    process."""
    world = num_processes if num_processes is not None else int(os.environ.get("WORLD_SIZE", "1") or 1)
    return {
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        **_static(),
        "num_processes": world,
        "command": shlex.join(redact(list(sys.argv if argv is None else argv))),
    }


def describe(record: dict[str, Any]) -> str:
    """One line: commit (+dirty), evolve-train / torch / transformers versions, Python, hardware, processes."""
    versions_ = record.get("versions") or {}
    commit = record.get("commit")
    code = "commit unknown" if not commit else f"commit {commit[:10]}{' (dirty)' if record.get('dirty') else ''}"
    hardware = f"{record.get('gpu_count')}x {record['gpu']}" if record.get("gpu") else f"CPU {record.get('cpu') or '?'}"
    libraries = ", ".join(f"{name} {versions_[name]}" for name in PACKAGES if versions_.get(name))
    return (
        f"{code}; {libraries}; Python {record.get('python', '?')}; {hardware}; "
        f"{record.get('num_processes', '?')} process(es)"
    )


__all__ = ["PACKAGES", "cpu_name", "describe", "git_state", "gpus", "provenance", "redact", "versions"]
