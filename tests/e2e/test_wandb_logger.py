"""The W&B logger, checked on the offline run files wandb 0.31 writes.

wandb 0.31 writes no ``config.yaml`` / ``wandb-summary.json`` for offline runs and ``wandb.Api`` cannot read
them, so the tests read the run's ``run-<id>.wandb`` file: a LevelDB-style log (7-byte ``:W&B`` header,
32 KiB blocks, records of crc32/length/type + payload) of ``wandb_internal_pb2.Record`` protobufs.
"""

from __future__ import annotations

import json
import shutil

import pytest

from evolve_train.run import train
from evolve_train.tracking.disk import read_jsonl
from evolve_train.tracking.wandb_logger import RUN_ID_FILE
from helpers import tiny_cfg
from helpers.runs import offline_runs, parse_offline_run


def experiment_cfg(run_dir, *overrides):
    """tiny_cfg with the experiment name ``wbexp`` (set on the composed config: on the command line
    ``experiment=...`` selects a configs/experiment overlay)."""
    cfg = tiny_cfg(run_dir, *overrides)
    cfg.experiment = "wbexp"
    return cfg


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """Two tiny runs (seeds 0 and 1) of experiment ``wbexp`` (method full) logging offline to W&B."""
    root = tmp_path_factory.mktemp("wandb_runs")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WANDB_MODE", "offline")
        mp.setenv("WANDB_SILENT", "true")
        dirs = []
        for seed in (0, 1):
            run_dir = root / f"seed{seed}"
            train(
                experiment_cfg(
                    run_dir,
                    f"seed={seed}",
                    "logger.backends=[disk,wandb]",
                    "logger.wandb.tags=[tiny,ci]",
                    "+extra.api_key=SECRET-VALUE",
                    "+extra.hf_token=SECRET-TOKEN",
                )
            )
            dirs.append(run_dir)
    return dirs


def test_offline_runs_share_group_and_name_method(two_runs):
    ids = set()
    for seed, run_dir in enumerate(two_runs):
        (folder,) = offline_runs(run_dir)
        parsed = parse_offline_run(folder)
        run = parsed["run"]
        assert run.run_group == "wbexp" and run.job_type == "full"
        assert run.display_name == f"wbexp/full/seed{seed}"
        assert list(run.tags) == ["tiny", "ci"]
        assert run.run_id == (run_dir / RUN_ID_FILE).read_text().strip() == folder.name.rsplit("-", 1)[1]
        ids.add(run.run_id)
        config = parsed["config"]
        assert config["seed"] == seed and config["trainer"]["lr"] == tiny_cfg(run_dir).trainer.lr
        assert config["eval"]["max_new_tokens"] == tiny_cfg(run_dir).eval.max_new_tokens  # not a "secret"
        assert "tokenizer" in config["model"]
        assert "api_key" not in config["extra"] and "hf_token" not in config["extra"]
        assert "SECRET" not in json.dumps(config)
        record = config["provenance"]  # the same provenance as summary.json's (utils/provenance.py)
        summary = json.loads((run_dir / "summary.json").read_text())["provenance"]
        assert {k: record[k] for k in ("commit", "versions", "cpu", "gpu_count")} == {
            k: summary[k] for k in ("commit", "versions", "cpu", "gpu_count")
        }
        assert record["versions"]["torch"] and record["num_processes"] == 1
        assert parsed["exit_code"] == 0
    assert len(ids) == 2


def test_curves_summary_and_tables_match_metrics_jsonl(two_runs):
    run_dir = two_runs[1]
    parsed = parse_offline_run(offline_runs(run_dir)[0])
    rows = [r for r in read_jsonl(run_dir / "metrics.jsonl") if r["group"] == "splits"]
    final = max(r["checkpoint"] for r in rows)
    # one forgetting curve per split, drawn against time_step
    assert parsed["metrics"]["em/*"] == "time_step" and parsed["metrics"]["train/*"] == "train/global_step"
    curve = {h["time_step"]: h["em/unchanged"] for h in parsed["history"] if "em/unchanged" in h}
    assert curve == {r["checkpoint"]: r["em"] for r in rows if r["set_name"] == "unchanged"}
    assert sorted(curve) == [0, 1, 2]
    # the summary holds the final checkpoint's metrics
    for row in rows:
        if row["checkpoint"] == final:
            assert parsed["summary"][f"em/{row['set_name']}"] == row["em"]
            assert parsed["summary"][f"f1/{row['set_name']}"] == row["f1"]
    assert parsed["summary"]["final_checkpoint"] == final
    # training loss against a global optimizer step, one point per train_log row
    train_rows = read_jsonl(run_dir / "train_log.jsonl")
    loss = [(h["train/global_step"], h["train/loss"]) for h in parsed["history"] if "train/loss" in h]
    assert [v for _, v in loss] == [r["loss"] for r in train_rows]
    steps = [s for s, _ in loss]
    assert steps == sorted(steps) and len(set(steps)) == len(steps)
    # prediction samples per checkpoint and the matrices as tables
    tables = {k for h in parsed["history"] for k in h if k.endswith("/_type")}
    assert {"predictions/step_0/_type", "predictions/step_2/_type", "final/matrix_em/_type"} <= tables
    table_files = list((offline_runs(run_dir)[0] / "files" / "media" / "table").rglob("*.table.json"))
    matrix = json.loads(next(p for p in table_files if "final/matrix_em" in str(p).replace("\\", "/")).read_text())
    assert matrix["columns"][0] == "checkpoint" and len(matrix["data"]) == final + 1
    # a metric's 95 % interval reaches W&B as two numbers next to it
    paired = next(
        r
        for r in read_jsonl(run_dir / "metrics.jsonl")
        if r["group"] == "paired" and r.get("set_name") == "all" and r["checkpoint"] == final
    )
    low, high = paired["update_adoption_ci"]
    assert (
        parsed["summary"]["paired/all/update_adoption_ci_low"],
        parsed["summary"]["paired/all/update_adoption_ci_high"],
    ) == (low, high)


def test_resume_reuses_run_id_and_continues_global_step(two_runs, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run_dir = tmp_path / "run"
    shutil.copytree(two_runs[0], run_dir)
    first = parse_offline_run(offline_runs(run_dir)[0])
    state = json.loads((run_dir / "state.json").read_text())  # forget step 2: the resume retrains it
    state["trained"], state["evaluated"] = [0, 1], [0, 1]
    (run_dir / "state.json").write_text(json.dumps(state))
    shutil.rmtree(run_dir / "steps" / "2")
    train(experiment_cfg(run_dir, "seed=0", "logger.backends=[disk,wandb]"))  # the same config (experiment too)
    folders = offline_runs(run_dir)
    assert len(folders) == 2
    resumed = parse_offline_run(folders[1])
    saved_id = (run_dir / RUN_ID_FILE).read_text().strip()
    assert resumed["run"].run_id == first["run"].run_id == saved_id
    steps_before = [h["train/global_step"] for h in first["history"] if h.get("train/time_step") == 1]
    steps_after = [h["train/global_step"] for h in resumed["history"] if "train/global_step" in h]
    assert steps_after and min(steps_after) > max(steps_before)  # step 2 continues after step 1
    assert {h["time_step"] for h in resumed["history"] if "em/unchanged" in h} == {2}
