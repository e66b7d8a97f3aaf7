#!/usr/bin/env bash
# Set up the environment and run the embedded default end to end (scripts/demo_run.sh): train every time step of
# the generated world, checkpoint and evaluate each step, then print the table (and write the report).
# Extra arguments are Hydra overrides, e.g. `bash scripts/demo.sh trainer.epochs=10`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# shellcheck disable=SC1091
. .venv/bin/activate
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
bash scripts/demo_run.sh "$@"
