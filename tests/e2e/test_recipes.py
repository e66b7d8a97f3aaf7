"""The recipes for real runs (configs/experiment/recipe_*.yaml, `evolve-train recipes`): every recipe composes with
its documented overrides (full and LoRA, corpus only and with QA), its header's dry run prints a memory estimate per
device within that device's memory (an H100's 80 GB; the host's for the CPU recipe), and every recipe trains and
evaluates on CPU at a shrunk shape: the same recipe with overrides for size only (a tiny model built from config,
a few hundred tokens of a small yearly corpus, tests/helpers/your_data.py)."""

from __future__ import annotations

import math
import os
import re
import shlex
from pathlib import Path

import pytest
from omegaconf import OmegaConf

import evolve_train.config  # noqa: F401  (registers the typed schema, base_config)
from evolve_train.cli import recipes
from evolve_train.cli.dry_run import run_if_asked
from evolve_train.compose import CONFIG_DIR, compose_dict
from evolve_train.config import Config
from helpers import read_jsonl
from helpers.your_data import SHRINK, YEARS, write_your_data

RECIPES = {recipe.name: recipe for recipe in recipes.all_recipes()}
NAMES = sorted(RECIPES)
GIB = 1024**3
H100_BYTES = 80e9
"""An H100's memory as the recipes' headers name it (80 GB; the card reports about 79.6 GiB)."""
HEADROOM = 0.9
"""The share of a device's memory the run's own preflight allows (training/preflight.py)."""


def words(line: str, data: Path = Path("DATA")) -> list[str]:
    """A header line's overrides as a shell would split them, ``$DATA`` as ``data``."""
    return shlex.split(line.replace("$DATA", str(data)))


def dry_run_line(recipe: recipes.Recipe) -> tuple[dict[str, str], list[str]]:
    """``(environment, arguments after --dry-run)`` of the header's dry-run command."""
    tokens = shlex.split(recipe.header["dry run"])
    env = {}
    while tokens and re.match(r"^[A-Z_][A-Z0-9_]*=", tokens[0]):
        key, _, value = tokens.pop(0).partition("=")
        env[key] = value
    assert tokens[:2] == ["evolve-train", "--dry-run"], recipe.header["dry run"]
    return env, tokens[2:]


def device_bytes(recipe: recipes.Recipe) -> float:
    device = recipe.header["device"]
    if "H100" in device:
        return H100_BYTES
    assert device == "CPU", device
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


@pytest.mark.parametrize("method", ["full", "lora"])
@pytest.mark.parametrize("questions", [False, True], ids=["corpus_only", "with_qa"])
@pytest.mark.parametrize("name", NAMES)
def test_every_recipe_composes_with_its_documented_overrides(name, method, questions):
    recipe = RECIPES[name]
    overrides = [recipe.override, *words(recipe.header[method]), *words(recipe.header["data"])]
    if questions:
        overrides += words(recipe.header["qa"])
    config = OmegaConf.to_object(compose_dict(overrides))
    assert isinstance(config, Config)
    assert config.method.name == method and str(config.data.kind) == "temporal_qa"
    assert sorted(config.data.train_files) == ["2019", "2020", "2021"]
    assert bool(config.data.eval_files) == questions
    trainer, model = config.trainer, config.model
    assert trainer.tokens_per_step0 >= trainer.tokens_per_step > 0 and trainer.seq_len >= 512
    assert trainer.save_every_n_steps > 0 and config.eval.evaluators
    assert str(trainer.mixed_precision) in ("bf16", "auto")
    assert str(model.arch) == "llama" and model.name_or_path and model.n_layer > 1
    if "H100" in recipe.header["device"]:
        assert model.gradient_checkpointing and trainer.compile and str(trainer.mixed_precision) == "bf16"
    if "FSDP" in recipe.header["cluster"] or "HSDP" in recipe.header["cluster"]:
        assert str(model.dtype) == "bfloat16" and trainer.fsdp_mesh == (
            "hsdp" if "HSDP" in recipe.header["cluster"] else "fsdp"
        )


