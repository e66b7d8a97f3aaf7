"""Each method does what its name promises, checked on a tiny GPT-2 through the one training loop."""

from __future__ import annotations


import pytest
from helpers.methods import (
    one_thread,
)


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    with one_thread():
        yield


DTENSOR_CHECK = """
import os, socket, torch, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard, distribute_tensor
with socket.socket() as s:
    s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1")
dist.init_process_group("gloo")
from evolve_train.methods.regularizers import AnchorTerm
w = torch.nn.Parameter(distribute_tensor(torch.randn(8, 4), init_device_mesh("cpu", (1,)), [Shard(0)]))
for dtype in (torch.float32, torch.bfloat16):
    anchor, fisher = w.detach().to(dtype, copy=True), torch.ones_like(w).to(dtype)
    assert isinstance(anchor, DTensor) and anchor.placements == (Shard(0),) and anchor.dtype == dtype
    with torch.no_grad():
        w.add_(0.1)
    w.grad = None
    out = AnchorTerm.apply(w, anchor, fisher)
    out.backward()
    assert not isinstance(out, DTensor) and abs(float(out) - 0.32) < 1e-2 * (1 if dtype == torch.float32 else 5)
    assert isinstance(w.grad, DTensor) and w.grad.placements == (Shard(0),)
dist.destroy_process_group()
print("ok")
"""


def test_anchors_of_sharded_parameters_stay_sharded():
    """FSDP2 parameters are DTensors: anchors and Fisher copied from one keep its placement, the penalty is an
    ordinary scalar and its gradient a DTensor placed like the parameter (a one-process gloo mesh)."""
    import os
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", DTENSOR_CHECK],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-3000:]
