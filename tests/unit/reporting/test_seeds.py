"""Seeds in the report: runs that differ only by seed are grouped (by their saved Hydra config), shown as
mean ± 95% t-interval across seeds, drawn with a band per configuration, and compared pooled over seeds."""

from __future__ import annotations

import math

import pytest

from evolve_train.reporting.seeds import group_runs, t_interval
from evolve_train.reporting.runs import load_runs
from evolve_train.tracking.wandb_logger import run_identity
from helpers import tiny_cfg
from helpers.runs import make_run
from helpers.runs import hydra_run, sweep  # noqa: F401  (a fixture)


def test_t_interval_by_hand():
    stats = t_interval([0.5, 0.7, 0.6])
    assert stats.n == 3 and stats.mean == pytest.approx(0.6)
    assert (stats.low, stats.high) == pytest.approx(
        (0.6 - 4.302652729749462 * 0.1 / math.sqrt(3), 0.6 + 4.302652729749462 * 0.1 / math.sqrt(3))
    )
    assert stats.text() == f"0.600 ± {4.302652729749462 * 0.1 / math.sqrt(3):.3f}"
    assert t_interval([0.4, None]).text() == "0.400" and t_interval([]).text() == "-"


def test_runs_differing_only_by_seed_form_one_named_group(sweep, tmp_path):
    hydra_run(sweep / "other" / "x", "lora", 0, 0.5, lr=0.01)  # another learning rate: its own configuration
    groups = group_runs(load_runs([sweep]))
    assert [(g.name, g.seeds) for g in groups] == [
        ("method=full", [0, 1, 2]),
        ("method=lora", [0, 1, 2]),
        ("method=lora,trainer.lr=0.01", [0]),
    ]
    plain = make_run(tmp_path / "plain", 0, "full", 0.5)  # no .hydra/: a group of its own, labelled as before
    groups = group_runs(load_runs([sweep, plain]))
    assert groups[-1].config is None and groups[-1].name == groups[-1].runs[0].label


def test_wandb_group_per_sweep_and_names_with_the_overrides(tmp_path):
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_object(tiny_cfg(tmp_path, "method=lora", "seed=2"))
    assert run_identity(cfg) == ("default", "default/lora/seed2")
    assert run_identity(cfg, ("runs/default/multirun", "method=lora,seed=2")) == (
        "runs/default/multirun",
        "default/method=lora,seed=2",
    )
    cfg.logger.wandb.group = "mine"
    assert run_identity(cfg, ("runs/default/multirun", ""))[0] == "mine"
