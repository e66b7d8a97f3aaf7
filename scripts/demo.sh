#!/usr/bin/env bash
# Set up the environment and run the embedded default end to end: train every time step of the
# generated world, checkpoint and evaluate each step, then print the table (and write the report).
# Extra arguments are Hydra overrides, e.g. `bash scripts/demo.sh trainer.epochs=10`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# shellcheck disable=SC1091
. .venv/bin/activate
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
RUN_DIR=${RUN_DIR:-runs/demo}
start=$(date +%s)
python train.py hydra.run.dir="$RUN_DIR" "$@"
echo "demo: training + evaluation took $(( $(date +%s) - start )) s; outputs in $RUN_DIR"
evolve-report "$RUN_DIR" --out "$RUN_DIR/report"
echo "demo: report written to $RUN_DIR/report/report.html (and report.md, PNG plots)"
# The last lines: did this run land inside the default recipe's documented ranges (README "What varies")?
if [ $# -eq 0 ]; then
  python -m evolve_train.reporting.demo_check "$RUN_DIR"
else
  echo "demo check: skipped (overrides given: $*; the documented ranges are those of the default recipe)"
fi
