"""Run identity: run dirs named after the configuration, the config recorded in state.json and checked on
resume, the step-0 cache key (evolve_train/training/identity.py, training/step0_cache.py)."""

from __future__ import annotations

import json
import logging

import pytest
from helpers import CONFIG_DIR, TINY
from hydra import compose, initialize_config_dir
from omegaconf import open_dict, read_write

from evolve_train.data.timeline import TimeStep
from evolve_train.errors import ConfigError
from evolve_train.models.build import train_tokenizer
from evolve_train.training import identity
from evolve_train.training.checkpoint import RunState
from helpers.identity import cfg_of, step0_key_of, tokenizer  # noqa: F401  (a fixture)


def hydra_cfg(*overrides: str):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides), return_hydra_config=True)


def test_result_config_is_flat_and_leaves_out_only_the_documented_keys():
    config = identity.result_config(cfg_of())
    assert config["trainer.lr"] == 2e-3 and config["method.lora.r"] == 8 and config["seed"] == 0
    assert config["data.fields"] == {} and isinstance(config["eval.evaluators"], list)  # dicts/lists: one leaf each
    for key in (
        "trainer.num_threads",
        "trainer.log_every",
        "eval.batch_size",
        "resume",
        "run_dir",
        "logger.backends",
        "logger.wandb.project",
        "eval.gate.flip_rate_max",
        "data.cache_dir",
    ):
        assert key not in config, key
    assert all(isinstance(k, str) and not identity.may_differ(k) for k in config)


def recorded_state(*overrides: str, trained=(0, 1)) -> RunState:
    state = RunState(trained=list(trained), evaluated=list(trained))
    identity.record(state, cfg_of(*overrides))
    return state


def test_check_resume_lists_every_changed_key_with_old_and_new_values(tmp_path):
    state = recorded_state("method=lora")
    with pytest.raises(ConfigError) as error:
        identity.check_resume(tmp_path, cfg_of("method=lora", "trainer.lr=5e-4", "method.lora.r=16"), state)
    message = str(error.value)
    assert str(tmp_path) in message
    assert "method.lora.r: 8 -> 16" in message and "trainer.lr: 0.002 -> 0.0005" in message
    assert "seed:" not in message  # only what changed


def test_check_resume_allows_the_same_config_and_keys_that_may_differ(tmp_path):
    state = recorded_state()
    identity.check_resume(tmp_path, cfg_of(), state)
    identity.check_resume(
        tmp_path,
        cfg_of(
            "eval.batch_size=2",
            "logger.backends=[disk,console]",
            "trainer.num_threads=2",
            "trainer.save_every_n_steps=5",
        ),
        state,
    )


def test_batch_size_may_change_with_the_processes_when_the_global_batch_stays(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    state = recorded_state("trainer.batch_size=8")  # 2 x 8 rows
    assert state.identity["processes"] == 2
    monkeypatch.setenv("WORLD_SIZE", "1")
    identity.check_resume(tmp_path, cfg_of("trainer.batch_size=16"), state)  # 1 x 16: the same global batch
    with pytest.raises(ConfigError, match="trainer.batch_size: 8 -> 12"):  # 1 x 12: another global batch
        identity.check_resume(tmp_path, cfg_of("trainer.batch_size=12"), state)
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match="trainer.batch_size: 8 -> 16"):  # same processes: another batch
        identity.check_resume(tmp_path, cfg_of("trainer.batch_size=16"), state)


def test_check_resume_with_resume_false_is_left_to_check_run_dir(tmp_path):
    identity.check_resume(tmp_path, cfg_of("trainer.lr=0.5", "resume=false"), recorded_state())


