"""Reliability in process (fast): mid-step states, non-finite guard, Ctrl-C, disk checks, cluster configs.

The end-to-end kill tests (SIGKILL at named points, in subprocesses) are in test_faults.py.
Every resumed run here is compared with an uninterrupted reference run of the same config: metrics rows
(timings aside), training-log rows and the last checkpoint's weights must be *identical* (CPU).
"""

from __future__ import annotations

import errno
import json
import shutil
from collections import namedtuple
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import GPT2LMHeadModel

from evolve_train.errors import ConfigError
from evolve_train.run import train
from evolve_train.training import faults
from evolve_train.training.checkpoint import estimate_bytes, gathered_state_dict, save_checkpoint
from evolve_train.training.nonfinite import NonFiniteLossError
from evolve_train.training.train_state import (
    join_tensors,
    rng_state,
    set_rng_state,
    split_tensors,
)
from helpers import tiny_cfg
from helpers.faults import FAST
from helpers.processes import ROOT


@pytest.fixture(autouse=True)
def fresh_fault_counts(monkeypatch):
    monkeypatch.setattr(faults, "_arrivals", {})
    monkeypatch.delenv(faults.ENV, raising=False)
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)  # trainer.num_threads=1 must not leak into other tests


def test_states_hold_tensors_and_json_only_and_round_trip_optimizer_and_rng(tmp_path):
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(4, 3)).sum().backward()
    optimizer.step()
    tensors: dict = {}
    meta = split_tensors({"optimizer": optimizer.state_dict(), "rng": rng_state(), "inf": float("inf")}, tensors, "x")
    expected = (torch.rand(3), __import__("random").random())  # the draws right after the capture
    text = json.dumps(meta, allow_nan=False)  # strict JSON
    from safetensors.torch import save_file

    save_file(tensors, str(tmp_path / "t.safetensors"))
    back = join_tensors(json.loads(text), load_file(str(tmp_path / "t.safetensors")))
    other = torch.optim.AdamW(torch.nn.Linear(3, 2).parameters(), lr=1e-3)
    other.load_state_dict(back["optimizer"])
    state = other.state_dict()["state"][0]
    assert torch.equal(state["exp_avg"], optimizer.state_dict()["state"][0]["exp_avg"])
    assert back["inf"] == float("inf")
    set_rng_state(back["rng"])
    assert torch.equal(torch.rand(3), expected[0]) and __import__("random").random() == expected[1]


def test_guard_names_the_first_bad_batch_and_counts_skipped_windows_from_one_read():
    from evolve_train.training.nonfinite import NonFiniteGuard

    stop = NonFiniteGuard("stop", 2, torch.device("cpu"), planned_micro_batches=20)
    for micro, value in enumerate([1.0, 2.0, float("inf"), float("nan")]):
        stop.observe_loss(torch.tensor(value), 1, 10 + micro, micro)
        stop.observe_gradients(torch.tensor(0.5), [])
        assert stop.end_window() is None  # stop: every update is applied, the flags are read later
    with pytest.raises(NonFiniteLossError, match=r"non-finite loss \(inf\) at time step 2, epoch 1, batch 12"):
        stop.check(4)

    skip = NonFiniteGuard("skip", 2, torch.device("cpu"), planned_micro_batches=20)
    skip.observe_loss(torch.tensor(1.0), 0, 0, 0)
    skip.observe_gradients(torch.tensor(float("nan")), [])
    assert skip.end_window().item() == 1.0  # the fused AdamW's found_inf: the update is dropped on the device
    skip.observe_loss(torch.tensor(1.0), 0, 1, 1)
    skip.observe_gradients(None, [torch.nn.Parameter(torch.ones(2))])  # no grads: nothing to check
    assert skip.end_window().item() == 0.0
    assert skip.check(2) == 1 and skip.skipped == 1  # one read: one of the two updates was dropped
    for micro in range(2, 12):
        skip.observe_loss(torch.tensor(float("nan")), 0, micro, micro)
        skip.end_window()
        if micro < 11:
            assert skip.check(1) == 1
    with pytest.raises(NonFiniteLossError, match="diverged"):
        skip.check(1)  # the 11th skip exceeds the limit (max(10, 10% of 20))


