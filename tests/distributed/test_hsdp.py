"""HSDP (``trainer.fsdp_mesh=hsdp``): 4 gloo processes as 2 replicas x 2 shards, as 2 nodes of 2 would run,
train the weights FSDP2 over all 4 trains (up to float rounding: the gradients are summed in another order) and
write the same evaluation rows; each process holds half the model (its replica's shard) where FSDP over 4 holds
a quarter. One epoch per time step, 2 blocks: about 25 s a run on 2 cores.

The 4 ranks are processes forked from a Python that has already imported the libraries (tests/helpers/forked.py: the
environment ``accelerate launch --config_file accelerate_configs/fsdp.yaml --num_processes 4`` gives each); the
launch command itself is tests/distributed/test_ddp.py's and tests/distributed/test_multiprocess_faults.py's."""

from __future__ import annotations

import re
import sys

import pytest
from helpers import TINY
from helpers.forked import Ranks, run_forked
from helpers.processes import CPU_ENV, em_rows, relative_difference
from safetensors.torch import load_file

SAME_AS_FSDP = 1e-4
OVERRIDES = [*TINY, "model.n_layer=2", "trainer.epochs_step0=1", "trainer.epochs=1"]


def held(output: str) -> list[list[int]]:
    """Per trained step, the parameter values each process held."""
    return [[int(n) for n in found.split(",")] for found in re.findall(r"processes held \[([\d, ]+)\]", output)]


@pytest.mark.slow
def test_hsdp_2x2_trains_what_fsdp_over_4_trains(tmp_path):
    hsdp, fsdp = tmp_path / "hsdp", tmp_path / "fsdp"
    command, four = ["train.py", *OVERRIDES], Ranks(4, "fsdp")
    mesh = ["trainer.fsdp_mesh=hsdp", "trainer.fsdp_replicate=2"]
    output = run_forked(four, [*command, *mesh, f"hydra.run.dir={hsdp}"], CPU_ENV)
    flat = run_forked(four, [*command, "trainer.fsdp_mesh=fsdp", f"hydra.run.dir={fsdp}"], CPU_ENV)
    assert "FSDP2 as HSDP: 2 replicas x 2 shards" in output and "as HSDP" not in flat
    assert held(output) and all(2 * max(h) == 2 * min(h) == sum(h) // 2 for h in held(output))  # halves
    assert held(flat) and all(4 * max(h) == sum(h) for h in held(flat))  # quarters
    for k in range(3):
        difference = relative_difference(
            load_file(fsdp / f"steps/{k}/model.safetensors"), load_file(hsdp / f"steps/{k}/model.safetensors")
        )
        print(f"step {k}: relative weight difference HSDP 2x2 vs FSDP over 4 {difference:.2e}", file=sys.stderr)
        assert difference < SAME_AS_FSDP, k
    assert em_rows(hsdp) == em_rows(fsdp) and em_rows(hsdp)
