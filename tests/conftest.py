"""Test set-up shared by every tier: ``tests/`` on the import path (``from helpers import ...``), W&B and the hub
off, and the fixtures more than one module uses. The widest ones are built once per test process: a test reads
what they hold and never writes into it."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from helpers import train_tiny  # noqa: E402
from helpers.faults import FAST
from helpers.models import TEXTS


@pytest.fixture(scope="session")
def reference(tmp_path_factory) -> Path:
    """The uninterrupted tiny run (``tiny_cfg`` with ``FAST``): what a resumed, preempted or averaged run is
    compared with. Read it; never write into it."""
    return train_tiny(tmp_path_factory.mktemp("reference"), *FAST)


@pytest.fixture(scope="session")
def tokenizer():
    """A 200-token BPE tokenizer trained on ``helpers.models.TEXTS``."""
    from evolve_train.models.build import train_tokenizer

    return train_tokenizer(TEXTS, vocab_size=200)


def _find_chromium():
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.fixture(scope="session")
def chromium() -> str:
    """Debian's chromium, installed with apt-get when absent (skipped where it cannot be installed)."""
    found = _find_chromium()
    if not found and shutil.which("apt-get"):
        env = {"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
        for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "chromium"]):
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
            if done.returncode != 0:
                pytest.skip(f"chromium is not installed and `{' '.join(command)}` failed: {done.stderr[-300:]}")
        found = _find_chromium()
    if not found:
        pytest.skip("chromium is not installed and apt-get is not available to install it")
    return found


UNIT = Path(__file__).parent / "unit"


def pytest_collection_modifyitems(config, items):
    """The unit tier (what `make test` runs) stays fast: a test marked slow there is a collection error."""
    misplaced = [item.nodeid for item in items if item.get_closest_marker("slow") and UNIT in Path(item.path).parents]
    if misplaced:
        raise pytest.UsageError(f"slow tests belong in tests/e2e, tests/distributed or tests/cluster: {misplaced}")
    # Modules with a slow test first (the order is stable otherwise): pytest-xdist's loadscope hands out modules in
    # this order, so the longest start early and the two workers finish together instead of one waiting on the
    # last long module.
    slow_modules = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_modules)
