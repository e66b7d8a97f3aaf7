"""``python train.py data=dyknow`` on a fixture in DyKnow's layout (fast), and a one-step timeline on the real
DyKnow data (slow; skipped, saying why, when it has not been fetched)."""

import json
import os
import sys
from pathlib import Path

import pytest

from helpers import TINY, forked, tiny_cfg
from helpers.dyknow import write_fixture

from evolve_train.data.loaders.dyknow_fetch import default_root
from helpers.processes import ROOT

REPO = ROOT
REAL = Path(os.environ.get("EVOLVE_DYKNOW_ROOT") or default_root())
"""The real DyKnow data: ``$EVOLVE_DYKNOW_ROOT``, else the copy ``evolve-data fetch-data dyknow`` fetched."""


def rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_train_py_builds_the_dyknow_timeline_and_runs_every_evaluator(tmp_path):
    root = write_fixture(tmp_path / "dyknow")
    run_dir = tmp_path / "run"
    command = [
        sys.executable,
        "train.py",
        *TINY,
        "data=dyknow",
        f"data.root={root}",
        "data.dyknow.cuts=[2000,2005,2010]",
        "trainer.epochs_step0=2",
        "trainer.epochs=1",
        "eval.evaluators=[splits,paired,ablation,paraphrase_gap,flip_rate]",
        f"hydra.run.dir={run_dir}",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO), "WANDB_MODE": "disabled"}
    done = forked.python(command, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert all((run_dir / "steps" / str(k)).is_dir() for k in range(3))
    metrics = rows(run_dir)
    splits = {(r["checkpoint"], r["set_name"]): r["n"] for r in metrics if r.get("group") == "splits"}
    assert splits[(2, "unchanged")] == 1 and splits[(2, "updated_2")] == 2 and splits[(2, "outdated_1")] == 2
    assert splits[(1, "new_1")] == 1 and (0, "new_2") not in splits  # eval.forward_transfer: k+1 too
    groups = {r.get("group") for r in metrics}
    assert {"splits", "paired", "ablation", "paraphrase_gap", "flip_rate"} <= groups
    at = {(r.get("group"), r["set_name"], r["checkpoint"]): r for r in metrics if "set_name" in r}
    assert at[("paired", "paired_2", 2)]["n_pairs"] == 2
    flips = [at[("flip_rate", "updated_1", 2)]]
    assert flips and flips[0]["n"] == 2  # both questions asked in their held-out wordings too
    gap = at[("paraphrase_gap", "updated_1", 2)]
    assert gap["k"] == 2 and gap["by_kind"]["heldout"]["n"] == 2  # 2 held-out wordings each
    prediction = json.loads((run_dir / "predictions" / "step_1" / "updated_1.jsonl").read_text().splitlines()[0])
    assert prediction["prompt"].startswith("As of 2005, the ")


@pytest.mark.slow
@pytest.mark.skipif(
    not (REAL / "grc_generated.json").is_file(),
    reason=f"DyKnow's grc_generated.json is not in {REAL} (run `evolve-data fetch-data dyknow [--from COPY]`, or "
    "set EVOLVE_DYKNOW_ROOT): nothing of DyKnow ships with the project",
)
def test_one_step_timeline_on_the_real_dyknow_copy(tmp_path):
    from evolve_train.run import train

    run_dir = tmp_path / "run"
    train(
        tiny_cfg(
            run_dir,
            "data=dyknow",
            f"data.root={REAL}",
            "data.dyknow.cuts=[2018]",
            "data.dyknow.passages=true",
            "trainer.epochs_step0=1",
            "eval.evaluators=[splits]",
            "eval.max_items_per_set=16",
        )
    )
    assert (run_dir / "steps" / "0").is_dir() and not (run_dir / "steps" / "1").exists()
    splits = [r for r in rows(run_dir) if r.get("group") == "splits"]
    assert [r["set_name"] for r in splits] == ["unchanged"] and splits[0]["n"] == 16


@pytest.mark.parametrize("arm", ["full", "lora"])
def test_experiment_dyknow_arms_compose(tmp_path, arm):
    from omegaconf import OmegaConf

    from evolve_train.config import Config
    from evolve_train.run import validate

    cfg = OmegaConf.to_object(tiny_cfg(tmp_path, "experiment=dyknow", f"+dyknow_arm={arm}"))
    assert isinstance(cfg, Config)
    validate(cfg)
    assert (cfg.method.name, str(cfg.data.kind), cfg.eval.eval_initial) == (arm, "dyknow", True)
    assert cfg.model.name_or_path.endswith(
        "/.cache/evolve-train/models/smollm2-135m"
    ) or cfg.model.name_or_path.endswith("/models/smollm2-135m")
    assert cfg.data.root is None  # the fetched copy (trainer.lr: the tiny config's command line pins it)
    assert cfg.data.dyknow.categories == ["countries_byGDP", "athletes_byPayment", "organizations"]