def test_an_unwritable_run_dir_fails_before_training(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(ConfigError, match="not writable"):
        train(tiny_cfg(blocker / "run", *FAST))


def test_too_little_disk_space_fails_before_training(tmp_path, monkeypatch):
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**12, 10**12 - 2**20, 2**20))
    with pytest.raises(ConfigError, match="not enough free disk space"):
        train(tiny_cfg(tmp_path / "run", *FAST))
    assert not (tmp_path / "run" / "steps").exists() and not (tmp_path / "run" / "train_log.jsonl").exists()


def test_checkpoint_size_estimate_counts_tied_weights_once():
    from transformers import GPT2Config

    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50, n_positions=32))
    checkpoint, state = estimate_bytes(model)
    params = sum(p.numel() for p in model.parameters())  # parameters() yields tied weights once
    assert checkpoint == 4 * params and state == 12 * params


def test_a_full_disk_during_a_training_state_leaves_nothing_half_written(tmp_path, monkeypatch):
    import safetensors.torch

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(safetensors.torch, "save_file", full)
    with pytest.raises(OSError, match="could not write the training state"):
        train(tiny_cfg(tmp_path / "run", *FAST, "trainer.save_every_n_steps=4"))
    assert list((tmp_path / "run" / "train_state").iterdir()) == []


def test_save_checkpoint_cleans_up_after_any_failure(tmp_path):
    class Broken:
        def save_pretrained(self, directory, **_):
            (Path(directory) / "model.safetensors").write_bytes(b"partial")
            raise RuntimeError("killed by a bug")

    with pytest.raises(RuntimeError):
        save_checkpoint(tmp_path, 3, Broken(), tokenizer=None)
    assert list((tmp_path / "steps").iterdir()) == []


@pytest.mark.parametrize(
    "override, needle",
    [
        ("trainer.keep_last_states=0", "trainer.keep_last_states"),
        ("trainer.save_every_n_steps=-1", "trainer.save_every_n_steps"),
    ],
)
def test_reliability_settings_are_validated(tmp_path, override, needle):
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.")):
        train(tiny_cfg(tmp_path / "run", override))


@pytest.mark.parametrize(
    "name, mode", [("ddp", "multi_gpu"), ("fsdp", "use_fsdp"), ("deepspeed_zero2", "use_deepspeed")]
)
def test_accelerate_configs_parse_and_select_their_backend(name, mode):
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser

    path = ROOT / "accelerate_configs" / f"{name}.yaml"
    args = launch_command_parser().parse_args(["--config_file", str(path), "train.py", "trainer=gpu"])
    args, _, _ = _validate_launch_command(args)
    assert getattr(args, mode) is True
    assert args.mixed_precision == "bf16" and args.num_processes >= 2


def test_fsdp_config_builds_an_fsdp2_plugin(monkeypatch):
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils import FullyShardedDataParallelPlugin, prepare_multi_gpu_env

    path = ROOT / "accelerate_configs" / "fsdp.yaml"
    args, _, _ = _validate_launch_command(launch_command_parser().parse_args(["--config_file", str(path), "x.py"]))
    for key, value in prepare_multi_gpu_env(args).items():
        if key.startswith(("FSDP_", "ACCELERATE_USE_FSDP")):
            monkeypatch.setenv(key, value)
    plugin = FullyShardedDataParallelPlugin()
    assert plugin.fsdp_version == 2 and plugin.reshard_after_forward is True
    assert plugin.state_dict_type.name == "SHARDED_STATE_DICT"


def test_deepspeed_config_gets_the_trainer_micro_batch():
    import yaml
    from accelerate.utils import DeepSpeedPlugin

    from evolve_train.training.distributed import configure_deepspeed

    settings = yaml.safe_load((ROOT / "accelerate_configs" / "deepspeed_zero2.yaml").read_text())
    plugin = DeepSpeedPlugin(**settings["deepspeed_config"])
    assert plugin.deepspeed_config["zero_optimization"]["stage"] == 2

    class Fake:
        state = type("State", (), {"deepspeed_plugin": plugin})()

    configure_deepspeed(Fake(), 24)
    assert plugin.deepspeed_config["train_micro_batch_size_per_gpu"] == 24


def test_plain_models_are_saved_as_they_are():
    from accelerate import Accelerator

    assert gathered_state_dict(Accelerator(cpu=True), torch.nn.Linear(2, 2)) is None
