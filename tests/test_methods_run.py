"""Methods end to end through ``run.train``: checkpoints load, resume is exact, bad values fail early."""

from __future__ import annotations

import pytest
import torch

from evolve_train.errors import ConfigError


def test_lora_stack_run_resumes_bitwise_and_every_checkpoint_loads(tmp_path):
    import json
    import shutil

    from helpers import tiny_cfg
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from evolve_train.run import train as run_train

    settings = ("method=lora", "method.lora.across_steps=stack", "method.step0_cache=null", "trainer.num_threads=1")
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    run_train(tiny_cfg(straight, *settings))
    for k in range(3):  # every method's checkpoints load the same way
        AutoModelForCausalLM.from_pretrained(straight / "steps" / str(k))
    assert not (straight / "steps" / "0" / "adapter").exists()  # step 0 is plain pretraining
    assert json.loads((straight / "steps/2/adapter/evolve_train.json").read_text())["across_steps"] == "stack"

    shutil.copytree(straight, resumed)  # as if the run died after step 1
    shutil.rmtree(resumed / "steps" / "2")
    state = json.loads((resumed / "state.json").read_text())
    state.update(trained=[0, 1], evaluated=[0, 1])
    (resumed / "state.json").write_text(json.dumps(state))
    run_train(tiny_cfg(resumed, *settings))
    for name in ("model.safetensors", "adapter/adapter_model.safetensors"):
        a, b = load_file(straight / "steps/2" / name), load_file(resumed / "steps/2" / name)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name

    base = AutoModelForCausalLM.from_pretrained(straight / "steps/0")
    with_adapter = PeftModel.from_pretrained(base, straight / "steps/2/adapter")  # stack: adapter on the step-0 base
    merged = AutoModelForCausalLM.from_pretrained(straight / "steps/2")
    probe = torch.tensor([[5, 17, 42, 8, 99, 3]])
    with torch.no_grad():
        assert torch.allclose(with_adapter(input_ids=probe).logits, merged(input_ids=probe).logits, atol=1e-4)


def test_bad_method_value_fails_before_anything_is_written(tmp_path):
    from helpers import tiny_cfg

    from evolve_train.run import train as run_train

    with pytest.raises(ConfigError, match=r"method\.lora\.dropout"):
        run_train(tiny_cfg(tmp_path / "run", "method=lora", "method.lora.dropout=1.5"))
    assert not (tmp_path / "run").exists()
