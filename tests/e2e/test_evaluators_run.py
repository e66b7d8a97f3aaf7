"""This suite's evaluators on a tiny real run (``eval=full`` settings): rows per checkpoint, summary.json,
the printed matrix."""

import json

import pytest

from evolve_train.config import DataConfig
from evolve_train.data.timeline import SET_KINDS
from evolve_train.data.world import generate_world
from evolve_train.evaluation.metrics import DIMENSIONS
from evolve_train.run import train
from helpers import tiny_cfg
from helpers.processes import ROOT

GROUPS = ("splits", "matrix", "paired", "ablation", "dimensions", "calibration", "grad_norms", "timing")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("full_eval")
    cfg = tiny_cfg(
        run_dir,
        "eval=full",
        f"eval.evaluators=[{','.join(GROUPS[:-1])}]",
        "eval.max_new_tokens=4",
        "eval.position_items=8",
        "eval.grad_norm_items=4",
        "trainer.num_threads=1",
    )
    summary = train(cfg)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return run_dir, summary, rows, cfg


def test_every_group_writes_rows_for_every_checkpoint(run):
    _, _, rows, _ = run
    for checkpoint in (-1, 0, 1, 2):
        groups = {r["group"] for r in rows if r["checkpoint"] == checkpoint}
        assert groups == set(GROUPS), checkpoint
    assert all(r["set"] in SET_KINDS for r in rows if r["group"] == "splits")  # probes stay out of splits


def test_paired_and_dimension_rows_cover_the_world(run):
    _, _, rows, cfg = run
    world = generate_world(DataConfig(world=cfg.data.world).world)
    last = {r["set_name"]: r for r in rows if r["checkpoint"] == 2 and r["group"] == "paired"}
    assert last["all"]["n_pairs"] == sum(len(c) for c in world.changes)
    assert set(last["all"]["time_accuracy"]) == {str(y) for y in world.years}
    assert last["all"]["old_knowledge_retention"]["n"] > 0 and last["all"]["now"]["n"] > 0
    dims = next(r for r in rows if r["checkpoint"] == 2 and r["group"] == "dimensions" and r["set_name"] == "all")
    assert set(dims["dimensions"]) == set(DIMENSIONS)
    grads = [r for r in rows if r["group"] == "grad_norms" and r["checkpoint"] == 1]
    assert {r["set"] for r in grads} == set(SET_KINDS)
    assert all(r["mean_grad_norm"] > 0 and 0 < r["n"] <= 4 for r in grads)
    ablation = next(r for r in rows if r["group"] == "ablation" and r["checkpoint"] == 2 and r["set_name"] == "all")
    assert ablation["n"] > 0 and ablation["k"] == 2  # three years: two other timestamps per question


def test_forward_transfer_sets_feed_the_matrix_but_not_the_probes(run):
    _, _, rows, _ = run
    assert any(r["group"] == "splits" and r["checkpoint"] == 0 and r["set_step"] == 1 for r in rows)
    assert not any(r["group"] == "paired" and r["checkpoint"] == 0 and (r["set_step"] or 0) > 0 for r in rows)


def test_summary_has_the_matrix_and_the_groups(run):
    run_dir, summary, _, _ = run
    on_disk = json.loads((run_dir / "summary.json").read_text())
    learned = on_disk["matrix"]["matrices"]["learned"]
    assert set(learned["A"]) == {"0", "1", "2"} and learned["A_init"] is not None
    assert set(learned["metrics"]["2"]) >= {"avg_acc", "bwt", "fwt", "forgetting", "forgetting_max"}
    assert set(on_disk["matrix"]["fuar"]) == {"1", "2"}
    assert set(on_disk["groups"]) == {"paired", "ablation", "dimensions", "calibration", "grad_norms"}
    assert summary["matrix"] == on_disk["matrix"]
    assert (run_dir / "predictions" / "step_2" / "paired_2.jsonl").exists()
    assert (run_dir / "predictions" / "step_2" / "dimension_1.jsonl").exists()


def test_the_matrix_is_printed(run, capsys):
    from evolve_train.reporting.summary import format_summary_table

    _, summary, _, _ = run
    text = format_summary_table(summary)
    assert "Continual-learning matrix 'learned'" in text and "\ninitial " in text
    assert "paired @ checkpoint 2" in text and "calibration @ checkpoint 2" in text


@pytest.mark.parametrize(
    "override, key",
    [
        ("eval.evaluators=[splits,nope]", "nope"),
        ("eval.ablation_k=0", "eval.ablation_k"),
        ("eval.overconfidence_tau=1.5", "eval.overconfidence_tau"),
        ("eval.grad_norm_items=-1", "eval.grad_norm_items"),
        ("+eval.time_slices.early=[null]", "eval.time_slices.early"),
        ("+eval.time_slices.early=[null,Febtember 2019]", "eval.time_slices.early"),
    ],
)
def test_bad_eval_settings_fail_before_training(tmp_path, override, key):
    from evolve_train.errors import ConfigError

    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        train(tiny_cfg(tmp_path / "run", override))
    assert not (tmp_path / "run" / "steps").exists()


@pytest.mark.parametrize("option", ["default", "full"])
def test_every_shipped_eval_config_names_registered_evaluators(option):
    """A fresh interpreter that imports only the evaluator module (as scripts/bench.py does) knows every
    evaluator a shipped eval config names; a missing registration import once broke the benchmark."""
    import subprocess
    import sys

    import yaml

    names = yaml.safe_load((ROOT / "configs/eval" / f"{option}.yaml").read_text())["evaluators"]
    code = "import sys; from evolve_train.evaluation.evaluator import check_evaluators; check_evaluators(sys.argv[1:])"
    result = subprocess.run([sys.executable, "-c", code, *names], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
