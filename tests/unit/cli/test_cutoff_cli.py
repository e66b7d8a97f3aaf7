"""`evolve-data cutoff` (cli/cutoff.py) on loss files written here with a planted cutoff: a CSV and TiC-LM's
layout with two domains (per domain, then pooled per model), the reference left out, bad input refused."""

from __future__ import annotations

import json

from evolve_train.cli.data import main
from helpers.cutoff import planted, write_tic_lm

SLICES = ["201305", "201403", "201501", "201602", "201701"]


def write(root, model: str, cutoff: str) -> str:
    losses = planted(SLICES, cutoff, {"news": (0.03, 0.1), "wiki": (0.03, 0.1)})
    return str(write_tic_lm(root, model, losses, half_width=0.002, sequences=500))


def test_csv_without_noise_gives_a_point_and_the_reference_is_left_out(tmp_path, capsys):
    csv = tmp_path / "losses.csv"
    csv.write_text("model,2019,2020,2021,2022\nold,2.0,2.0,2.4,2.5\nnew,2.0,2.0,2.0,2.1\n")
    assert main(["cutoff", "--csv", str(csv), "--reference", "new"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["old  2020 (no interval)  (loss_jump_vs_reference)"]


def test_tic_lm_files_per_domain_then_pooled_as_json(tmp_path, capsys):
    paths = [write(tmp_path, "a", "201403"), write(tmp_path, "b", "201701")]
    assert main(["cutoff", "--tic-lm", *paths, "--reference", "b", "--bootstrap", "300", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["domain"], r["model"]) for r in rows] == [("news", "a"), ("wiki", "a"), ("pooled over 2", "a")]
    assert all(r["estimate"] == "201403" and r["lo"] <= "201403" <= r["hi"] for r in rows)
    assert rows[-1]["method"] == "loss_jump_vs_reference_pooled"


def test_an_unknown_reference_or_a_bad_file_exits_2_naming_it(tmp_path, capsys):
    paths = [write(tmp_path, "a", "201403"), write(tmp_path, "b", "201701")]
    assert main(["cutoff", "--tic-lm", *paths, "--reference", "c"]) == 2
    err = capsys.readouterr().err
    assert "--reference 'c' is not a model there (models: a, b)" in err and "and 1 more files" in err
    bad = tmp_path / "bad.csv"
    bad.write_text("model,2019,2020\nm,1.0,x\n")
    assert main(["cutoff", "--csv", str(bad)]) == 2
    assert "bad.csv, line 2: a loss is not a number" in capsys.readouterr().err
    only = tmp_path / "only.csv"
    only.write_text("model,2019,2020\nm,1.0,1.2\n")
    assert main(["cutoff", "--csv", str(only), "--reference", "m"]) == 2
    assert "only.csv: no model besides the reference" in capsys.readouterr().err
