"""The memory preflight (``training/preflight.py``): its estimate against measured peaks, its refusal, and the run
that stops on it before anything is written."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
import torch

from evolve_train.compose import compose_config
from evolve_train.errors import ConfigError
from evolve_train.training.preflight import GIB, run_preflight
from helpers.processes import ROOT


sys.path.insert(0, str(ROOT / "scripts"))


@pytest.mark.slow
@pytest.mark.parametrize("size", ["tiny", "small"])
def test_the_estimate_is_within_a_quarter_of_the_measured_peak(size):
    from bench_memory import SIZES, measure, preflight_estimate

    measured = measure("train_chunked", size)["peak_bytes"]
    estimated = preflight_estimate(SIZES[size])
    assert 0.75 <= estimated / measured <= 1.25, (estimated / GIB, measured / GIB)


def test_a_run_that_cannot_fit_stops_before_its_run_dir_is_written(tmp_path, monkeypatch):
    from evolve_train.training import preflight

    monkeypatch.setattr(preflight, "device_memory", lambda device, local: 0.5 * GIB)
    cfg = compose_config(["model=llama_1b_random", f"run_dir={tmp_path / 'run'}", "logger.backends=[disk]"])
    accelerator = SimpleNamespace(device=torch.device("cpu"), num_processes=1, mixed_precision="no")
    with pytest.raises(ConfigError, match="Would fit"):
        run_preflight(cfg, accelerator)
    cfg.trainer.memory_preflight = "warn"
    assert run_preflight(cfg, accelerator).total > 4 * GIB  # 1.24e9 fp32 weights alone
    cfg.trainer.memory_preflight = "maybe"
    with pytest.raises(ConfigError, match="trainer.memory_preflight must be one of check, warn, off"):
        run_preflight(cfg, accelerator)
    from evolve_train.run import ContinualRun

    cfg.trainer.memory_preflight = "check"
    with pytest.raises(ConfigError, match="memory preflight"):
        ContinualRun(cfg).setup()
    assert not (tmp_path / "run").exists()
