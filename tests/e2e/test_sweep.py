"""Sweeps: method configs compose, the step-0 checkpoint is trained once per sweep, run dirs are deterministic
and one per configuration (a sweep never puts two configurations into one run dir)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers import CONFIG_DIR, TINY, tiny_cfg
from hydra import compose, initialize_config_dir
from safetensors.torch import load_file

from evolve_train.config import Config
from evolve_train.methods import Method
from evolve_train.models.build import train_tokenizer
from evolve_train.training import identity
from evolve_train.training.step0_cache import step0_key
from helpers.runs import run_sweep

METHODS = ["full", "lora", "replay", "l2_init", "ewc", "freeze", "lora_replay"]


def compose_cfg(*overrides: str, hydra: bool = False):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides), return_hydra_config=hydra)


@pytest.mark.parametrize("name", METHODS)
def test_every_method_config_composes_and_validates(name):
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_object(compose_cfg(f"method={name}"))
    method = Method(cfg.method)
    assert cfg.method.name == name
    assert [s.name for s in method.strategies] == list(cfg.method.strategies)


def test_lora_vs_full_overlay_sweeps_both_methods():
    cfg = compose_cfg("experiment=lora_vs_full", hydra=True)
    assert cfg.hydra.sweeper.params == {"method": "full,lora"}
    assert cfg.hydra.sweep.subdir == "full/seed0"  # ${method.name}/seed${seed}: one deterministic dir per run


def test_lora_vs_full_overlay_names_the_experiment_and_its_sweep_dir():
    cfg = compose_cfg("experiment=lora_vs_full", hydra=True)
    assert cfg.experiment == "lora_vs_full"
    assert cfg.hydra.sweep.dir == "runs/lora_vs_full/multirun"


def test_slurm_launcher_config_composes():
    cfg = compose_cfg("hydra/launcher=submitit_slurm", "hydra.launcher.partition=gpu", hydra=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("submitit_launcher.SlurmLauncher")
    assert launcher.partition == "gpu" and launcher.tasks_per_node == 1
    assert launcher.signal_delay_s > 0 and launcher.max_num_timeout >= 1  # warned before the kill; requeued
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher  # noqa: F401  (importable)


def test_step0_key_covers_what_shapes_step0_and_nothing_else(tmp_path):
    from omegaconf import OmegaConf

    tokenizer = train_tokenizer(["the director of Orvane was Ada Brill", "in 2019 it was Tom Vey"], 300)

    def key(*overrides):
        cfg: Config = OmegaConf.to_object(tiny_cfg(tmp_path, *overrides))
        return step0_key(cfg, tokenizer, num_processes=1)

    base = key()
    assert key("method=lora") == base and key("method=ewc", "trainer.epochs=9") == base  # later steps only
    assert key("eval.max_new_tokens=3") == base and key("trainer.log_every=7") == base
    for changed in (
        "seed=1",
        "trainer.lr=0.5",
        "trainer.epochs_step0=9",
        "model.n_embd=64",
        "data.world.n_entities=13",
        "trainer.batch_size=8",
    ):
        assert key(changed) != base, changed
    cfg = OmegaConf.to_object(tiny_cfg(tmp_path))
    assert step0_key(cfg, tokenizer, num_processes=2) != base
    assert step0_key(cfg, train_tokenizer(["other words entirely"], 300), num_processes=1) != base


@pytest.fixture(scope="module")
def cached_arms(tmp_path_factory) -> dict:
    """Three in-process runs sharing one step-0 cache, with the initial evaluation on: full (trains step 0 and
    evaluates ``initial``), lora (the same step 0 and eval settings: two hits) and lora with
    ``eval.max_new_tokens=5`` (step 0 a hit, the initial evaluation a miss). Records the checkpoints
    ``evaluate_checkpoint`` was asked for and the cache's entries after each run. Both cache tests read these
    runs: one set of runs checks step 0 and ``initial`` shared, where each test trained its own pair before."""
    import evolve_train.evaluation.checkpoints as run_module
    from evolve_train.run import train

    root = tmp_path_factory.mktemp("cached_arms")
    cache = root / "cache"
    common = ("trainer.num_threads=1", f"method.step0_cache={cache}", "eval.eval_initial=true")
    asked, after = [], {}
    real = run_module.evaluate_checkpoint

    def counting(ctx):
        asked.append(ctx.checkpoint)
        return real(ctx)

    def listing() -> list[Path]:
        return sorted(p for p in cache.iterdir() if not p.name.startswith("."))

    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(run_module, "evaluate_checkpoint", counting)
        for name, extra in (("full", ("method=full",)), ("lora", ("method=lora",))):
            train(tiny_cfg(root / name, *extra, *common))
            after[name] = {"asked": list(asked), "entries": listing()}
        train(tiny_cfg(root / "other", "method=lora", *common, "eval.max_new_tokens=5"))
        after["other"] = {"asked": list(asked), "entries": listing()}
    return {"root": root, "after": after}


def step0_entries(entries: list[Path]) -> list[Path]:
    """The step-0 checkpoints of a cache listing (the initial evaluations are the ``initial-<key>`` entries)."""
    return [p for p in entries if not p.name.startswith("initial-")]


def test_step0_checkpoint_is_trained_once_and_shared(cached_arms):
    """One step-0 entry after the first arm, and the same listing after the second (a hit). The arms evaluate
    ``initial`` too, so the cache also holds that entry: the listing is checked to be exactly those two."""
    root, after = cached_arms["root"], cached_arms["after"]
    entries = after["full"]["entries"]
    assert len(step0_entries(entries)) == 1 and (step0_entries(entries)[0] / "model.safetensors").exists()
    assert len(entries) == 2  # the step-0 checkpoint and the initial evaluation: nothing else is stored

    assert after["lora"]["entries"] == entries  # a hit, not a new entry
    assert step0_entries(after["other"]["entries"]) == step0_entries(entries)  # eval settings: not step 0's key
    a = load_file(root / "full/steps/0/model.safetensors")
    b = load_file(root / "lora/steps/0/model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)
    rows = [json.loads(line) for line in (root / "lora/train_log.jsonl").read_text().splitlines()]
    step0 = [r for r in rows if r["time_step"] == 0]
    assert step0 and all(r.get("from_step0_cache") for r in step0)  # the loss curve is kept, flagged
    assert not any(r.get("from_step0_cache") for r in rows if r["time_step"] > 0)
    metrics = {
        m: [json.loads(x) for x in (root / m / "metrics.jsonl").read_text().splitlines()] for m in ("full", "lora")
    }
    scores = ("group", "set_name", "n", "em", "f1")
    at0 = {
        m: [{k: r.get(k) for k in scores} for r in metrics[m] if r["checkpoint"] == 0 and "em" in r] for m in metrics
    }
    assert at0["full"]
    assert at0["full"] == at0["lora"]  # same step-0 model, same step-0 scores


def test_the_initial_evaluation_is_made_once_and_shared(cached_arms):
    root, after = cached_arms["root"], cached_arms["after"]
    assert after["full"]["asked"].count(-1) == 1
    assert after["lora"]["asked"].count(-1) == 1  # a hit: the second arm copies rows and predictions
    metrics = {
        m: [json.loads(x) for x in (root / m / "metrics.jsonl").read_text().splitlines()] for m in ("full", "lora")
    }
    body = {
        m: [
            {k: v for k, v in r.items() if k not in ("method", "from_eval_cache")}
            for r in metrics[m]
            if r["checkpoint"] == -1
        ]
        for m in metrics
    }
    assert body["full"] and body["full"] == body["lora"]
    assert all(r.get("from_eval_cache") for r in metrics["lora"] if r["checkpoint"] == -1)
    assert not any(r.get("from_eval_cache") for r in metrics["full"] + metrics["lora"] if r["checkpoint"] != -1)
    files = {
        m: {
            p.relative_to(root / m): p.read_bytes()
            for p in (root / m / "predictions/step_-1").rglob("*")
            if p.is_file()
        }
        for m in ("full", "lora")
    }
    assert files["full"] and files["full"] == files["lora"]
    private = (root / "lora/private_evaluations.jsonl").read_text().splitlines()
    assert any(json.loads(line)["checkpoint"] == -1 for line in private)  # still recorded by the run that copied
    assert after["other"]["asked"].count(-1) == 2  # another evaluation setting: a miss


def sweep_points(*arguments: str) -> list[list[str]]:
    """The jobs' overrides of ``python train.py -m ARGUMENTS``, as Hydra's basic sweeper splits them."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(list(arguments))
    return BasicSweeper.split_arguments(parsed, max_batch_size=None)[0]


