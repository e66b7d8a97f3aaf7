"""Renamed configuration keys and evaluator names: the former spelling is read as the current one, with a warning
on the command line, and a run saved under the former names resumes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from evolve_train.compose import compose_config
from evolve_train.config_identity import config_diff, result_config
from evolve_train.config_renames import current_key, renamed_overrides
from evolve_train.evaluation.rows import read_metrics
from evolve_train.utils.io import write_jsonl
from helpers.processes import ROOT


def test_a_former_key_on_the_command_line_is_rewritten_with_a_warning():
    with pytest.warns(FutureWarning, match=r"'eval.contamination.variants' is now 'eval.paraphrase_gap.variants'"):
        out = renamed_overrides(["eval.contamination.variants=5", "trainer.lr=1e-3", "-m"])
    assert out == ["eval.paraphrase_gap.variants=5", "trainer.lr=1e-3", "-m"]
    with pytest.warns(FutureWarning):
        assert renamed_overrides(["++eval.gate.contamination_gap_max=0.1"]) == ["++eval.gate.paraphrase_gap_max=0.1"]
    assert current_key("eval.contamination_x") is None  # a prefix of a name is not the name


def test_the_composed_config_holds_the_former_keys_values_under_the_current_names():
    with pytest.warns(FutureWarning):
        cfg = compose_config(
            [
                "eval.contamination.variants=2",
                "eval.gate.contamination_gap_max=0.2",
                "eval.evaluators=[splits,contamination]",
            ]
        )
    assert cfg.eval.paraphrase_gap.variants == 2 and cfg.eval.gate.paraphrase_gap_max == 0.2
    assert cfg.eval.evaluators == ["splits", "paraphrase_gap"]


def test_a_config_recorded_under_the_former_names_compares_equal():
    now = result_config(compose_config(["eval.evaluators=[splits,paraphrase_gap]"]))
    recorded = {
        key.replace("eval.paraphrase_gap", "eval.contamination"): value
        for key, value in now.items()
        if key != "eval.evaluators"
    }
    recorded["eval.evaluators"] = ["splits", "contamination"]
    assert recorded.keys() != now.keys()
    assert config_diff(recorded, now) == ([], [], [])
    recorded["eval.contamination.variants"] = 7
    assert config_diff(recorded, now)[0] == [("eval.paraphrase_gap.variants", 7, now["eval.paraphrase_gap.variants"])]


def test_rows_written_under_the_former_group_and_key_read_under_the_current_ones(tmp_path):
    row = {"group": "contamination", "checkpoint": 1, "set_name": "all", "contamination_gap": 0.25}
    row["by_kind"] = {"case": {"contamination_gap": 0.5, "n": 2}}
    write_jsonl(tmp_path / "metrics.jsonl", [row, {"group": "flip_rate", "checkpoint": 1, "flip_rate": 0.1}])
    first, second = read_metrics(tmp_path)
    assert first["group"] == "paraphrase_gap" and first["paraphrase_gap"] == 0.25 and "contamination_gap" not in first
    assert first["by_kind"] == {"case": {"paraphrase_gap": 0.5, "n": 2}}
    assert second == {"group": "flip_rate", "checkpoint": 1, "flip_rate": 0.1}


def test_train_py_and_evolve_train_take_a_former_key(tmp_path):
    """``--cfg job`` prints the composed config without running: the former key passed the strict check and
    landed under its current name."""
    repo = ROOT
    env = {**os.environ, "PYTHONPATH": str(repo), "WANDB_MODE": "disabled"}
    for command in ([sys.executable, str(repo / "train.py")], [sys.executable, "-m", "evolve_train.cli.train"]):
        done = subprocess.run(
            [*command, "eval.contamination.variants=2", "--cfg", "job"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert "paraphrase_gap:\n    variants: 2" in done.stdout, done.stdout[-3000:]
        assert "'eval.contamination.variants' is now 'eval.paraphrase_gap.variants'" in done.stderr
        assert not any(tmp_path.iterdir())  # nothing written
