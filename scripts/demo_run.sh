#!/usr/bin/env bash
# The demo itself, in an environment that is set up already (`make demo` = scripts/demo.sh runs setup first):
# train every time step of the generated world, checkpoint and evaluate each step, print the tables, write the
# report and check the run against the documented bands. RUN_DIR (default runs/demo) is where it all goes;
# extra arguments are Hydra overrides. The README's demo block is this script's output
# (tests/unit/docs/test_readme_demo.py and tests/e2e/test_readme_demo.py compares them).
set -euo pipefail
cd "$(dirname "$0")/.."
RUN_DIR=${RUN_DIR:-runs/demo}
# Everything the demo prints also goes to $RUN_DIR/demo_output.txt: the README's demo block is its tail
# (`python -m evolve_train.reporting.results_page runs/demo --readme` writes the block from there).
mkdir -p "$RUN_DIR"
export PYTHONUNBUFFERED=1  # through the pipe, each line still shows when it is printed
{
start=$(date +%s)
python train.py hydra.run.dir="$RUN_DIR" "$@"
echo "demo: training + evaluation took $(( $(date +%s) - start )) s; outputs in $RUN_DIR"
evolve-report "$RUN_DIR" --out "$RUN_DIR/report"
echo "demo: report written to $RUN_DIR/report/report.html (and report.md, PNG plots)"
# The last lines: did this run land inside the default recipe's documented ranges (docs/results/demo.md, "What varies")?
if [ $# -eq 0 ]; then
  python -m evolve_train.reporting.demo_check "$RUN_DIR"
else
  echo "demo check: skipped (overrides given: $*; the documented ranges are those of the default recipe)"
fi
} | tee "$RUN_DIR/demo_output.txt"
