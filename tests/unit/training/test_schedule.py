"""LR schedules across time steps (training/schedule.py): closed forms at chosen updates, the loop's use of them,
and kill-and-resume mid-step for ``wsd`` and ``infinite``."""

from __future__ import annotations

import math

import pytest
from helpers import tiny_cfg

from evolve_train.config import TrainerConfig
from evolve_train.errors import ConfigError
from evolve_train.training.schedule import lr_at, lr_factor, peak


TOTAL, WARMUP, MIN = 20, 4, 0.1


def factor(time_step: int, t: int, n_time_steps: int = 3, **settings) -> float:
    cfg = TrainerConfig(warmup_steps=WARMUP, min_lr_ratio=MIN, **settings)
    return lr_factor(cfg, time_step, TOTAL, n_time_steps)(t)


def previous_lr_lambda(warmup: int, total: int, min_ratio: float):
    """The loop's schedule before training/schedule.py, verbatim (git history of training/loop.py)."""

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return max(min_ratio, 1.0 - (1.0 - min_ratio) * progress)

    return factor


@pytest.mark.parametrize("warmup,total,min_ratio", [(30, 100, 0.1), (2, 12, 0.1), (0, 7, 0.0), (50, 100, 0.3)])
def test_the_default_linear_schedule_is_the_previous_one_bit_for_bit(warmup, total, min_ratio):
    cfg = TrainerConfig(warmup_steps=warmup, min_lr_ratio=min_ratio)
    old = previous_lr_lambda(warmup, total, min_ratio)
    for step in (0, 1, 2, 5):  # every step warms up by default (rewarm=all), peaks constant
        new = lr_factor(cfg, step, total, n_time_steps=6)
        assert [new(t) for t in range(total + 2)] == [old(t) for t in range(total + 2)]


def test_warmup_is_clamped_to_half_the_planned_updates_with_a_log_line(caplog):
    from evolve_train.training.schedule import warmup_updates

    cfg = TrainerConfig(warmup_steps=100, min_lr_ratio=0.1)
    assert warmup_updates(cfg, 1, 4) == 2 and warmup_updates(cfg, 1, 1) == 1 and warmup_updates(cfg, 1, 400) == 100
    with caplog.at_level("INFO", logger="evolve_train.training.schedule"):
        factor = lr_factor(cfg, 1, 4, n_time_steps=3)
    assert [factor(t) for t in range(4)] == [0.5, 1.0, 1.0, 1.0 - 0.9 / 2]  # the peak is reached, then decays
    assert "warmup clamped to 2 updates (trainer.warmup_steps=100; 4 planned updates" in caplog.text
    caplog.clear()
    with caplog.at_level("INFO", logger="evolve_train.training.schedule"):
        lr_factor(cfg, 1, 400, n_time_steps=3)
    assert "clamped" not in caplog.text


def test_a_token_budget_far_under_one_pass_is_warned_with_its_numbers(caplog):
    from evolve_train.training.schedule import warn_short_budget

    with caplog.at_level("WARNING", logger="evolve_train.training.schedule"):
        warn_short_budget(2, 5_000, 1_000_000)
        warn_short_budget(3, 500_000, 1_000_000)
    assert "time step 2: the token budget (5000 tokens) covers 0.5% of one pass over the step's 1000000 tokens" in (
        caplog.text
    )
    assert "time step 3" not in caplog.text


@pytest.mark.parametrize(
    "settings,t,expected",
    [
        ({}, 1, 2 / 4),
        ({}, 4, 1.0),
        ({}, 12, 1 - 0.9 * 8 / 16),
        ({"schedule": "cosine"}, 2, 3 / 4),
        ({"schedule": "cosine"}, 12, 0.1 + 0.9 * 0.5),
        ({"schedule": "cosine"}, 19, 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 15 / 16))),
        ({"schedule": "constant"}, 0, 1 / 4),
        ({"schedule": "constant"}, 17, 1.0),
        # wsd, cooldown_fraction 0.25: 5 cooldown updates from update 15
        ({"schedule": "wsd", "cooldown_fraction": 0.25}, 3, 1.0),
        ({"schedule": "wsd", "cooldown_fraction": 0.25}, 14, 1.0),
        ({"schedule": "wsd", "cooldown_fraction": 0.25}, 15, 1 - 0.9 / 5),
        ({"schedule": "wsd", "cooldown_fraction": 0.25}, 19, 0.1),
        # rsqrt (timescale 4): sqrt(4 / (t + 1)); cooldown from its value at 15, sqrt(4 / 16) = 0.5
        ({"schedule": "rsqrt", "cooldown_fraction": 0.25}, 8, 2 / 3),
        ({"schedule": "rsqrt", "cooldown_fraction": 0.25}, 17, 0.5 - 0.4 * 3 / 5),
        ({"schedule": "rsqrt", "cooldown_fraction": 0.25}, 19, 0.1),
    ],
)
def test_each_schedule_equals_its_closed_form_at_step_one(settings, t, expected):
    assert factor(1, t, **settings) == pytest.approx(expected, rel=1e-12)


