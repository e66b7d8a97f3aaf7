"""``method.average``: the checkpoint of step k is the uniform mean (or EMA) of the steps' trained weights;
training continues from the raw weights (or the average) and resumes from them."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import tiny_cfg
from safetensors.torch import load_file

from evolve_train.run import train
from evolve_train.training import carry, faults

FAST = ["eval.evaluators=[splits]", "trainer.num_threads=1"]


class Boom(Exception):
    pass


def weights(run_dir, step: int) -> dict[str, torch.Tensor]:
    return load_file(str(run_dir / "steps" / str(step) / "model.safetensors"))


def close(a: dict, b: dict, tol: float = 1e-6) -> bool:
    return a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=tol, rtol=0) for k in a)


@pytest.fixture(autouse=True)
def keep_threads(monkeypatch):
    monkeypatch.setattr(faults, "_arrivals", {})
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_uniform_equals_the_mean_of_the_saved_step_weights(tmp_path, reference):
    run_dir = tmp_path / "uniform"
    train(tiny_cfg(run_dir, *FAST, "method.average=uniform"))
    raw = [weights(reference, k) for k in range(3)]
    for k in range(3):
        manual = {name: torch.stack([r[name] for r in raw[: k + 1]]).mean(dim=0) for name in raw[0]}
        assert close(weights(run_dir, k), manual), k
    # training went on from the raw weights: the last ones are kept for a continuation, those of the plain run
    kept = carry.load(run_dir, 2, carry.RAW_FILE)
    assert all(torch.equal(kept[name], raw[2][name]) for name in raw[2])
    # what is evaluated is the checkpoint (the average)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert {r["checkpoint"] for r in rows} == {0, 1, 2}


def test_ema_and_continuing_from_the_average(tmp_path, reference):
    run_dir = tmp_path / "ema"
    train(
        tiny_cfg(
            run_dir,
            *FAST,
            "method.average=ema",
            "method.ema_decay=0.75",
            "method.average_continue=average",
            "data.world.n_steps=2",
        )
    )
    raw = [weights(reference, k) for k in range(2)]  # step 1 trains from avg_0 = raw_0: the plain run's step 1
    assert close(weights(run_dir, 0), raw[0], tol=0)
    assert close(weights(run_dir, 1), {n: 0.75 * raw[0][n] + 0.25 * raw[1][n] for n in raw[0]})
    assert not (carry.carry_dir(run_dir, 1) / carry.RAW_FILE).exists()  # nothing to continue from but steps/1


def test_a_resume_continues_from_the_kept_raw_weights(tmp_path, monkeypatch):
    settings = [*FAST, "method.average=uniform"]
    reference = tmp_path / "reference"
    train(tiny_cfg(reference, *settings))
    run_dir = tmp_path / "run"
    calls = {"n": 0}

    def point(where):
        if where == "evaluate":
            calls["n"] += 1
            if calls["n"] == 3:  # step 2's evaluation: step 2 trains again, from carry/1/raw.safetensors
                raise Boom(where)

    monkeypatch.setattr(faults, "point", point)
    with pytest.raises(Boom):
        train(tiny_cfg(run_dir, *settings))
    assert (carry.carry_dir(run_dir, 1) / carry.RAW_FILE).is_file()
    monkeypatch.setattr(faults, "point", lambda where: None)
    train(tiny_cfg(run_dir, *settings))
    for k in range(3):
        a, b = weights(reference, k), weights(run_dir, k)
        assert all(torch.equal(a[n], b[n]) for n in a), k


def test_bad_average_settings_are_refused(tmp_path):
    from omegaconf import OmegaConf

    with pytest.raises(Exception, match="average"):
        OmegaConf.to_object(tiny_cfg(tmp_path, "method.average=median"))
    with pytest.raises(Exception, match="ema_decay"):
        OmegaConf.to_object(tiny_cfg(tmp_path, "method.ema_decay=1.0"))
