#!/usr/bin/env bash
# Set up the environment and run the tests. Extra arguments go to pytest; with none it runs tests/unit, the
# unit tier (`make test`); `bash scripts/test.sh tests/e2e tests/distributed tests/cluster` runs the others.
# pytest exits 5 when no test ran: that is a failure here, like any non-zero status.
# SETUP_DONE=1 skips the setup (about 10 s: pip's editable install), for a caller that ran it already (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${SETUP_DONE:-0}" != 1 ]; then
  bash scripts/setup.sh
fi
# shellcheck disable=SC1091
. .venv/bin/activate
export WANDB_MODE=disabled TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
# one torch thread per process unless set: two pytest workers (or two ranks) on two cores stay two busy threads,
# not four spinning ones (a run that sets trainer.num_threads still gets what it asks)
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
python -m pytest "$@"
