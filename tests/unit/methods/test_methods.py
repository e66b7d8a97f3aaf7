"""Each method does what its name promises, checked on a tiny GPT-2 through the one training loop."""

from __future__ import annotations

import copy

import pytest
import torch
from datasets import Dataset
from helpers.methods import (
    PAD,
    drift,
    make_history,
    method,
    one_thread,
    run_step,
    snapshot,
    tiny_gpt2,
    token_rows,
    train,
)

from evolve_train.errors import ConfigError
from evolve_train.methods.regularizers import EWC, L2Init
from evolve_train.methods.replay import Replay
from evolve_train.training.packing import IGNORE


OLD = token_rows(48, 2, 33, seed=1)  # "step 0" data


NEW = token_rows(48, 32, 64, seed=2)  # "step 1" data, other tokens


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    with one_thread():
        yield


@pytest.fixture(scope="module")
def pretrained():
    """A tiny model trained on OLD (the step-0 result every method starts from)."""
    model = tiny_gpt2()
    train(model, OLD, method("full"), step=0, epochs=4)
    return model


def lora_layers(model):
    from peft.tuners.lora import LoraLayer

    return {name: m for name, m in model.named_modules() if isinstance(m, LoraLayer)}


def test_lora_trains_only_adapter_weights(pretrained, capsys):
    model = copy.deepcopy(pretrained)
    base = {name: (p, p.detach().clone()) for name, p in model.named_parameters()}
    m = method("lora", lora={"r": 4, "alpha": 16})
    peft = m.prepare_model(model, 1)

    trainable = {n for n, p in peft.named_parameters() if p.requires_grad}
    assert trainable and all("lora_A" in n or "lora_B" in n for n in trainable)
    adapted = {n.rsplit(".", 1)[-1] for n in lora_layers(peft)}
    assert adapted == {"c_attn", "c_proj", "c_fc"}  # GPT-2 default: attention and MLP, both c_proj
    assert len(lora_layers(peft)) == 2 * 4  # 2 blocks x (c_attn, attn.c_proj, c_fc, mlp.c_proj)
    assert all(layer.scaling["default"] == 16 / 4 for layer in lora_layers(peft).values())  # alpha / r, not r / alpha
    share = sum(peft.get_nb_trainable_parameters()[:1]) / peft.get_nb_trainable_parameters()[1]
    with capsys.disabled():
        print(f"\nlora r=4: trainable share {share:.2%}")
    assert 0 < share < 0.5

    batch = torch.tensor([NEW[0]["input_ids"]])
    peft(input_ids=batch, labels=batch).loss.backward()
    with_grad = {n for n, p in peft.named_parameters() if p.grad is not None}
    assert with_grad == trainable  # embeddings, head, layer norms, decoder blocks: no gradient at all
    peft.zero_grad(set_to_none=True)

    train(peft, NEW, m, epochs=3)
    for name, (param, before) in base.items():
        assert torch.equal(param, before), f"base weight {name} changed under LoRA"
    assert any(layer.lora_B["default"].weight.abs().sum() > 0 for layer in lora_layers(peft).values())


def test_lora_merge_equals_base_plus_adapter_and_the_adapter_reloads(pretrained, tmp_path):
    from peft import PeftModel
    from transformers import GPT2LMHeadModel

    model = copy.deepcopy(pretrained)
    before = copy.deepcopy(pretrained)
    m = method("lora", lora={"r": 4, "alpha": 16})
    peft = m.prepare_model(model, 1)
    train(peft, NEW, m, epochs=3)
    probe = torch.tensor([NEW[i]["input_ids"][:6] for i in range(4)])
    with torch.no_grad():
        adapter_logits = peft(input_ids=probe).logits
        layer = lora_layers(peft)["base_model.model.transformer.h.0.attn.c_attn"]
        delta = (16 / 4) * (layer.lora_B["default"].weight @ layer.lora_A["default"].weight)

    merged = m.after_step(peft, 1, NEW)
    assert type(merged) is GPT2LMHeadModel  # a plain model: checkpointed and evaluated like any other
    with torch.no_grad():
        assert torch.allclose(merged(input_ids=probe).logits, adapter_logits, atol=1e-5)
    merged_weight = merged.transformer.h[0].attn.c_attn.weight
    assert torch.allclose(merged_weight - before.transformer.h[0].attn.c_attn.weight, delta.T, atol=1e-6)

    merged.save_pretrained(tmp_path)
    m.save_extra(merged, tmp_path)
    assert (tmp_path / "adapter" / "adapter_model.safetensors").exists()
    reloaded = PeftModel.from_pretrained(before, tmp_path / "adapter")  # adapter of step k on checkpoint k-1
    with torch.no_grad():
        assert torch.allclose(reloaded(input_ids=probe).logits, adapter_logits, atol=1e-5)
    fresh = m.prepare_model(GPT2LMHeadModel.from_pretrained(tmp_path), 2)  # merge: a new, zero adapter
    assert all(layer.lora_B["default"].weight.abs().sum() == 0 for layer in lora_layers(fresh).values())


