"""Sweeps of multi-process runs: ``hydra/launcher=submitit_local_multi`` / ``submitit_slurm_multi`` make each sweep
point one submitit job of several tasks, and each task one rank of that point's run (training/submitit_env.py).

The slow test runs the local form on CPU (gloo): a ``method=full,lora`` sweep whose points are 2-process runs.
Each point must be the run a plain ``accelerate launch --num_processes 2`` makes of the same config: the same
world size, the same global batches, the same gloo reductions, so every metric row and training-log loss is
equal (timings aside), stricter than the 1e-5 / 0.1 tolerance of 2 processes against 1 (tests/distributed/test_ddp.py),
which the test checks too. The references share step 0 and the initial evaluation through one cache (a
2-process hit of both); the sweep's points share theirs through the sweep's.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from helpers import CONFIG_DIR, TINY, read_jsonl, train_tiny, wall_clock
from helpers.processes import ROOT, free_port, run
from hydra import compose, initialize_config_dir

from evolve_train.training import submitit_env

SCORE_TOLERANCE = 0.1  # EM/F1 of 2 processes against 1 (tests/distributed/test_ddp.py, docs/distributed.md)
FLAGS = ("from_eval_cache", "from_step0_cache")  # where a row came from, not what it says


def load_train_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("train_entry", ROOT / "train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def clean_env():
    """The environment as it was after the test (export_submitit_env writes os.environ itself)."""
    saved = dict(os.environ)
    for key in (*submitit_env.EXPORTED, "ACCELERATE_USE_CPU", "SUBMITIT_EXECUTOR"):
        os.environ.pop(key, None)
    yield os.environ
    os.environ.clear()
    os.environ.update(saved)


def slurm_task(env, procid: int, localid: int, node: int) -> None:
    env.update(
        SUBMITIT_EXECUTOR="slurm",
        SLURM_JOB_ID="4242",
        SLURM_NTASKS="16",
        SLURM_JOB_NUM_NODES="2",
        SLURM_JOB_NODELIST="gpu[07-08]",
        SLURM_PROCID=str(procid),
        SLURM_LOCALID=str(localid),
        SLURM_NODEID=str(node),
        CUDA_VISIBLE_DEVICES="0,1,2,3,4,5,6,7",
    )
    for key in ("SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID"):
        env.pop(key, None)


def test_a_task_of_a_two_node_slurm_job_gets_its_rank_and_the_jobs_master(clean_env):
    slurm_task(clean_env, procid=9, localid=1, node=1)
    exported = submitit_env.export_submitit_env()
    assert exported is not None
    assert (clean_env["RANK"], clean_env["WORLD_SIZE"]) == ("9", "16")
    assert (clean_env["LOCAL_RANK"], clean_env["LOCAL_WORLD_SIZE"]) == ("1", "8")
    assert clean_env["MASTER_ADDR"] == "gpu07"  # the job's first host, on every node
    assert clean_env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"  # as SLURM set it: accelerate picks LOCAL_RANK's
    port = clean_env["MASTER_PORT"]
    assert 20000 <= int(port) <= 60000
    slurm_task(clean_env, procid=0, localid=0, node=0)
    submitit_env.export_submitit_env()
    assert clean_env["MASTER_PORT"] == port and clean_env["RANK"] == "0"  # every task gets the same port
    import torch

    if not torch.cuda.is_available():
        assert clean_env["ACCELERATE_USE_CPU"] == "true"  # gloo on CPU, as the CPU tests launch it


def test_a_set_master_port_wins(clean_env):
    slurm_task(clean_env, procid=3, localid=3, node=0)
    clean_env["MASTER_PORT"] = "29511"
    submitit_env.export_submitit_env()
    assert clean_env["MASTER_PORT"] == "29511"


def test_nothing_is_exported_outside_a_job_or_in_a_job_of_one_task(clean_env):
    before = dict(clean_env)
    assert submitit_env.export_submitit_env() is None
    assert dict(clean_env) == before
    slurm_task(clean_env, procid=0, localid=0, node=0)
    clean_env.update(SLURM_NTASKS="1", SLURM_JOB_NUM_NODES="1")
    before = dict(clean_env)
    assert submitit_env.export_submitit_env() is None  # the single-process path: unchanged
    assert dict(clean_env) == before


def test_a_sweep_under_accelerate_launch_is_refused(capsys):
    train = load_train_module()
    rank0 = {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0"}
    with pytest.raises(SystemExit) as stop:
        train.refuse_a_sweep_in_every_rank(["train.py", "-m", "method=full,lora"], rank0)
    assert stop.value.code == 2
    assert "submitit_slurm_multi" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        train.refuse_a_sweep_in_every_rank(["train.py", "--multirun"], {**rank0, "RANK": "1", "LOCAL_RANK": "1"})
    assert capsys.readouterr().err == ""  # said once, by rank 0
    train.refuse_a_sweep_in_every_rank(["train.py", "method=lora"], rank0)  # one run per launch: fine
    train.refuse_a_sweep_in_every_rank(["train.py", "-m", "method=full,lora"], {})  # a plain sweep: fine


@pytest.mark.parametrize("name", ["submitit_slurm_multi", "submitit_local_multi"])
def test_the_multi_process_launchers_compose(name):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"hydra/launcher={name}"], return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher.tasks_per_node > 1 and launcher.nodes == 1
    if name == "submitit_slurm_multi":
        assert launcher._target_.endswith("SlurmLauncher")
        assert launcher.gpus_per_node == launcher.tasks_per_node  # one process per GPU
        assert launcher.signal_delay_s > 0 and launcher.max_num_timeout >= 1  # submitit_slurm's requeue settings
    else:
        assert launcher._target_.endswith("LocalLauncher")


# --- the local sweep of 2-process runs --------------------------------------------------------------------------


def accelerate_launch(*overrides: str) -> None:
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2"]
    launch += ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
    launch += ["--main_process_port", str(free_port())]
    run([*launch, "train.py", *overrides], {"ACCELERATE_USE_CPU": "1"})


def what_it_says(row: dict) -> dict:
    return {k: v for k, v in row.items() if not wall_clock(k) and k not in FLAGS}


def check_written_once(run_dir: Path) -> list[dict]:
    rows = read_jsonl(run_dir / "metrics.jsonl")
    keys = [(r["checkpoint"], r["group"], r.get("set_name") or r.get("set")) for r in rows]
    assert len(keys) == len(set(keys)), run_dir  # no row twice (one writer)
    steps = [(r["time_step"], r["optimizer_step"]) for r in read_jsonl(run_dir / "train_log.jsonl")]
    assert len(steps) == len(set(steps)), run_dir
    state = json.loads((run_dir / "state.json").read_text())
    assert state["trained"] == state["evaluated"] == [0, 1]
    assert {r["num_processes"] for r in rows} == {2}
    return rows


def losses(run_dir: Path) -> list[tuple]:
    return [(r["time_step"], r["optimizer_step"], r.get("loss")) for r in read_jsonl(run_dir / "train_log.jsonl")]


@pytest.mark.slow
def test_a_local_sweep_of_two_process_runs_matches_accelerate_launch(tmp_path):
    common = [*TINY, "data.world.n_steps=2", "eval.eval_initial=true"]
    methods = ("full", "lora")

    # references: one plain 2-process accelerate launch per method, sharing step 0 and the initial evaluation
    cache = tmp_path / "cache"
    for method in methods:
        accelerate_launch(
            *common, f"method={method}", f"method.step0_cache={cache}", f"hydra.run.dir={tmp_path / method}"
        )
    log = (tmp_path / "lora/train.log").read_text()
    assert "loaded from the step-0 cache" in log and "rows and predictions copied from" in log  # 2-process hits
    single = tmp_path / "single"
    train_tiny(single, *common, "method=full", "trainer.batch_size=32")  # in this process: only its rows count

    sweep = tmp_path / "sweep"
    command = [sys.executable, "train.py", "-m", *common, "hydra/launcher=submitit_local_multi", "method=full,lora"]
    run([*command, f"hydra.sweep.dir={sweep}", "hydra.launcher.timeout_min=10"])
    points = sorted(p.parent for p in sweep.rglob("summary.json") if ".step0_cache" not in p.parts)
    assert [p.relative_to(sweep).parts[0] for p in points] == list(methods)
    jobs = [d for d in (sweep / ".submitit").iterdir() if d.name != "%j"]
    assert len(jobs) == 2 and all(len(list(d.glob("*_result.pkl"))) == 2 for d in jobs)  # 2 jobs x 2 tasks

    for method, point in zip(methods, points):
        rows, reference = check_written_once(point), check_written_once(tmp_path / method)
        assert [what_it_says(r) for r in rows] == [what_it_says(r) for r in reference], method
        assert losses(point) == losses(tmp_path / method), method
        for path in (tmp_path / method / "predictions").rglob("*.jsonl"):  # every prediction file, once
            assert read_jsonl(point / path.relative_to(tmp_path / method)) == read_jsonl(path), path

    # and the 2-process runs are the 1-process run within the documented tolerance
    one = read_jsonl(single / "metrics.jsonl")
    two = read_jsonl(points[0] / "metrics.jsonl")
    assert len(one) == len(two)
    for mine, theirs in zip(two, one):
        for metric in ("em", "f1"):
            if metric in theirs:
                assert abs(mine[metric] - theirs[metric]) <= SCORE_TOLERANCE, (mine, theirs)

    entries = sorted(p.name for p in (sweep / ".step0_cache").iterdir() if not p.name.startswith("."))
    assert len(entries) == 2 and sum(e.startswith("initial-") for e in entries) == 1  # one step 0, one initial
