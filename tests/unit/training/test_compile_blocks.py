"""``trainer.compile`` compiles each transformer block in place (training/compile.py): exactly the decoder blocks
get a compiled forward, one compiled function for all of them; names, classes and the state dict stay; the end of
the step gives the plain forward back; a model without blocks is compiled whole. Nothing here runs a compiled
graph (torch.compile compiles at the first call): tests/distributed/test_fsdp_compile.py trains with it."""

from __future__ import annotations

import logging

import pytest
import torch
from helpers.models import tiny_model

from evolve_train.training.compile import compile_blocks, compile_model, decoder_blocks, uncompile_blocks


def with_own_forward(model: torch.nn.Module) -> list[torch.nn.Module]:
    return [m for m in model.modules() if "forward" in m.__dict__]


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_each_decoder_block_and_nothing_else_gets_the_compiled_forward(tokenizer, kind):
    model = tiny_model(kind, tokenizer)
    layers = list(model.transformer.h if kind == "gpt2" else model.model.layers)
    keys, classes = list(model.state_dict()), [type(m) for m in model.modules()]

    assert compile_blocks(model) == 2 == len(layers)
    compiled = with_own_forward(model)
    assert compiled == layers  # the blocks themselves, in place: no wrapper module
    assert len({block.forward.func for block in compiled}) == 1  # one compiled function shared by the blocks
    assert [block.forward.args for block in compiled] == [(block,) for block in layers]
    assert list(model.state_dict()) == keys and [type(m) for m in model.modules()] == classes

    assert uncompile_blocks(model) == 2 and not with_own_forward(model)


def test_a_later_step_reuses_the_compiled_function(tokenizer):
    first, second = tiny_model("llama", tokenizer), tiny_model("llama", tokenizer)
    compile_blocks(first), compile_blocks(second)
    assert first.model.layers[0].forward.func is second.model.layers[1].forward.func  # no recompile per time step


def test_a_lora_model_compiles_the_blocks_of_its_base_model(tokenizer):
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(tiny_model("gpt2", tokenizer), LoraConfig(r=2, target_modules=["c_attn"]))
    blocks = decoder_blocks(model)
    assert blocks == list(model.base_model.model.transformer.h)
    assert compile_blocks(model) == 2 and with_own_forward(model) == blocks
    uncompile_blocks(model)


def test_a_model_without_blocks_is_compiled_whole(caplog):
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    with caplog.at_level(logging.INFO, logger="evolve_train.training.compile"):
        compiled = compile_model(model)
    assert compiled is not model and compiled._orig_mod is model  # torch.compile's wrapper of the whole model
    assert "names no transformer blocks (_no_split_modules), so the whole model is compiled" in caplog.text
    assert not with_own_forward(model)