def test_a_run_dir_without_a_fingerprint_resumes_with_a_warning(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        identity.check_resume(tmp_path, cfg_of(), RunState(trained=[0], evaluated=[0]))
    assert "records no config" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        identity.check_resume(tmp_path, cfg_of(), RunState())  # a fresh dir: nothing to say
    assert caplog.text == ""


def test_settings_of_another_code_version_are_reported_not_refused(tmp_path, caplog):
    state = recorded_state()
    state.identity["config"]["trainer.retired_setting"] = 3
    del state.identity["config"]["trainer.grad_clip"]
    with caplog.at_level(logging.WARNING):
        identity.check_resume(tmp_path, cfg_of(), state)
    assert "trainer.retired_setting" in caplog.text and "trainer.grad_clip" in caplog.text


def test_auto_resolving_to_another_precision_on_resume_is_said(tmp_path, caplog):
    """``trainer.mixed_precision=auto`` is the same config on every machine; a resume where it resolves to
    another precision than the run started in warns, naming both (an unchanged one says nothing)."""
    state = recorded_state("trainer.mixed_precision=auto")
    assert state.identity["precision"] in ("bf16", "no")
    with caplog.at_level(logging.WARNING):
        identity.check_resume(tmp_path, cfg_of("trainer.mixed_precision=auto"), state)
    assert "resolved" not in caplog.text
    other = "no" if state.identity["precision"] == "bf16" else "bf16"
    state.identity["precision"] = other  # as a machine of the other kind recorded it
    with caplog.at_level(logging.WARNING):
        identity.check_resume(tmp_path, cfg_of("trainer.mixed_precision=auto"), state)
    assert f"resolved to {other} when this run started" in caplog.text
    assert f"trainer.mixed_precision={other} to train on as before" in caplog.text


def test_secret_values_are_compared_but_never_written():
    from dataclasses import dataclass

    secret = "hf_planted_secret_123"

    @dataclass
    class Section:
        hf_token: str = secret
        max_new_tokens: int = 5

    config = identity.result_config(Section())
    assert secret not in json.dumps(config) and config["max_new_tokens"] == 5
    assert config["hf_token"] != identity.result_config(Section(hf_token="other_value_456"))["hf_token"]
    tagged = identity.run_tag([f"+data.hf_token={secret}"])
    assert secret not in tagged and "redacted" in tagged
    assert tagged != identity.run_tag(["+data.hf_token=other_value_456"])


def test_config_diff():
    changed, removed, added = identity.config_diff({"a": 1, "b": [1], "c": 0}, {"a": 1, "b": [2], "d": 0})
    assert changed == [("b", [1], [2])] and removed == ["c"] and added == ["d"]


def test_state_json_round_trips_the_identity(tmp_path):
    state = recorded_state()
    state.save(tmp_path)
    assert RunState.load(tmp_path).identity == state.identity
    old = {"trained": [0], "evaluated": [0], "method_state": {}}  # written before fingerprints
    (tmp_path / "state.json").write_text(json.dumps(old))
    assert RunState.load(tmp_path).identity is None


def test_run_tag_names_result_affecting_overrides_only():
    assert identity.run_tag([]) == ""
    assert (
        identity.run_tag(
            [
                "seed=3",
                "method=lora",
                "experiment=lora_vs_full",
                "logger=wandb",
                "logger.backends=[disk]",
                "eval.batch_size=8",
                "trainer.num_threads=2",
                "hydra.run.dir=x",
                "resume=false",
                "+extra.note=x",
            ]
        )
        == ""
    )
    tag = identity.run_tag(["method.lora.r=4"])
    assert tag.startswith("method.lora.r=4_") and tag.endswith("/")


def test_run_tag_is_canonical_and_distinguishes_values():
    assert identity.run_tag(["trainer.lr=1e-3"]) == identity.run_tag(["trainer.lr=0.001"])
    assert identity.run_tag(["a.b=1", "c.d=2"]) == identity.run_tag(["c.d=2", "a.b=1"])
    assert identity.run_tag(["method.lora.r=4"]) != identity.run_tag(["method.lora.r=16"])
    assert identity.run_tag(["trainer.lr=1e-3"]) != identity.run_tag(["trainer.lr=2e-3"])


def test_run_tag_is_filesystem_safe_and_bounded():
    long_path = "data.root=/very/long/" + "x" * 300 + "/release with spaces"
    tags = [
        identity.run_tag([long_path]),
        identity.run_tag(TINY),
        identity.run_tag(["data.root=/a/b"]),
        identity.run_tag(["data.root=/a_b"]),
        identity.run_tag(["~eval.time_slices"]),
    ]
    assert len(set(tags)) == len(tags)  # sanitised alike, still different (the hash)
    for tag in tags:
        name = tag.rstrip("/")
        assert "/" not in name and not name.startswith((".", "-")) and len(name) <= identity.TAG_MAX_CHARS + 9
        assert all(ch.isalnum() or ch in "._=+-" for ch in name), name  # no comma: lm-eval's --model_args


def test_run_dirs_name_method_seed_and_overrides():
    assert hydra_cfg().hydra.run.dir == "runs/default/full/seed0"  # the plain run keeps its short dir
    assert hydra_cfg("seed=2", "method=lora", "logger=wandb").hydra.run.dir == "runs/default/lora/seed2"
    a = hydra_cfg("method=lora", "method.lora.r=4").hydra.run.dir
    b = hydra_cfg("method=lora", "method.lora.r=16").hydra.run.dir
    assert a != b and a.startswith("runs/default/lora/method.lora.r=4_") and a.endswith("/seed0")
    sweep = hydra_cfg("experiment=lora_vs_full", "trainer.lr=1e-3").hydra
    assert sweep.sweep.dir == "runs/lora_vs_full/multirun"
    assert sweep.sweep.subdir.startswith("full/trainer.lr=0.001_") and sweep.sweep.subdir.endswith("/seed0")


def test_hydra_does_not_overwrite_the_record_of_a_run_it_will_refuse(tmp_path):
    state = recorded_state()
    state.save(tmp_path)

    def subdir(*overrides):
        root = hydra_cfg(*TINY, *overrides)
        with read_write(root), open_dict(root):
            root.hydra.runtime.output_dir = str(tmp_path)
        return root.hydra.output_subdir

    assert subdir() == ".hydra"
    assert subdir("eval.batch_size=2") == ".hydra"  # resumes: Hydra records the new command as before
    assert subdir("trainer.lr=0.5") is None  # refused: .hydra/ keeps the earlier command
    assert subdir("trainer.lr=0.5", "resume=false") == ".hydra"  # not a resume (check_run_dir decides)


@pytest.mark.parametrize(
    "changed",
    [
        "seed=1",
        "data.world.seed=3",
        "data.world.n_entities=13",
        "data.objective=clm",
        "data.kind=temporal_qa",
        "model.n_embd=64",
        "model.arch=t5",
        "model.dropout=0.1",
        "trainer.lr=0.5",
        "trainer.epochs_step0=9",
        "trainer.batch_size=8",
        "trainer.grad_accum=2",
        "trainer.seq_len=64",
        "trainer.warmup_steps=3",
        "trainer.weight_decay=0.1",
        "trainer.grad_clip=0.5",
        "trainer.mixed_precision=bf16",
        "trainer.compile=true",
        "method.at_step0=true",
    ],
)
def test_step0_key_misses_when_a_setting_step0_depends_on_changes(tokenizer, changed):
    assert step0_key_of(tokenizer, changed) != step0_key_of(tokenizer)


@pytest.mark.parametrize(
    "same",
    [
        "method=lora",
        "method=ewc",
        "method.lora.r=4",
        "method.replay.ratio=0.5",
        "trainer.epochs=9",
        "trainer.log_every=7",
        "trainer.num_threads=2",
        "trainer.save_every_n_steps=3",
        "eval.max_new_tokens=3",
        "eval.batch_size=2",
        "logger.backends=[disk,console]",
        "data.cache_dir=/tmp/elsewhere",
        "resume=false",
    ],
)
def test_step0_key_hits_when_only_later_steps_or_bookkeeping_change(tokenizer, same):
    assert step0_key_of(tokenizer, same) == step0_key_of(tokenizer)


def test_step0_key_covers_the_method_when_it_trains_step0(tokenizer):
    at0 = ("method=lora", "method.at_step0=true")
    assert step0_key_of(tokenizer, *at0, "method.lora.r=4") != step0_key_of(tokenizer, *at0)
    assert step0_key_of(tokenizer, *at0, "method.name=renamed") == step0_key_of(tokenizer, *at0)  # a label only


def test_step0_key_covers_tokenizer_corpus_processes_and_device(tokenizer):
    base = step0_key_of(tokenizer)
    assert step0_key_of(train_tokenizer(["other words entirely"], 300)) != base
    assert step0_key_of(tokenizer, num_processes=2) != base
    assert step0_key_of(tokenizer, runtime={"device": "cuda", "distributed_type": "NO"}) != base
    assert step0_key_of(tokenizer, runtime={"device": "cpu", "distributed_type": "DistributedType.FSDP"}) != base
    edited = TimeStep(0, "2018", pairs=[{"input": "Orvane is run by <mask>.", "output": "Tom Vey"}])
    assert step0_key_of(tokenizer, step0=edited) != base  # data changed in place under the same data.root