def sweep_subdirs(*arguments: str) -> list[str]:
    """``hydra.sweep.subdir`` of every job of the sweep ``python train.py -m ARGUMENTS``."""
    return [str(compose_cfg(*point, hydra=True).hydra.sweep.subdir) for point in sweep_points(*arguments)]


def test_sweep_dirs_over_a_list_valued_key_have_no_commas_brackets_or_quotes():
    """A run dir is passed where commas separate arguments (lm-eval's ``--model_args pretrained=DIR,dtype=...``)
    and to shells: its name has no ``,[]'"`` or space, stays readable and is still one dir per configuration."""
    subdirs = sweep_subdirs(
        "method=full,lora",
        "eval.evaluators=[splits,matrix,heldout],[splits]",
        "data.root='my data/v1'",
        "trainer.lr=1e-3",
    )
    assert len(subdirs) == len(set(subdirs)) == 4
    for subdir in subdirs:
        assert not set(subdir) & set(",[]'\" {}"), subdir
        assert subdir.split("/")[0] in ("full", "lora") and subdir.endswith("/seed0")
    tags = {subdir.split("/")[1] for subdir in subdirs}
    assert any(tag.startswith("data.root=my_data_v1_eval.evaluators=splits+matrix+heldout_") for tag in tags), tags
    assert any("eval.evaluators=splits_trainer.lr=0.001_" in tag for tag in tags), tags
    model_args = f"pretrained=runs/x/multirun/{subdirs[0]},dtype=float32"
    assert [arg.split("=", 1)[0] for arg in model_args.split(",")] == ["pretrained", "dtype"]


