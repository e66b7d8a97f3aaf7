"""The W&B logger, checked on the offline run files wandb 0.31 writes.

wandb 0.31 writes no ``config.yaml`` / ``wandb-summary.json`` for offline runs and ``wandb.Api`` cannot read
them, so the tests read the run's ``run-<id>.wandb`` file: a LevelDB-style log (7-byte ``:W&B`` header,
32 KiB blocks, records of crc32/length/type + payload) of ``wandb_internal_pb2.Record`` protobufs.
"""

from __future__ import annotations


from evolve_train.tracking.wandb_logger import RUN_ID_FILE, WandbLogger, is_secret_key, strip_secrets
from helpers import tiny_cfg
from helpers.runs import offline_runs, parse_offline_run


def test_failed_run_finishes_with_exit_code_1(tmp_path, monkeypatch):
    from omegaconf import OmegaConf

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = OmegaConf.to_object(tiny_cfg(tmp_path, "logger.backends=[disk,wandb]", "logger.wandb.group=mine"))
    logger = WandbLogger(run_dir=tmp_path, cfg=cfg)
    logger.log_train({"time_step": 0, "optimizer_step": 2, "loss": 1.5, "lr": 1e-3, "tokens": 10})
    logger.close(ok=False)
    logger.close(ok=False)  # idempotent
    parsed = parse_offline_run(offline_runs(tmp_path)[0])
    assert parsed["exit_code"] == 1
    assert parsed["run"].run_group == "mine" and parsed["run"].display_name == "default/full/seed0"
    assert [h["train/loss"] for h in parsed["history"] if "train/loss" in h] == [1.5]


def test_env_mode_wins_and_disabled_writes_nothing(tmp_path, monkeypatch):
    from omegaconf import OmegaConf

    monkeypatch.setenv("WANDB_MODE", "disabled")
    cfg = OmegaConf.to_object(tiny_cfg(tmp_path, "logger.wandb.mode=online"))
    logger = WandbLogger(run_dir=tmp_path, cfg=cfg)
    assert logger.mode == "disabled"
    logger.log_eval(
        0,
        [
            {
                "group": "splits",
                "checkpoint": 0,
                "set": "unchanged",
                "set_name": "unchanged",
                "set_step": None,
                "n": 3,
                "em": 0.5,
                "f1": 0.5,
            }
        ],
    )
    logger.close()
    assert not (tmp_path / "wandb").exists() and not (tmp_path / RUN_ID_FILE).exists()


def test_secret_keys_are_stripped_recursively():
    for name in ("api_key", "WANDB_API_KEY", "apiKey", "hf_token", "client_secret", "db_password", "key"):
        assert is_secret_key(name), name
    for name in ("max_new_tokens", "tokenizer", "keep_last_states", "train_tokens", "monkeys"):
        assert not is_secret_key(name), name
    cleaned = strip_secrets({"a": {"token": "x", "b": [{"password": 1, "c": 2}]}, "max_new_tokens": 3})
    assert cleaned == {"a": {"b": [{"c": 2}]}, "max_new_tokens": 3}
