"""FSDP2's mesh setting (``trainer.fsdp_mesh``, ``trainer.fsdp_replicate``: ``training/distributed.py:
mesh_sizes``), and the preflight's share under HSDP (the shard group, not every process). The 4-process run is
tests/distributed/test_hsdp.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from evolve_train.errors import ConfigError
from evolve_train.training.distributed import mesh_sizes, shard_group_size


def test_auto_is_hsdp_with_one_replica_per_node_when_the_job_spans_nodes():
    assert mesh_sizes("auto", 0, world=32, local=8) == (4, 8)  # 4 nodes of 8 GPUs
    assert mesh_sizes("auto", 0, world=8, local=8) is None  # one node: plain FSDP
    assert mesh_sizes("auto", 2, world=4, local=4) == (2, 2)  # replicas asked for
    assert mesh_sizes("auto", 0, world=1, local=1) is None


def test_fsdp_and_hsdp_as_set():
    assert mesh_sizes("fsdp", 0, world=32, local=8) is None
    assert mesh_sizes("hsdp", 0, world=16, local=8) == (2, 8)
    assert mesh_sizes("hsdp", 4, world=16, local=8) == (4, 4)


@pytest.mark.parametrize(
    ("mode", "replicate", "world", "local"), [("hsdp", 0, 8, 8), ("hsdp", 3, 8, 8), ("hsdp", 8, 8, 8)]
)
def test_a_mesh_that_cannot_be_built_is_refused_naming_the_settings(mode, replicate, world, local):
    with pytest.raises(ConfigError, match="trainer.fsdp_replicate"):
        mesh_sizes(mode, replicate, world, local)
    with pytest.raises(ConfigError, match="trainer.fsdp_mesh must be one of auto, fsdp, hsdp"):
        mesh_sizes("zero3", 0, 8, 8)


def test_the_preflight_shares_the_model_over_the_shard_group_only():
    plain = SimpleNamespace(num_processes=32)
    hsdp = SimpleNamespace(num_processes=32, parallelism_config=SimpleNamespace(dp_shard_size=8))
    assert shard_group_size(plain) == 32 and shard_group_size(hsdp) == 8