def test_lora_stack_keeps_training_one_adapter_and_resume_matches(pretrained, tmp_path):
    from transformers import GPT2LMHeadModel

    m = method("lora", lora={"across_steps": "stack"})
    merged, _ = run_step(copy.deepcopy(pretrained), NEW, m, make_history([OLD]), step=1)
    merged.save_pretrained(tmp_path)
    m.save_extra(merged, tmp_path)
    adapter_after_1 = {n: p.detach().clone() for n, p in m.strategies[0]._adapter_state.items()}

    continued = m.prepare_model(merged, 2)
    base_now = {
        n.replace("base_model.model.", "").replace(".base_layer", ""): p
        for n, p in continued.named_parameters()
        if "lora_" not in n
    }
    for name, p in pretrained.named_parameters():  # the frozen base is the pre-LoRA model again
        assert torch.allclose(base_now[name], p, atol=1e-6), name
    live = {n: p for n, p in continued.named_parameters() if "lora_" in n}
    assert sum(p.abs().sum() for n, p in live.items() if "lora_B" in n) > 0  # the adapter carried over
    assert len(live) == len(adapter_after_1)

    resumed_method = method("lora", lora={"across_steps": "stack"})  # a new process, resuming after step 1
    loaded = GPT2LMHeadModel.from_pretrained(tmp_path)
    resumed_method.load_extra(loaded, tmp_path)
    resumed = resumed_method.prepare_model(loaded, 2)
    for (n1, p1), (n2, p2) in zip(continued.named_parameters(), resumed.named_parameters()):
        assert n1 == n2 and torch.equal(p1, p2), n1


@pytest.mark.parametrize(
    "arch, expected",
    [
        ("llama", {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}),
        ("t5", {"q", "k", "v", "o", "wi", "wo"}),
    ],
)
def test_lora_default_targets_per_architecture(arch, expected):
    from transformers import LlamaConfig, LlamaForCausalLM, T5Config, T5ForConditionalGeneration

    if arch == "llama":
        model = LlamaForCausalLM(
            LlamaConfig(
                vocab_size=64,
                hidden_size=32,
                intermediate_size=64,
                num_hidden_layers=1,
                num_attention_heads=2,
                num_key_value_heads=2,
            )
        )
    else:
        model = T5ForConditionalGeneration(
            T5Config(vocab_size=64, d_model=32, d_ff=64, d_kv=16, num_layers=1, num_heads=2, decoder_start_token_id=0)
        )
    peft = method("lora").prepare_model(model, 1)
    assert {n.rsplit(".", 1)[-1] for n in lora_layers(peft)} == expected
    assert all("lora_" in n for n, p in peft.named_parameters() if p.requires_grad)


def test_lora_unknown_architecture_asks_for_target_modules():
    class Odd(torch.nn.Module):
        config = type("C", (), {"model_type": "odd", "is_encoder_decoder": False})()

    with pytest.raises(ConfigError, match="method.lora.target_modules"):
        method("lora").prepare_model(Odd(), 1)


def penalised_step(pretrained, *strategies, **sections):
    model = copy.deepcopy(pretrained)
    m = method(*strategies, **sections)
    mixed = m.mix_examples(1, NEW, make_history([OLD]))
    model = m.prepare_model(model, 1)
    train(model, mixed, m, epochs=3)
    return model, m


def test_l2_init_penalises_every_trainable_weight_and_reduces_drift(pretrained):
    start = snapshot(pretrained)
    full, _ = penalised_step(pretrained, "full")
    pulled, m = penalised_step(pretrained, "full", "l2_init", l2_init={"coef": 1.0})
    strategy = next(s for s in m.strategies if isinstance(s, L2Init))
    anchored = {id(p) for _, p, _, _ in strategy.anchors}
    assert anchored == {id(p) for p in pulled.parameters() if p.requires_grad}  # ALL trainable params
    assert strategy.penalty().item() > 0  # a name filter that matched nothing would give exactly 0
    d_full, d_pulled = drift(full, start), drift(pulled, start)
    print(f"\ndrift from the previous step: full {d_full:.3f}, l2_init {d_pulled:.3f}")
    assert d_pulled < 0.5 * d_full


