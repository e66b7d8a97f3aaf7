#!/usr/bin/env bash
# GPU check (one prepared command, ~5 min on an H100/H200): the GPU benchmark on a ~125M GPT-2, then
# the embedded demo end to end in bf16 on the GPU. Writes into ${OUT:-gpu_out}/.
# Usage on a GPU machine with the package's requirements installed: bash scripts/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu_out}
DEMO_DIR=${DEMO_DIR:-$OUT/demo_bf16}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 WANDB_MODE=disabled HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/nvidia_smi.txt"
python3 scripts/gpu_bench.py --out "$OUT/gpu_bench.json" 2>&1 | tee "$OUT/gpu_bench.log"
start=$(date +%s)
python3 train.py hydra.run.dir="$DEMO_DIR" trainer.mixed_precision=bf16 eval.batch_size=512 2>&1 \
  | grep -v "it/s\]" | tee "$OUT/demo_bf16.log"
echo "demo_bf16_seconds=$(( $(date +%s) - start ))" | tee -a "$OUT/demo_bf16.log"
cp "$DEMO_DIR/summary.json" "$OUT/demo_bf16_summary.json" 2>/dev/null || true
