"""Shared test helpers: a tiny, fast configuration of the real recipe."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from evolve_train.evaluation.metrics.directions import is_wall_clock as wall_clock  # noqa: F401 (tests import it)

CONFIG_DIR = str(Path(__file__).resolve().parents[2] / "configs")

TINY = [
    "data.world.n_entities=12",
    "data.world.new_entities_per_step=4",
    "data.world.n_people=10",
    "data.world.n_cities=10",
    "trainer.epochs_step0=3",
    "trainer.epochs=2",
    "trainer.batch_size=16",
    "trainer.warmup_steps=2",
    "trainer.lr=2e-3",
    "trainer.log_every=2",
    "model.n_layer=1",
    "model.n_embd=32",
    "model.n_head=2",
    "model.vocab_size=300",
    "eval.max_new_tokens=16",
    # the shipped 25,000-word python_docs text costs about a quarter of a tiny run (2.5 of 10 s, mostly scoring
    # it at every checkpoint); the heldout evaluator still runs on `general`, and tests/unit/evaluation scores both
    "eval.heldout_text=[general]",
    "logger.backends=[disk]",
    "trainer.num_threads=1",
]


def tiny_cfg(run_dir: Path | str, *overrides: str) -> DictConfig:
    """The default config shrunk to run three time steps in a few seconds, writing to ``run_dir``."""
    import evolve_train.config  # noqa: F401  (registers the typed schema as base_config, as train.py does)

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose(config_name="config", overrides=[*TINY, f"run_dir={run_dir}", *overrides])


def train_tiny(run_dir: Path | str, *overrides: str) -> Path:
    """``run_dir`` trained in this process on :func:`tiny_cfg` with ``overrides`` (a failure raises out of
    ``train()``); torch's thread count is put back afterwards (``trainer.num_threads`` sets it for the process)."""
    import torch

    from evolve_train.run import train

    threads = torch.get_num_threads()
    try:
        train(tiny_cfg(run_dir, *overrides))
    finally:
        torch.set_num_threads(threads)
    return Path(run_dir)


@contextlib.contextmanager
def deadline(seconds: int):
    """Fail (instead of hanging) if the block runs longer than ``seconds``: for code whose failure mode is a spin."""
    import signal

    def expired(signum, frame):
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def rows(run_dir: Path) -> list[dict]:
    """A run's metric rows without their wall-clock fields."""
    return [{k: v for k, v in r.items() if not wall_clock(k)} for r in read_jsonl(run_dir / "metrics.jsonl")]


def losses(run_dir: Path) -> list[tuple]:
    """``(time step, optimizer step, loss)`` of every line of a run's training log."""
    return [(r["time_step"], r["optimizer_step"], r.get("loss")) for r in read_jsonl(run_dir / "train_log.jsonl")]