def test_ewc_weights_the_pull_by_the_fisher_and_reduces_drift(pretrained):
    start = snapshot(pretrained)
    full, _ = penalised_step(pretrained, "full")
    pulled, m = penalised_step(pretrained, "full", "ewc", ewc={"coef": 10.0, "fisher_batches": 4})
    strategy = next(s for s in m.strategies if isinstance(s, EWC))
    fisher = [f for _, _, _, f in strategy.anchors]
    values = torch.cat([f.flatten() for f in fisher])
    assert values.mean().item() == pytest.approx(1.0, rel=1e-4)  # normalised: coef on l2_init's scale
    assert values.max() > 10 * values.median()  # not uniform: some weights matter much more
    assert strategy.penalty().item() > 0

    def fisher_drift(model):
        params = dict(model.named_parameters())
        names = [n for n, p in pretrained.named_parameters()]
        return sum((f * (params[n].detach() - start[n]) ** 2).sum() for n, f in zip(names, fisher)).item()

    d_full, d_ewc = drift(full, start), drift(pulled, start)
    print(
        f"\ndrift: full {d_full:.3f}, ewc {d_ewc:.3f}; Fisher-weighted: "
        f"full {fisher_drift(full):.4f}, ewc {fisher_drift(pulled):.4f}"
    )
    assert d_ewc < d_full
    assert fisher_drift(pulled) < 0.5 * fisher_drift(full)


def test_penalty_annealing_follows_recadam_sigmoid():
    m = method("full", "l2_init", l2_init={"coef": 2.0, "anneal_t0": 100, "anneal_k": 0.1})
    strategy = m.strategies[1]
    assert strategy.weight(0) == pytest.approx(2.0 * (1 - 1 / (1 + torch.e**10)), rel=1e-6)
    assert strategy.weight(100) == pytest.approx(1.0)
    assert strategy.weight(1000) < 1e-6
    assert method("full", "l2_init").strategies[1].weight(10**6) == 1.0  # no annealing by default


def test_replay_mixes_the_configured_share_from_earlier_steps():
    step0, step1, current = token_rows(30, 2, 20, 1), token_rows(30, 20, 40, 2), token_rows(40, 40, 64, 3)

    def origin(row):
        return 0 if max(row) < 20 else 1 if max(row) < 40 else 2

    torch.manual_seed(0)
    mixed = method("full", "replay", replay={"ratio": 0.5}).mix_examples(2, current, make_history([step0, step1]))
    counts = [sum(origin(r) == k for r in mixed["input_ids"]) for k in range(3)]
    assert counts[2] == 40 and counts[0] + counts[1] == 20  # 0.5 x 40 replayed
    assert counts[0] > 0 and counts[1] > 0  # drawn from every earlier step

    initial = method("full", "replay", replay={"ratio": 0.5, "source": "initial"})
    mixed = initial.mix_examples(2, current, make_history([step0, step1]))
    assert [sum(origin(r) == k for r in mixed["input_ids"]) for k in range(3)] == [20, 0, 40]

    big = method("full", "replay", replay={"ratio": 3.0, "source": "initial"}).mix_examples(
        2, current, make_history([step0, step1])
    )
    replayed = [tuple(r) for r in big["input_ids"] if origin(r) == 0]
    assert len(replayed) == 120 and all(replayed.count(r) == 4 for r in set(replayed))  # whole pool, 4 times


def test_replay_decay_is_applied_per_epoch_in_the_loop(monkeypatch):
    import helpers.methods as method_fixtures

    history, current = make_history([token_rows(64, 2, 32, 1)]), token_rows(32, 32, 64, 2)
    m = method("full", "replay", replay={"ratio": 1.0, "decay": 0.5})
    mixed = m.mix_examples(1, current, history)
    assert [len(m.epoch_rows(e, len(mixed))) for e in range(3)] == [32 + 32, 32 + 16, 32 + 8]

    seen = []
    real_collate = method_fixtures.collate  # what the fixture's collate_fn calls
    monkeypatch.setattr(method_fixtures, "collate", lambda rows, *a: seen.extend(rows) or real_collate(rows, *a))
    result = train(tiny_gpt2(), mixed, m, epochs=3, batch_size=8, grad_accum=1)
    replayed = sum(max(r["input_ids"]) < 32 for r in seen)
    assert replayed == 32 + 16 + 8 and len(seen) - replayed == 3 * 32
    assert result.optimizer_steps == 8 + 6 + 5  # the schedule is planned on the decayed epochs