@pytest.mark.parametrize("method", ["full", "lora"])
@pytest.mark.parametrize("name", NAMES)
def test_the_dry_run_fits_each_recipe_in_its_device(name, method, monkeypatch, capsys, tmp_path):
    recipe = RECIPES[name]
    env, arguments = dry_run_line(recipe)
    for key in ("WORLD_SIZE", "LOCAL_WORLD_SIZE", "ACCELERATE_USE_FSDP", "FSDP_VERSION", "EVOLVE_TRAIN_CACHE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # the placeholders' paths: no checkpoint there, the shape keys count
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)
    assert run_if_asked(["--dry-run", *arguments, *words(recipe.header[method])], CONFIG_DIR) == 0
    out = capsys.readouterr().out
    (memory,) = re.findall(r"memory per device \(preflight estimate\): ([\d.]+) GiB", out)
    assert float(memory) * GIB <= HEADROOM * device_bytes(recipe), (name, method, memory, recipe.header["device"])
    assert "estimated from the model.* shape keys" in out
    world = int(env.get("WORLD_SIZE", "1"))
    assert f"world size: {world} " in out
    if env.get("ACCELERATE_USE_FSDP") == "true":
        assert "FSDP2, sharded over 8 processes" in out  # a node's 8 GPUs, also under HSDP over 4 nodes


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("recipes_data")
    write_your_data(root)
    return root


@pytest.mark.slow
@pytest.mark.parametrize("method,questions", [("full", True), ("lora", False)], ids=["full_qa", "lora_corpus_only"])
@pytest.mark.parametrize("name", NAMES)
def test_every_recipe_trains_at_a_shrunk_shape_on_cpu(name, method, questions, corpus, tmp_path):
    from hydra import compose, initialize_config_dir

    from evolve_train.run import train

    recipe = RECIPES[name]
    overrides = [recipe.override, *words(recipe.header[method]), f"data.root={corpus}"]
    overrides += [f"+data.train_files.{year}=[{year}]" for year in YEARS]
    if questions:
        overrides += words(recipe.header["qa"])
    run_dir = tmp_path / "run"
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[*overrides, *SHRINK, f"run_dir={run_dir}"])
    train(cfg)
    rows = read_jsonl(run_dir / "metrics.jsonl")
    assert {row["checkpoint"] for row in rows if row["group"] != "timing"} >= {0, 1, 2}
    groups = {row["group"] for row in rows}
    assert {"slices", "heldout"} <= groups
    assert ("splits" in groups) == questions
    assert all((run_dir / "steps" / str(k)).is_dir() for k in range(len(YEARS)))
    log = read_jsonl(run_dir / "train_log.jsonl")  # every time step trained its (shrunk) token budget
    assert {row["time_step"] for row in log} == {0, 1, 2} and all(math.isfinite(row["loss"]) for row in log)


@pytest.mark.parametrize("name", NAMES)
def test_the_model_placeholder_stops_a_run_at_its_start_naming_the_key(name, monkeypatch, corpus, tmp_path):
    from hydra import compose, initialize_config_dir

    from evolve_train.errors import ConfigError
    from evolve_train.run import train

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("EVOLVE_TRAIN_CACHE", raising=False)
    recipe = RECIPES[name]
    run_dir = tmp_path / "run"
    overrides = [recipe.override, f"data.root={corpus}", *[f"+data.train_files.{y}=[{y}]" for y in YEARS]]
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[*overrides, f"run_dir={run_dir}"])
    with pytest.raises(ConfigError, match="model.name_or_path="):
        train(cfg)
    assert not run_dir.exists()


@pytest.mark.parametrize("search", ["config_dir", "searchpath"])
def test_a_copied_and_edited_recipe_runs_from_its_folder(search, monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("EVOLVE_TRAIN_CACHE", raising=False)
    copy = recipes.copy(RECIPES["smollm2_135m_cpu"], tmp_path / "mine")
    text = copy.read_text(encoding="utf-8")
    copy.write_text(text.replace("tokens_per_batch: 4096", "tokens_per_batch: 2048"), encoding="utf-8")
    folder = copy.parent.parent
    where = ["--config-dir", str(folder)] if search == "config_dir" else [f"hydra.searchpath=[file://{folder}]"]
    assert run_if_asked(["--dry-run", *where, "experiment=my_smollm2_135m_cpu"], CONFIG_DIR) == 0
    out = capsys.readouterr().out
    assert "run dir: runs/my_smollm2_135m_cpu/full/seed0" in out
    assert "2048 a micro-batch" in out  # the edit, not the shipped recipe's 4096
