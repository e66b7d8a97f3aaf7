#!/usr/bin/env bash
# GPU check: one prepared command, at most ~9.5 min on one H100/H200 (bench 150 s, fsdp 2 x 80 s, tokens
# 2 x 80 s, memory 100 s, each time-boxed: a part that fails or hangs is logged and the next one runs; demo is opt-in,
# +120 s). Writes everything into ${OUT:-gpu_out}/.
#   bench   scripts/gpu_bench.py on a ~125M GPT-2 (matmul ceiling, loop vs plain torch, SDPA, generation)
#   fsdp    FSDP2 through accelerate (accelerate_configs/fsdp.yaml, one process: the model is still sharded
#           into DTensors) for method=full and method=lora on a GPT-2 built from config (~350M shape:
#           24 layers, width 1024), bf16 autocast, a short run on the default world
#   tokens  masked-entity training on a ~1B-shaped GPT-2 (24 layers, width 2048): fixed rows per batch
#           (trainer.batch_size) against a token budget per batch (trainer.tokens_per_batch)
#   memory  scripts/gpu_memory_check.py: a Llama-3.2-1B-shaped model with a 128,256 vocabulary (random weights),
#           bf16, one GPU: chunked vs the model's own loss, peak memory vs the memory preflight's estimate,
#           tokens/s and MFU vs a plain PyTorch step; one PASS/FAIL line per figure (docs/distributed.md)
#   demo    the embedded demo end to end in bf16
#   sweep   with >= 2 GPUs (nvidia-smi -L) only, and then in the default parts (+120 s): a method=full,lora sweep
#           whose points are 2-process NCCL runs (hydra/launcher=submitit_local_multi, both points on GPUs 0,1),
#           the step-0 cache shared; $OUT/sweep_check.txt says what each point ran. With fewer GPUs the single-
#           GPU parts run unchanged and the sweep is reported as skipped.
# Each run's tokens/s, MFU and peak memory go to $OUT/figures_<part>.json (scripts/run_figures.py reads
# train_log.jsonl's tokens_per_s / mfu / peak_mem_gb when the loop logs them, else estimates).
# Usage on a GPU machine with the package installed:  bash scripts/gpu_check.sh
#   PARTS="fsdp tokens" bash scripts/gpu_check.sh      # some parts only
#   DRY=1 bash scripts/gpu_check.sh                     # CPU: tiny sizes, plain python instead of accelerate
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu_out}
DRY=${DRY:-0}
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
DEFAULT_PARTS="memory bench fsdp tokens"
[ "${NGPU:-0}" -ge 2 ] && DEFAULT_PARTS="$DEFAULT_PARTS sweep"
PARTS=${PARTS:-$DEFAULT_PARTS}
PEAK_TFLOPS=${PEAK_TFLOPS:-989}   # H100/H200 bf16 datasheet
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 WANDB_MODE=disabled HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false

# Sizes: the GPU shapes, or tiny ones for a CPU dry run of the same commands.
if [ "$DRY" = 1 ]; then
  MID=(model.n_layer=1 model.n_embd=32 model.n_head=2 model.vocab_size=300)
  BIG=("${MID[@]}")
  WORLD=(data.world.n_entities=12 data.world.new_entities_per_step=4 data.world.n_people=10 data.world.n_cities=10
         data.world.n_steps=2 trainer.num_threads=1 eval.max_new_tokens=8)
  SHORT=(trainer.epochs_step0=1 trainer.epochs=1 trainer.batch_size=16 trainer.warmup_steps=2 trainer.log_every=2)
  LAUNCH=(python3)
  TOKENS_PER_BATCH=512
  T=${T:-300}; T_BENCH=$T; T_DEMO=$T; T_SWEEP=$T; T_MEMORY=$T
  SWEEP_GPUS=0   # the dry run's sweep: 2 gloo processes per point on CPU
else
  MID=(model.n_layer=24 model.n_embd=1024 model.n_head=16 model.n_positions=512 model.vocab_size=8192)
  BIG=(model.n_layer=24 model.n_embd=2048 model.n_head=16 model.n_positions=512 model.vocab_size=8192)
  WORLD=(data.world.n_steps=2 eval.batch_size=512 eval.max_items_per_set=256)
  SHORT=(trainer=gpu trainer.epochs_step0=3 trainer.epochs=2 trainer.batch_size=64 trainer.warmup_steps=20)
  LAUNCH=(accelerate launch --config_file accelerate_configs/fsdp.yaml --num_processes 1)
  TOKENS_PER_BATCH=16384
  T=${T:-80}; T_BENCH=${T_BENCH:-150}; T_DEMO=${T_DEMO:-120}; T_SWEEP=${T_SWEEP:-120}; T_MEMORY=${T_MEMORY:-100}
  SWEEP_GPUS=2
fi
COMMON=(logger.backends=[disk] method.step0_cache=null "${WORLD[@]}" "${SHORT[@]}")

timed() {  # timed <name> <seconds> <command...>: run time-boxed, log to $OUT/<name>.log, record the status
  local name=$1 limit=$2; shift 2
  local start; start=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc seconds=$(( $(date +%s) - start ))" | tee -a "$OUT/status.txt"
}

figures() {  # figures <part> <run dir...>
  local part=$1; shift
  python3 scripts/run_figures.py "$@" --peak-tflops "$PEAK_TFLOPS" --out "$OUT/figures_$part.json" \
    > /dev/null 2>> "$OUT/status.txt" || echo "figures $part failed" >> "$OUT/status.txt"
}