def test_replay_tokenizes_each_earlier_step_at_most_once():
    from evolve_train.methods import TokenizedHistory

    data = [token_rows(20, 2 + 10 * k, 12 + 10 * k, k) for k in range(4)]
    calls = []

    def history(step):  # run.py builds a fresh history (and tokenizer closure) at every step
        return TokenizedHistory(list(range(step)), lambda i: calls.append(i) or data[i], pad_id=0)

    m = method("full", "replay", replay={"ratio": 1.0})
    for step in (1, 2, 3):
        m.mix_examples(step, data[step], history(step))
    assert calls == [0]  # steps 1 and 2 were kept when they were trained; step 0 (plain) tokenized once


def test_replay_does_nothing_at_step_0():
    m = method("full", "replay")
    assert len(m.mix_examples(0, NEW, make_history([]))) == len(NEW)
    assert m.epoch_rows(0, len(NEW)) is None


def test_freeze_leaves_frozen_weights_bitwise_unchanged(pretrained):
    model = copy.deepcopy(pretrained)
    m = method("full", "freeze", freeze={"embeddings": True, "lower_blocks": 1})
    model = m.prepare_model(model, 1)
    before = snapshot(model)
    train(model, NEW, m, epochs=3)
    frozen = [n for n in before if n.startswith(("transformer.wte", "transformer.wpe", "transformer.h.0."))]
    moving = [n for n in before if n.startswith("transformer.h.1.")]
    assert frozen and moving
    for name in frozen:
        assert torch.equal(dict(model.named_parameters())[name], before[name]), name
    assert torch.equal(model.lm_head.weight, before["transformer.wte.weight"])  # the tied head too
    assert all(not torch.equal(dict(model.named_parameters())[n], before[n]) for n in moving)


def test_freeze_more_blocks_than_the_model_has_names_the_key():
    with pytest.raises(ConfigError, match="method.freeze.lower_blocks=5"):
        method("full", "freeze", freeze={"lower_blocks": 5}).prepare_model(tiny_gpt2(), 1)


