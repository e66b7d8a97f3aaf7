#!/usr/bin/env bash
# Set up the environment and run the test suite. Extra arguments go to pytest
# (e.g. `bash scripts/test.sh -m slow` for the slow end-to-end checks only).
# pytest exits 5 when no test ran: that is a failure here, like any non-zero status.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# shellcheck disable=SC1091
. .venv/bin/activate
export WANDB_MODE=disabled TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
python -m pytest "$@"
