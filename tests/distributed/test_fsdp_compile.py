"""``trainer.compile`` with ``model.gradient_checkpointing`` under FSDP2, with 2 gloo processes on CPU
(docs/training.md, "Compile and activation checkpointing").

A tiny two-block Llama trains two time steps with each block compiled by inductor (CPU: C++ kernels), its forward
checkpointed by transformers and the block sharded by ``fully_shard``; its training losses are the same run's
eager ones without checkpointing (absolute difference <= 1e-4 per logged optimizer step; 5e-7 measured). Dynamo
met no graph break (a checkpointed block that fell back to eager would show one) and the second time step reused
the first one's graphs.

The ranks are processes forked from a Python that has already imported the libraries (tests/helpers/forked.py: the
environment ``accelerate launch`` gives each; each rank compiles in its own process, as launched ones do); the launch
command itself is tests/distributed/test_ddp.py's and tests/distributed/test_multiprocess_faults.py's.
"""

from __future__ import annotations

import re
import sys

import pytest
from helpers import losses
from helpers.forked import FSDP2, run_forked
from helpers.processes import CPU_ENV as ENV, SMALL

SAME_LOSS = 1e-4  # absolute, on losses of about 5.5
SHORT = [
    *SMALL,
    "model.arch=llama",
    "trainer.batch_size=8",
    "trainer.log_every=1",
    "data.world.n_steps=2",
    "trainer.max_steps_step0=3",
    "trainer.max_steps=2",
    "eval.evaluators=[]",
]


@pytest.mark.slow
def test_compiled_checkpointed_blocks_train_the_eager_losses_under_fsdp2(tmp_path):
    eager, compiled = tmp_path / "eager", tmp_path / "compiled"
    run_forked(FSDP2, ["train.py", *SHORT, f"hydra.run.dir={eager}"], ENV)
    on = ["trainer.compile=true", "model.gradient_checkpointing=true"]
    output = run_forked(FSDP2, ["train.py", *SHORT, *on, f"hydra.run.dir={compiled}"], ENV)

    assert "FSDP2 on CPU: 2 gloo processes" in output
    assert output.count("torch.compile per transformer block (2 x LlamaDecoderLayer, backend inductor)") == 2
    counts = re.findall(r"(\d+) graph\(s\) compiled in this process so far, (\d+) graph break\(s\)", output)
    assert len(counts) == 2 and int(counts[0][0]) >= 1, counts  # one line per time step (the main process's)
    assert counts[1] == counts[0] and counts[0][1] == "0", counts  # no graph break; step 1 compiled nothing new
    mine, reference = losses(compiled), losses(eager)
    assert [r[:2] for r in mine] == [r[:2] for r in reference] and len(mine) == 5
    differences = [abs(a[2] - b[2]) for a, b in zip(mine, reference)]
    print(f"compiled + checkpointed vs eager, largest loss difference {max(differences):.1e}", file=sys.stderr)
    assert max(differences) <= SAME_LOSS, (mine, reference)
