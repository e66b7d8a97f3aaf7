"""FSDP2 with ``model.dtype=bfloat16`` and bf16 mixed precision, 2 gloo processes: the weights stay bf16 through
the steps and in the checkpoints, and a run killed mid-step resumes to the uninterrupted run's weights and rows.

The ranks are processes forked from a Python that has already imported the libraries (tests/helpers/forked.py: the
environment ``accelerate launch`` gives each); the launch command itself is tests/distributed/test_ddp.py's and
tests/distributed/test_multiprocess_faults.py's."""

from __future__ import annotations


import pytest
import torch
from safetensors.torch import load_file
from helpers.forked import FSDP2, run_forked, run_forked_killed
from helpers.processes import relative_difference, CPU_ENV as ENV, SMALL, em_rows

BF16 = [*SMALL, "method=full", "model.dtype=bfloat16", "trainer.mixed_precision=bf16", "trainer.batch_size=8"]


@pytest.mark.slow
def test_fsdp2_bf16_weights_stay_bf16_and_a_resumed_run_equals_the_uninterrupted_one(tmp_path):
    reference, resumed = tmp_path / "reference", tmp_path / "resumed"
    overrides = [*BF16, "trainer.save_every_n_steps=2"]
    output = run_forked(FSDP2, ["train.py", *overrides, f"hydra.run.dir={reference}"], ENV)
    assert "FSDP2 on CPU: 2 gloo processes" in output
    for k in range(3):  # after step 0's and step 1's FSDP2 training, and in every checkpoint
        assert {t.dtype for t in load_file(reference / f"steps/{k}/model.safetensors").values()} == {torch.bfloat16}
    command = ["train.py", *overrides, f"hydra.run.dir={resumed}"]
    run_forked_killed(FSDP2, command, ENV, "optimizer_step:27")
    output = run_forked(FSDP2, command, ENV)
    assert "resuming time step" in output
    for k in range(3):
        difference = relative_difference(
            load_file(reference / f"steps/{k}/model.safetensors"), load_file(resumed / f"steps/{k}/model.safetensors")
        )
        assert difference == 0.0, (k, difference)
    assert em_rows(resumed) == em_rows(reference)