peak_memory_sampler() {  # the GPU's peak memory over the whole check, whatever the loop logs
  command -v nvidia-smi > /dev/null || return 0
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 500 > "$OUT/gpu_memory_used_mib.txt" &
  SAMPLER=$!
}

part_fsdp() {
  for method in full lora; do
    timed "fsdp_$method" "$T" "${LAUNCH[@]}" train.py "hydra.run.dir=$OUT/fsdp_$method" "method=$method" \
      "${MID[@]}" "${COMMON[@]}" trainer.mixed_precision=bf16
  done
  figures fsdp "$OUT/fsdp_full" "$OUT/fsdp_lora"
}

part_tokens() {
  timed tokens_fixed_rows "$T" python3 train.py "hydra.run.dir=$OUT/tokens_fixed_rows" "${BIG[@]}" "${COMMON[@]}" \
    data.objective=masked_entity trainer.mixed_precision=bf16
  timed tokens_budget "$T" python3 train.py "hydra.run.dir=$OUT/tokens_budget" "${BIG[@]}" "${COMMON[@]}" \
    data.objective=masked_entity trainer.mixed_precision=bf16 "trainer.tokens_per_batch=$TOKENS_PER_BATCH"
  figures tokens "$OUT/tokens_fixed_rows" "$OUT/tokens_budget"
}

part_bench() {
  timed gpu_bench "$T_BENCH" python3 scripts/gpu_bench.py --out "$OUT/gpu_bench.json"
}

part_memory() {
  local args=(--out "$OUT/memory_check.json" --peak-tflops "$PEAK_TFLOPS")
  [ "$DRY" = 1 ] && args+=(--dry)
  timed memory "$T_MEMORY" python3 scripts/gpu_memory_check.py "${args[@]}"
  grep -E '^(PASS|FAIL|INFO) ' "$OUT/memory.log" | tee -a "$OUT/status.txt"
}

part_demo() {
  local args=(trainer.mixed_precision=bf16 eval.batch_size=512)
  [ "$DRY" = 1 ] && args=("${WORLD[@]}" "${SHORT[@]}" "${MID[@]}" logger.backends=[disk])
  timed demo_bf16 "$T_DEMO" python3 train.py "hydra.run.dir=$OUT/demo_bf16" "${args[@]}"
  cp "$OUT/demo_bf16/summary.json" "$OUT/demo_bf16_summary.json" 2>/dev/null || true
}

part_sweep() {  # 2 sweep points, each one job of 2 processes (one per GPU): the multi-process launcher on NCCL
  if [ "$DRY" != 1 ] && [ "${NGPU:-0}" -lt 2 ]; then
    echo "sweep skipped: ${NGPU:-0} GPU(s), the multi-process sweep needs 2" | tee -a "$OUT/status.txt"
    return
  fi
  timed sweep_multi "$T_SWEEP" python3 train.py -m hydra/launcher=submitit_local_multi \
    hydra.launcher.tasks_per_node=2 "hydra.launcher.gpus_per_node=$SWEEP_GPUS" hydra.launcher.timeout_min=10 \
    "hydra.sweep.dir=$OUT/sweep_multi" method=full,lora "${MID[@]}" logger.backends=[disk] "${WORLD[@]}" \
    "${SHORT[@]}"
  python3 - "$OUT/sweep_multi" > "$OUT/sweep_check.txt" 2>&1 <<'PY' || echo "sweep check failed" >> "$OUT/status.txt"
import json, sys
from pathlib import Path
sweep = Path(sys.argv[1])
for summary in sorted(p for p in sweep.rglob("summary.json") if ".step0_cache" not in p.parts):
    rows = [json.loads(line) for line in (summary.parent / "metrics.jsonl").read_text().splitlines()]
    log = (summary.parent / "train.log").read_text()
    cached = "loaded from the step-0 cache" in log
    print(summary.parent.relative_to(sweep), "processes", sorted({r.get("num_processes") for r in rows}),
          "rows", len(rows), "step 0 from the cache" if cached else "step 0 trained")
print("step-0 cache entries:", sorted(p.name for p in (sweep / ".step0_cache").iterdir() if not p.name.startswith(".")))
PY
  cat "$OUT/sweep_check.txt" >> "$OUT/status.txt"
  local points
  mapfile -t points < <(find "$OUT/sweep_multi" -name summary.json -not -path '*/.step0_cache/*' -printf '%h\n' | sort)
  [ "${#points[@]}" -gt 0 ] && figures sweep "${points[@]}"
}

: > "$OUT/status.txt"
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || echo "no nvidia-smi"
  python3 -c 'import torch, transformers, accelerate; print(torch.__version__, transformers.__version__, accelerate.__version__)'
} > "$OUT/environment.txt" 2>&1
SAMPLER=""
peak_memory_sampler
for part in $PARTS; do
  "part_$part"
done
[ -n "$SAMPLER" ] && kill "$SAMPLER" 2> /dev/null
[ -s "$OUT/gpu_memory_used_mib.txt" ] && echo "peak GPU memory (MiB, nvidia-smi): $(sort -n "$OUT/gpu_memory_used_mib.txt" | tail -1)" | tee -a "$OUT/status.txt"
cat "$OUT/status.txt"