def test_list_values_that_read_alike_still_get_their_own_dirs():
    """``[a,b]`` and ``a+b`` or ``[a],[b]`` read the same once sanitised; the hash keeps them apart."""
    tags = [
        identity.run_tag(["eval.evaluators=[splits,matrix]"]),
        identity.run_tag(["eval.evaluators=splits+matrix"]),
        identity.run_tag(["eval.evaluators=[matrix,splits]"]),
    ]
    assert tags[0].startswith("eval.evaluators=splits+matrix_") and len(set(tags)) == 3


@pytest.mark.slow
def test_multirun_sweep_runs_both_methods_in_deterministic_dirs(tmp_path):
    sweep = tmp_path / "sweep"
    runs = run_sweep(sweep, "experiment=lora_vs_full")
    assert [run.relative_to(sweep).parts[0] for run in runs] == ["full", "lora"]
    tag = identity.run_tag(TINY).rstrip("/")  # the sweep's fixed overrides name both runs' config
    assert [run.relative_to(sweep).parts[1:] for run in runs] == [(tag, "seed0")] * 2
    for run in runs:
        assert json.loads((run / "summary.json").read_text())
        assert sorted(p.name for p in (run / "steps").iterdir()) == ["0", "1", "2"]
    assert (runs[1] / "steps/1/adapter/adapter_model.safetensors").exists()
    assert len([p for p in (sweep / ".step0_cache").iterdir() if not p.name.startswith(".")]) == 1
    logs = {run.parts[-3]: (run / "train.log").read_text() for run in runs}
    assert "stored in the step-0 cache" in logs["full"]
    assert "loaded from the step-0 cache" in logs["lora"]  # step 0 was trained once for the sweep


def scores(run: Path) -> list[dict]:
    """Every metrics row without its timings (what a run measured, not how long it took)."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if "seconds" not in k} for row in rows]


def check_one_dir_per_value(runs: list[Path], key: str, values: list) -> None:
    """Two run dirs, each recording (overrides.yaml, state.json) its own value of ``key``, metrics differing."""
    from omegaconf import OmegaConf

    assert len(runs) == 2, runs
    seen = []
    for run in runs:
        overrides = [o for o in OmegaConf.load(run / ".hydra/overrides.yaml") if o.startswith(key + "=")]
        assert len(overrides) == 1, overrides
        recorded = json.loads((run / "state.json").read_text())["identity"]["config"][key]
        assert recorded == float(overrides[0].split("=", 1)[1])  # the dir holds the run of its own overrides
        seen.append(recorded)
    assert sorted(seen) == sorted(values)
    assert scores(runs[0]) != scores(runs[1])  # two trainings, not one run reported twice


@pytest.mark.slow
def test_a_sweep_over_lora_rank_gives_one_run_dir_per_rank(tmp_path):
    runs = run_sweep(tmp_path / "sweep", "method=lora", "method.lora.r=4,16")
    check_one_dir_per_value(runs, "method.lora.r", [4, 16])
    assert {run.relative_to(tmp_path / "sweep").parts[0] for run in runs} == {"lora"}  # method visible


@pytest.mark.slow
def test_a_sweep_over_learning_rate_gives_one_run_dir_per_rate(tmp_path):
    runs = run_sweep(tmp_path / "sweep", "trainer.lr=1e-3,2e-3")
    check_one_dir_per_value(runs, "trainer.lr", [1e-3, 2e-3])
    assert all(run.name == "seed0" for run in runs)  # seed visible


@pytest.mark.slow
def test_a_submitit_local_sweep_runs_both_methods(tmp_path):
    """``hydra/launcher=submitit_local``: real submitit (each run a job in its own process, as on SLURM,
    whose launcher shares this code path); both runs finish and write their summary."""
    sweep = tmp_path / "sweep"
    runs = run_sweep(
        sweep,
        "hydra/launcher=submitit_local",
        "method=full,lora",
        "data.world.n_steps=2",
        "hydra.launcher.timeout_min=10",
    )
    assert [run.relative_to(sweep).parts[0] for run in runs] == ["full", "lora"]
    for run in runs:
        assert json.loads((run / "summary.json").read_text())
        assert json.loads((run / "state.json").read_text())["evaluated"] == [0, 1]
    assert list((sweep / ".submitit").iterdir())  # submitit's job folders: the jobs really went through it
