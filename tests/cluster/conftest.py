"""What every test of the SLURM tier needs: a node of the local cluster (``scripts/slurm/local_cluster.sh``, which
``.ci/run`` starts) or a skip that says how to start one, and no job of this user left behind to hold the node."""

from __future__ import annotations

import getpass
import re
import shutil
import subprocess

import pytest

CLUSTER = "evolve-local"  # the ClusterName scripts/slurm/local_cluster.sh writes


def local_cluster_ready() -> bool:
    """A node of the cluster local_cluster.sh made answers (never a real cluster this machine can submit to)."""
    if not shutil.which("sinfo") or not shutil.which("sbatch"):
        return False
    config = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=30)
    if not re.search(rf"^ClusterName\s*=\s*{CLUSTER}$", config.stdout, re.MULTILINE):
        return False
    out = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=30)
    return out.returncode == 0 and any(s in out.stdout for s in ("idle", "mix", "alloc"))


@pytest.fixture(scope="module", autouse=True)
def cluster():
    if not local_cluster_ready():
        pytest.skip("no local SLURM cluster answers here (start one as root: bash scripts/slurm/local_cluster.sh)")


@pytest.fixture(autouse=True)
def no_job_left():
    """A failed test leaves no job behind to hold the node (the cluster is this machine's own)."""
    yield
    subprocess.run(["scancel", "--user", getpass.getuser()], capture_output=True, timeout=30)