def test_infinite_warms_up_once_then_holds_the_constant_and_cools_down_every_step():
    settings = {"schedule": "infinite", "cooldown_fraction": 0.25, "constant_lr_ratio": 0.5}
    # step 0: warmup to the peak, cosine to the constant over [4, 15), cooldown 0.5 -> 0.1 over [15, 20)
    assert factor(0, 2, **settings) == pytest.approx(3 / 4)
    assert factor(0, 4, **settings) == pytest.approx(1.0)
    assert factor(0, 9, **settings) == pytest.approx(0.5 + 0.5 * 0.5 * (1 + math.cos(math.pi * 5 / 11)))
    assert factor(0, 15, **settings) == pytest.approx(0.5 - 0.4 / 5)
    assert factor(0, 19, **settings) == pytest.approx(0.1)
    for step in (1, 2):  # no warmup, although rewarm=all (the default)
        assert factor(step, 0, **settings) == pytest.approx(0.5)
        assert factor(step, 14, **settings) == pytest.approx(0.5)
        assert factor(step, 19, **settings) == pytest.approx(0.1)


def test_rewarm_first_and_none():
    assert factor(0, 0, rewarm="none") == pytest.approx(1 / 4)  # step 0 always warms up
    assert factor(1, 0, rewarm="none") == pytest.approx(1.0)
    assert factor(1, 10, rewarm="none") == pytest.approx(1 - 0.9 * 10 / 20)
    assert factor(1, 0, rewarm="first") == pytest.approx(1 / 4)
    assert factor(2, 0, rewarm="first") == pytest.approx(1.0)
    assert factor(2, 0, rewarm="first", schedule="cosine") == pytest.approx(1.0)
    assert factor(2, 10, rewarm="first", schedule="cosine") == pytest.approx(0.1 + 0.9 * 0.5)


def test_the_ar_meta_schedule_scales_each_steps_curve_by_a_global_cosine_peak():
    cfg = TrainerConfig(warmup_steps=WARMUP, min_lr_ratio=MIN, lr=1e-3, peak_schedule="cosine_over_steps")
    assert peak(cfg, 0, 4) == 1.0
    assert peak(cfg, 2, 4) == pytest.approx(0.55)  # 0.1 + 0.9 * (1 + cos(pi / 2)) / 2
    assert peak(cfg, 3, 4) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(3 * math.pi / 4)))
    assert lr_at(cfg, 2, 4, TOTAL, 4) == pytest.approx(1e-3 * 0.55)  # the step's peak, after its warmup
    assert lr_at(cfg, 2, 12, TOTAL, 4) == pytest.approx(1e-3 * 0.55 * (1 - 0.9 * 8 / 16))


def test_step0_schedule_shapes_step0_alone():
    shared = {"step0_schedule": "linear", "cooldown_fraction": 0.25}
    for kind in ("cosine", "wsd", "infinite"):
        # step 0 runs the linear curve whatever trainer.schedule is; later steps run trainer.schedule
        assert [factor(0, t, schedule=kind, **shared) for t in range(TOTAL)] == [
            factor(0, t, schedule="linear", cooldown_fraction=0.25) for t in range(TOTAL)
        ]
        for step in (1, 2):
            assert [factor(step, t, schedule=kind, **shared) for t in range(TOTAL)] == [
                factor(step, t, schedule=kind, cooldown_fraction=0.25) for t in range(TOTAL)
            ]
    # and the other way round: an infinite step 0 (cosine to the constant) under a linear run
    assert factor(
        0, 9, schedule="linear", step0_schedule="infinite", cooldown_fraction=0.25, constant_lr_ratio=0.5
    ) == pytest.approx(0.5 + 0.5 * 0.5 * (1 + math.cos(math.pi * 5 / 11)))
    assert factor(1, 12, schedule="linear", step0_schedule="infinite") == pytest.approx(1 - 0.9 * 8 / 16)


@pytest.mark.parametrize(
    "override,needle",
    [
        ("trainer.schedule=warm", "trainer.schedule"),
        ("trainer.step0_schedule=warm", "trainer.step0_schedule"),
        ("trainer.cooldown_fraction=1.5", "trainer.cooldown_fraction"),
        ("trainer.constant_lr_ratio=0", "trainer.constant_lr_ratio"),
        ("trainer.rewarm=some", "trainer.rewarm"),
    ],
)
def test_bad_schedule_settings_are_refused_naming_the_key(tmp_path, override, needle):
    from omegaconf import OmegaConf

    with pytest.raises(Exception, match=needle.split(".")[1]):
        OmegaConf.to_object(tiny_cfg(tmp_path, override))


def test_config_error_for_python_built_settings():
    with pytest.raises(ConfigError, match="trainer.schedule"):
        TrainerConfig(schedule="warm")


def test_rewarm_first_is_refused_with_infinite_which_never_rewarms(tmp_path):
    from omegaconf import OmegaConf

    with pytest.raises(ConfigError, match=r"trainer.rewarm=first with trainer.schedule=infinite.*Drop trainer.rewarm"):
        TrainerConfig(schedule="infinite", rewarm="first")
    with pytest.raises(Exception, match=r"trainer.rewarm=first with trainer.schedule=infinite"):
        OmegaConf.to_object(tiny_cfg(tmp_path, "trainer.schedule=infinite", "trainer.rewarm=first"))
    # what infinite does with all (the default) and none is the same curve; both stay accepted
    curves = [
        [factor(step, t, schedule="infinite", rewarm=rewarm) for step in (0, 1, 2) for t in range(TOTAL)]
        for rewarm in ("all", "none")
    ]
    assert curves[0] == curves[1]
    TrainerConfig(schedule="wsd", rewarm="first")
    TrainerConfig(schedule="linear", step0_schedule="infinite", rewarm="first")  # later steps re-warm: meaningful