@pytest.mark.parametrize(
    "strategies, sections, key",
    [
        (["lora"], {"lora": {"across_steps": "sideways"}}, "method.lora.across_steps"),
        (["lora"], {"lora": {"r": 0}}, "method.lora.r"),
        (["lora"], {"lora": {"dropout": 1.0}}, "method.lora.dropout"),
        (["full", "replay"], {"replay": {"decay": 0.0}}, "method.replay.decay"),
        (["full", "replay"], {"replay": {"source": "future"}}, "method.replay.source"),
        (["full", "replay"], {"replay": {"ratio": -1}}, "method.replay.ratio"),
        (["full", "l2_init"], {"l2_init": {"coef": -1}}, "method.l2_init.coef"),
        (["full", "ewc"], {"ewc": {"fisher_batches": 0}}, "method.ewc.fisher_batches"),
        (["full", "freeze"], {}, "method.freeze"),
        (["full", "magic"], {}, "method.strategies"),
        (["lora", "lora"], {}, "method.strategies"),
        (["full", "lora"], {}, "method.strategies"),
    ],
)
def test_bad_method_config_names_the_key(strategies, sections, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        method(*strategies, **sections)


def test_step0_is_plain_full_training_unless_at_step0():
    m = method("lora", "replay")
    assert [s.name for s in m.at_step(0).strategies] == ["full"]
    assert m.at_step(1) is m and m.at_step(3) is m
    m.cfg.at_step0 = True
    assert m.at_step(0) is m


def test_strategies_combine_lora_with_replay(pretrained):
    m = method("lora", "replay", replay={"ratio": 0.5})
    merged, mixed = run_step(copy.deepcopy(pretrained), NEW, m, make_history([OLD]))
    assert len(mixed) == len(NEW) + 24
    assert type(merged).__name__ == "GPT2LMHeadModel"
    assert drift(merged, snapshot(pretrained)) > 0


def test_replay_plan_survives_only_one_step():
    m = method("full", "replay")
    m.mix_examples(1, NEW, make_history([OLD]))
    assert isinstance(m.strategies[1], Replay) and m.strategies[1].plan is not None
    m.mix_examples(0, NEW, make_history([]))
    assert m.strategies[1].plan is None


def reference_penalty(anchors) -> torch.Tensor:
    """The penalty as it was written before the memory work: full-size temporaries kept for backward."""
    total = None
    for param, anchor, fisher in anchors:
        term = (param - anchor).pow(2)
        term = (term * fisher).sum() if fisher is not None else term.sum()
        total = term if total is None else total + term
    return total


@pytest.mark.parametrize("name", ["l2_init", "ewc"])
def test_anchor_penalty_and_its_gradients_equal_the_plain_formula(pretrained, name):
    model = copy.deepcopy(pretrained)
    m = method("full", name, **{name: {"coef": 1.0, "fisher_batches": 2} if name == "ewc" else {"coef": 1.0}})
    m.mix_examples(1, NEW, make_history([OLD]))
    m.prepare_model(model, 1)
    strategy = m.strategies[1]
    with torch.no_grad():
        for i, p in enumerate(model.parameters()):
            p.add_(0.01 * torch.randn(p.shape, generator=torch.Generator().manual_seed(i)))
    params = [p for _, p, _, _ in strategy.anchors]
    mine = strategy.penalty()
    grads = torch.autograd.grad(mine, params)
    theirs = reference_penalty([a[1:] for a in strategy.anchors])
    reference = torch.autograd.grad(theirs, params)
    assert mine.item() > 0 and mine.item() == pytest.approx(theirs.item(), rel=1e-6)
    for a, b in zip(grads, reference):
        assert torch.allclose(a, b, rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize("name", ["l2_init", "ewc"])
def test_anchors_follow_parameters_that_prepare_replaced(pretrained, name):
    """As FSDP2's prepare does (fully_shard swaps every parameter for a new one): the penalty must act on the
    parameters that train, found by name, not on the objects anchored before."""
    model = copy.deepcopy(pretrained)
    m = method("full", name, **{name: {"coef": 1.0, "fisher_batches": 2} if name == "ewc" else {"coef": 1.0}})
    m.mix_examples(1, NEW, make_history([OLD]))
    m.prepare_model(model, 1)
    replaced = {}  # new Parameter objects, moved away from the anchors (tied weights stay tied)
    for module in model.modules():
        for key, param in list(module._parameters.items()):
            if param is not None:
                if id(param) not in replaced:
                    replaced[id(param)] = torch.nn.Parameter(param.detach() + 0.01)
                module._parameters[key] = replaced[id(param)]
    loss = m.extra_loss(model, 0)
    loss.backward()
    trained = [p for p in model.parameters() if p.requires_grad]
    assert loss.item() > 0 and all(p.grad is not None and p.grad.abs().sum() > 0 for p in trained)
    assert {id(p) for _, p, _, _ in m.strategies[1].anchors} == {id(p) for p in trained}


def test_bf16_anchors_halve_the_stored_bytes_and_stay_close(pretrained):
    def anchored(dtype):
        model = copy.deepcopy(pretrained)
        m = method("full", "l2_init", l2_init={"anchor_dtype": dtype})
        m.prepare_model(model, 1)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.01)
        return m.strategies[1]

    fp32, bf16 = anchored("float32"), anchored("bfloat16")
    size = {s: sum(a.numel() * a.element_size() for _, _, a, _ in s.anchors) for s in (fp32, bf16)}
    assert {a.dtype for _, _, a, _ in bf16.anchors} == {torch.bfloat16} and size[bf16] * 2 == size[fp32]
    assert bf16.penalty().item() == pytest.approx(fp32.penalty().item(), rel=0.05)


def test_ewc_fisher_on_packed_rows_keeps_documents_apart_under_attention_reset():
    """The Fisher batches are collated as the loop's: with ``attention_reset`` a packed row's documents do not
    attend to each other, so changing document A leaves the gradient of document B's tokens unchanged."""
    from evolve_train.methods.regularizers import diagonal_fisher

    model = tiny_gpt2()
    params = [p for p in model.parameters()]

    def row(first_doc: list[int]) -> Dataset:
        second = [9, 10, 11, 12, 13, 14]
        ids = first_doc + second
        labels = [IGNORE] * len(first_doc) + [IGNORE] + second[1:]  # the loss on document B only
        positions = list(range(len(first_doc))) + list(range(len(second)))
        return Dataset.from_dict({"input_ids": [ids], "labels": [labels], "position_ids": [positions]})

    def fisher(doc_a, attention_reset):
        with one_thread():
            return torch.cat(
                [
                    f.flatten()
                    for f in diagonal_fisher(model, params, row(doc_a), PAD, 1, 1, attention_reset=attention_reset)
                ]
            )

    a, changed = [2, 3, 4, 5, 6], [7, 8, 7, 8, 7]
    assert torch.equal(fisher(a, True), fisher(changed, True))
    assert not torch.allclose(fisher(a, False), fisher(changed, False))  # one causal mask over the row: it does
