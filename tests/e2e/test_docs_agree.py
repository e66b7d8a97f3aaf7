"""README.md and docs/ say what the code does: each test pins one statement of the docs to the code behind it."""

from __future__ import annotations

from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[2]


def read(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def lora_lm_eval_section() -> str:
    return read("docs/evaluation.md").split("### LoRA checkpoints and `lm_eval`", 1)[1].split("\n## ", 1)[0]


@pytest.mark.slow
def test_the_documented_export_gives_the_model_the_run_held(tmp_path):
    """A tiny LoRA run (3 steps; steps 1 and 2 adapter-only); docs/evaluation.md's export command, as written, on
    its step 2; the exported dir loads with plain transformers to the weights the project's loader rebuilds."""
    import os
    import subprocess
    import sys

    import torch
    from helpers import TINY
    from transformers import AutoModelForCausalLM

    from evolve_train.config import ModelConfig
    from evolve_train.models.build import load_model

    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    run = tmp_path / "run"
    overrides = [*TINY, "method=lora", "eval.evaluators=[splits]", f"hydra.run.dir={run}"]
    done = subprocess.run([sys.executable, "train.py", *overrides], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not (run / "steps" / "2" / "model.safetensors").exists() and (run / "steps" / "2" / "adapter").is_dir()
    block = lora_lm_eval_section().split("```bash\n", 1)[1].split("```", 1)[0]
    export = block.split("\nlm_eval ", 1)[0].replace("\\\n", "").replace("RUN/", f"{run}/")
    done = subprocess.run(["bash", "-c", export], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "merged" / "2").state_dict()
    rebuilt = load_model(str(run / "steps" / "2"), ModelConfig()).state_dict()
    assert exported.keys() == rebuilt.keys() and all(torch.equal(exported[k], rebuilt[k]) for k in exported)
    assert (tmp_path / "merged" / "2" / "tokenizer.json").is_file()
