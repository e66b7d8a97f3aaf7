"""Methods end to end through ``run.train``: checkpoints load, resume is exact, bad values fail early."""

from __future__ import annotations

import pytest
import torch

from evolve_train.errors import ConfigError


def same_tensors(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_lora_stack_run_resumes_bitwise_and_every_checkpoint_loads(tmp_path):
    """``straight`` saves merged weights (``save_merged=true``); ``resumed`` continues it from an adapter-only
    ``steps/1`` with ``save_merged=false``: the same step-2 adapter, metrics and (rebuilt) merged weights."""
    import json
    import shutil

    from helpers import tiny_cfg, wall_clock
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from evolve_train.config import ModelConfig
    from evolve_train.models.build import load_model
    from evolve_train.run import train as run_train

    settings = ("method=lora", "method.lora.across_steps=stack", "method.step0_cache=null", "trainer.num_threads=1")
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    run_train(tiny_cfg(straight, *settings, "method.lora.save_merged=true"))
    for k in range(3):  # merged checkpoints load with transformers alone
        AutoModelForCausalLM.from_pretrained(straight / "steps" / str(k))
    assert not (straight / "steps" / "0" / "adapter").exists()  # step 0 is plain pretraining
    assert json.loads((straight / "steps/2/adapter/evolve_train.json").read_text())["across_steps"] == "stack"

    shutil.copytree(straight, resumed)  # as if the run died after step 1, saved without merged weights
    shutil.rmtree(resumed / "steps" / "2")
    (resumed / "steps/1/model.safetensors").unlink()
    state = json.loads((resumed / "state.json").read_text())
    state.update(trained=[0, 1], evaluated=[0, 1])
    (resumed / "state.json").write_text(json.dumps(state))
    run_train(tiny_cfg(resumed, *settings))
    assert not (resumed / "steps/2/model.safetensors").exists()  # save_merged=false: the adapter only
    adapter = "adapter/adapter_model.safetensors"
    assert same_tensors(load_file(straight / "steps/2" / adapter), load_file(resumed / "steps/2" / adapter))
    rebuilt = load_model(str(resumed / "steps/2"), ModelConfig()).state_dict()
    merged = load_file(straight / "steps/2/model.safetensors")
    assert all(torch.equal(rebuilt[k], merged[k]) for k in merged)  # bit for bit
    rows = [(resumed / "metrics.jsonl").read_text().splitlines(), (straight / "metrics.jsonl").read_text().splitlines()]
    strip = [[{k: v for k, v in json.loads(r).items() if not wall_clock(k)} for r in rs] for rs in rows]
    assert strip[0] == strip[1]

    base = AutoModelForCausalLM.from_pretrained(straight / "steps/0")
    with_adapter = PeftModel.from_pretrained(base, straight / "steps/2/adapter")  # stack: adapter on the step-0 base
    probe = torch.tensor([[5, 17, 42, 8, 99, 3]])
    with torch.no_grad():
        assert torch.allclose(
            with_adapter(input_ids=probe).logits,
            load_model(str(resumed / "steps/2"), ModelConfig())(input_ids=probe).logits,
            atol=1e-4,
        )


def test_lora_merge_checkpoints_without_merged_weights_rebuild_bitwise(tmp_path):
    """``merge``: ``steps/<k>`` = ``steps/<k-1>`` + its adapter. Drop the merged weights of a
    ``save_merged=true`` run: ``load_model`` rebuilds them bit for bit, and peft loads each adapter on its base."""
    import shutil

    from helpers import tiny_cfg
    from peft import PeftModel
    from safetensors.torch import load_file

    from evolve_train.config import ModelConfig
    from evolve_train.models.build import load_model
    from evolve_train.run import train as run_train

    run = tmp_path / "run"
    run_train(
        tiny_cfg(run, "method=lora", "method.step0_cache=null", "trainer.num_threads=1", "method.lora.save_merged=true")
    )
    lean = tmp_path / "lean"
    shutil.copytree(run / "steps", lean / "steps")
    for k in (1, 2):
        (lean / "steps" / str(k) / "model.safetensors").unlink()
    for k in (1, 2):
        merged = load_file(run / "steps" / str(k) / "model.safetensors")
        rebuilt = load_model(str(lean / "steps" / str(k)), ModelConfig()).state_dict()
        assert all(torch.equal(rebuilt[key], merged[key]) for key in merged), k
        on_base = PeftModel.from_pretrained(
            load_model(str(lean / "steps" / str(k - 1)), ModelConfig()), str(lean / "steps" / str(k) / "adapter")
        ).merge_and_unload()
        assert all(torch.equal(on_base.state_dict()[key], merged[key]) for key in merged), k
    shutil.rmtree(lean / "steps" / "0")
    with pytest.raises(FileNotFoundError, match="last full checkpoint"):
        load_model(str(lean / "steps" / "2"), ModelConfig())


def test_bad_method_value_fails_before_anything_is_written(tmp_path):
    from helpers import tiny_cfg

    from evolve_train.run import train as run_train

    with pytest.raises(ConfigError, match=r"method\.lora\.dropout"):
        run_train(tiny_cfg(tmp_path / "run", "method=lora", "method.lora.dropout=1.5"))
    assert not (tmp_path / "run").exists()
