"""`evolve-train recipes` (evolve_train/cli/recipes.py): the list of the shipped recipes, one recipe's YAML, a copy
to edit and how to run it; a bad name is one line and exit code 2. Nothing is composed here (tests/e2e/test_recipes.py
composes, dry-runs and runs every recipe)."""

from __future__ import annotations

from pathlib import Path

import pytest

from evolve_train.cli import recipes
from evolve_train.cli.train import build_parser
from evolve_train.cli.train import main as evolve_train

EXPECTED = {
    "llama32_1b_8xh100",
    "llama32_3b_8xh100",
    "llama31_8b_8xh100",
    "llama31_8b_4x8xh100",
    "smollm2_135m_1gpu",
    "smollm2_135m_cpu",
}


def test_the_package_ships_every_recipe_with_a_complete_header():
    found = {recipe.name: recipe for recipe in recipes.all_recipes()}
    assert set(found) == EXPECTED
    for recipe in found.values():
        assert recipe.title, recipe.path
        assert set(recipe.header) == set(recipes.HEADER_KEYS), (recipe.name, sorted(recipe.header))
        assert recipe.header["full"] == "method=full" and recipe.header["lora"].startswith("method=lora")
        assert recipe.override in recipe.header["dry run"] and "--dry-run" in recipe.header["dry run"]
        assert "data.eval_files=" in recipe.header["qa"] and "data.root=" in recipe.header["data"]


def test_evolve_train_recipes_lists_name_model_and_cluster(capsys):
    assert evolve_train(["recipes"]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines() if line and line.split()[0] in EXPECTED}
    assert set(lines) == EXPECTED
    assert "Llama-3.1-8B" in lines["llama31_8b_4x8xh100"] and "4 nodes x 8 H100" in lines["llama31_8b_4x8xh100"]
    assert "SmolLM2-135M" in lines["smollm2_135m_cpu"] and "CPU" in lines["smollm2_135m_cpu"]
    assert evolve_train(["recipes", "list"]) == 0 and capsys.readouterr().out == out


def test_show_prints_the_recipe_file(capsys):
    assert evolve_train(["recipes", "show", "llama31_8b_8xh100"]) == 0
    shown = capsys.readouterr().out
    path = recipes.find("llama31_8b_8xh100").path
    assert shown == path.read_text(encoding="utf-8").rstrip("\n") + "\n"
    assert shown.startswith("# @package _global_")
    assert evolve_train(["recipes", "show", "recipe_llama31_8b_8xh100.yaml"]) == 0  # the file's name works too
    assert capsys.readouterr().out == shown


@pytest.mark.parametrize("argv", [["show", "llama9_70b"], ["show"], ["copy", "smollm2_135m_cpu"]])
def test_a_bad_or_missing_argument_is_one_line_and_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as stop:
        evolve_train(["recipes", *argv])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and len(err.splitlines()) == 1
    if argv[1:] == ["llama9_70b"]:
        assert all(name in err for name in EXPECTED)


def test_copy_writes_an_editable_renamed_copy_and_says_how_to_run_it(tmp_path: Path, capsys):
    target_dir = tmp_path / "mine"
    assert evolve_train(["recipes", "copy", "smollm2_135m_cpu", str(target_dir)]) == 0
    out = capsys.readouterr().out
    copy = target_dir / "experiment" / "my_smollm2_135m_cpu.yaml"
    text = copy.read_text(encoding="utf-8")
    assert "\nexperiment: my_smollm2_135m_cpu\n" in text
    assert "experiment=recipe_smollm2_135m_cpu" not in text and "experiment=my_smollm2_135m_cpu" in text
    assert f"--config-dir {target_dir.resolve()} experiment=my_smollm2_135m_cpu" in out
    assert "hydra.searchpath=[file://" in out
    original = recipes.find("smollm2_135m_cpu").path.read_text(encoding="utf-8")
    assert text.replace("my_smollm2_135m_cpu", "X") == original.replace("recipe_smollm2_135m_cpu", "X").replace(
        "experiment: smollm2_135m_cpu", "experiment: X"
    )
    with pytest.raises(SystemExit) as stop:  # never overwrites an edited copy
        evolve_train(["recipes", "copy", "smollm2_135m_cpu", str(target_dir)])
    assert stop.value.code == 2 and "exists" in capsys.readouterr().err


def test_the_recipes_subcommand_is_on_evolve_trains_parser():
    parser = build_parser()
    (subparsers,) = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    sub = subparsers.choices["recipes"]
    assert sub.prog == "evolve-train recipes"
    args = sub.parse_args(["copy", "smollm2_135m_cpu", "DIR"])
    assert (args.command, args.name, args.directory) == ("copy", "smollm2_135m_cpu", "DIR")
    assert recipes.build_parser().parse_args([]).command == "list"


def test_header_reading_stops_at_the_first_line_that_is_not_a_comment():
    title, header = recipes.read_header("# Recipe: a title\n# model: M\nmodel:\n# cluster: not read\n")
    assert title == "a title" and header == {"model": "M"}
