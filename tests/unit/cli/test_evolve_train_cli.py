"""`evolve-train`: the overrides of `python train.py`, from any directory, with the configs shipped in the package
and a user's own config folder (--config-dir or EVOLVE_TRAIN_CONFIG_DIR)."""

from __future__ import annotations


from evolve_train.cli.train import CONFIG_DIR_ENV, user_config_dirs, with_config_dir
from helpers.cli import evolve_train


def test_a_users_config_folder_joins_the_search_path(tmp_path):
    mine = tmp_path / "my_configs" / "experiment"
    mine.mkdir(parents=True)
    (mine / "mine.yaml").write_text("# @package _global_\nexperiment: mine\ntrainer:\n  epochs: 7\n")
    done = evolve_train(["--config-dir", "my_configs", "experiment=mine", "--cfg", "job"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "experiment: mine" in done.stdout and "epochs: 7" in done.stdout
    done = evolve_train(["experiment=mine", "--cfg", "job"], tmp_path, **{CONFIG_DIR_ENV: "my_configs"})
    assert done.returncode == 0 and "epochs: 7" in done.stdout, done.stderr[-3000:]


def test_an_unknown_key_is_refused_and_nothing_written(tmp_path):
    done = evolve_train(["+trainer.lrrr=1"], tmp_path)
    assert done.returncode == 2 and "did you mean 'trainer.lr'?" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_config_dirs_are_made_absolute_against_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = with_config_dir(["--config-dir", "a", "--config-dir=b", "seed=1"], environ={})
    assert user_config_dirs(args) == [tmp_path / "a", tmp_path / "b"]
    assert with_config_dir(["seed=1"], environ={CONFIG_DIR_ENV: "c"}) == ["--config-dir", str(tmp_path / "c"), "seed=1"]
