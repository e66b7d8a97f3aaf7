#!/usr/bin/env bash
# GPU check: one prepared command, at most 6 min on one H100/H200 in its default parts, every step time-boxed
# (setup 35 s, memory 70 s, fsdp 3 x 55 s + 30 s, bench 60 s = 360 s; printed at the start): a part that fails
# or hangs is logged and the next one runs; tokens, demo and fsdp's LoRA run are opt-in. Writes everything into
# ${OUT:-gpu_out}/, each part's figures as soon as it has them, so a check stopped early keeps what it measured.
# Setup: the packages the image lacks (hydra-core, omegaconf, datasets, ...) are installed from the wheels carried
# with the tree (.gpu_wheels/, made by `bash scripts/gpu_wheels.sh` where pip reaches the package index) when
# python3 cannot import them (scripts/gpu_env.sh; $OUT/status.txt says what it did).
#   memory  scripts/gpu_memory_check.py --steps 3: a Llama-3.2-1B-shaped model with a 128,256 vocabulary (random
#           weights), bf16, one GPU: chunked vs the model's own loss, peak memory vs the memory preflight's
#           estimate, tokens/s and MFU vs a plain PyTorch step, evaluation's peak as eval.precision=bf16_copy vs
#           bf16 autocast; one PASS/FAIL line per figure (docs/distributed.md)
#   fsdp    FSDP2 through accelerate (accelerate_configs/fsdp.yaml, one process: the model is still sharded
#           into DTensors) on 2 blocks of the Llama-3.2-1B shape (width 2048, 32/8 heads, MLP 8192) with its
#           128,256 vocabulary (model=llama_1b_random model.n_layer=2), bf16, a short run (2 optimizer steps in
#           time step 0, 4 in time step 1, a training state saved every 2) on a 50-organisation world:
#           method=full (FSDP_METHODS="full lora" adds LoRA), then the full run again killed (SIGKILL) at the
#           third optimizer step of time step 1 and run again in its dir, which resumes from its last saved
#           training state; scripts/resume_check.py prints PASS/FAIL lines: resumed, losses and metric rows
#           against the uninterrupted full run, the CUDA peak against the memory preflight's estimate, the host
#           memory the rerun's checkpoint load added against the weights' size (read onto the GPU). The runs'
#           weights are deleted once read (KEEP_WEIGHTS=1 keeps them), so $OUT stays small.
#   bench   scripts/gpu_bench.py on a ~125M GPT-2 (matmul ceiling, loop vs plain torch, SDPA, generation),
#           10 steps per loop, without torch.compile (BENCH_ARGS="--steps 30" for the full bench: ~5 min)
#   tokens  masked-entity training on a ~1B-shaped GPT-2 (24 layers, width 2048): fixed rows per batch
#           (trainer.batch_size) against a token budget per batch (trainer.tokens_per_batch)
#   demo    the embedded demo end to end in bf16
#   sweep   with >= 2 GPUs (nvidia-smi -L) only, and then in the default parts (+140 s): a method=full,lora sweep
#           whose points are 2-process NCCL runs (hydra/launcher=submitit_local_multi, both points on GPUs 0,1),
#           the step-0 cache shared; $OUT/sweep_check.txt says what each point ran. With fewer GPUs the single-
#           GPU parts run unchanged and the sweep is reported as skipped.
# Each run's tokens/s, MFU and peak memory go to $OUT/figures_<part>.json (scripts/run_figures.py reads
# train_log.jsonl's tokens_per_s / mfu / peak_mem_gb when the loop logs them, else estimates).
# Usage on a GPU machine (torch, transformers, accelerate installed; the rest from .gpu_wheels/):
#   bash scripts/gpu_check.sh
#   PARTS="fsdp tokens" bash scripts/gpu_check.sh      # some parts only
#   DRY=1 bash scripts/gpu_check.sh                     # CPU: tiny sizes, plain python instead of accelerate
#                                                       # (the fsdp part: FSDP2 over 2 gloo processes, fp32)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu_out}
DRY=${DRY:-0}
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
DEFAULT_PARTS="memory fsdp bench"
[ "${NGPU:-0}" -ge 2 ] && DEFAULT_PARTS="$DEFAULT_PARTS sweep"
PARTS=${PARTS:-$DEFAULT_PARTS}
PEAK_TFLOPS=${PEAK_TFLOPS:-989}   # H100/H200 bf16 datasheet
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 WANDB_MODE=disabled HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false

# Sizes: the GPU shapes, or tiny ones for a CPU dry run of the same commands.
if [ "$DRY" = 1 ]; then
  MID=(model.n_layer=1 model.n_embd=32 model.n_head=2 model.vocab_size=300)
  BIG=("${MID[@]}")
  LLAMA=(model=llama_1b_random model.n_layer=1 model.n_embd=64 model.n_head=2 model.n_kv_head=1 model.n_inner=128
         model.n_positions=512)   # the 128,256-row vocabulary kept
  FSDP_WORLD=()
  FSDP_MODEL=("${LLAMA[@]}")
  FSDP_STEPS=()
  # the fsdp part as on CPU runs FSDP2: 2 gloo processes (accelerate launch with ACCELERATE_USE_CPU=1), fp32
  FSDP_LAUNCH=(env ACCELERATE_USE_CPU=1 OMP_NUM_THREADS=1 python3 -m accelerate.commands.launch
               --config_file accelerate_configs/fsdp.yaml --num_processes 2 --mixed_precision no --dynamo_backend no
               --main_process_port 29713)
  FSDP_PRECISION=trainer.mixed_precision=no
  RESUME_BOUNDS=(--loss-rtol 0 --metric-atol 0 --metric-rtol 0)   # fp32 on CPU: the same computation, bit for bit
  WORLD=(data.world.n_entities=12 data.world.new_entities_per_step=4 data.world.n_people=10 data.world.n_cities=10
         data.world.n_steps=2 trainer.num_threads=1 eval.max_new_tokens=8)
  SHORT=(trainer.epochs_step0=1 trainer.epochs=1 trainer.batch_size=16 trainer.warmup_steps=2 trainer.log_every=2)
  TOKENS_PER_BATCH=512
  T=${T:-300}; T_BENCH=$T; T_DEMO=$T; T_SWEEP=$T; T_MEMORY=$T; T_FSDP=$T; T_AUX=60; T_GPU_ENV=60; T_ENV=60
  SWEEP_GPUS=0   # the dry run's sweep: 2 gloo processes per point on CPU
else
  MID=(model.n_layer=24 model.n_embd=1024 model.n_head=16 model.n_positions=512 model.vocab_size=8192)
  BIG=(model.n_layer=24 model.n_embd=2048 model.n_head=16 model.n_positions=512 model.vocab_size=8192)
  LLAMA=(model=llama_1b_random)
  # FSDP2 through accelerate's launcher, one process
  FSDP_LAUNCH=(accelerate launch --config_file accelerate_configs/fsdp.yaml --num_processes 1)
  FSDP_PRECISION=trainer.mixed_precision=bf16
  FSDP_WORLD=(data.world.n_entities=50 data.world.new_entities_per_step=15)
  FSDP_MODEL=(model=llama_1b_random model.n_layer=2)   # the 1B shape's width, heads and vocabulary, 2 blocks
  FSDP_STEPS=(trainer.max_steps_step0=2 trainer.max_steps=4 trainer.log_every=1)
  # bf16 on a GPU: a few kernels are not deterministic, so a resumed run matches closely, not bit for bit
  RESUME_BOUNDS=(--loss-rtol 2e-2 --metric-atol 0.05 --metric-rtol 2e-2)
  WORLD=(data.world.n_steps=2 eval.batch_size=512 eval.max_items_per_set=256)
  SHORT=(trainer=gpu trainer.epochs_step0=3 trainer.epochs=2 trainer.batch_size=64 trainer.warmup_steps=20)
  TOKENS_PER_BATCH=16384
  T=${T:-80}; T_BENCH=${T_BENCH:-60}; T_DEMO=${T_DEMO:-120}; T_SWEEP=${T_SWEEP:-120}; T_MEMORY=${T_MEMORY:-70}
  T_FSDP=${T_FSDP:-55}; T_AUX=${T_AUX:-10}; T_GPU_ENV=${T_GPU_ENV:-20}; T_ENV=${T_ENV:-15}
  SWEEP_GPUS=2
fi
COMMON=(logger.backends=[disk] method.step0_cache=null "${WORLD[@]}" "${SHORT[@]}")

T_SETUP=$(( T_GPU_ENV + T_ENV ))   # the missing packages installed, then the environment's versions

timed() {  # timed <name> <seconds> <command...>: run time-boxed, log to $OUT/<name>.log, record the status
  local name=$1 limit=$2; shift 2
  local start; start=$(date +%s)
  # SIGTERM to the command's process group 5 s before the box ends, SIGKILL at its end
  timeout --kill-after=5 $(( limit > 10 ? limit - 5 : limit )) "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc seconds=$(( $(date +%s) - start ))" | tee -a "$OUT/status.txt"
}

figures() {  # figures <part> <run dir...>
  local part=$1; shift
  timeout "$T_AUX" python3 scripts/run_figures.py "$@" --peak-tflops "$PEAK_TFLOPS" --out "$OUT/figures_$part.json" \
    > /dev/null 2>> "$OUT/status.txt" || echo "figures $part failed" >> "$OUT/status.txt"
}

prune_weights() {  # prune_weights <run dir...>: the runs' weights and training states, once their figures are read
  [ "${KEEP_WEIGHTS:-0}" = 1 ] && return
  local mib
  mib=$(find "$@" -type f \( -name '*.safetensors' -o -path '*/train_state/*' \) -printf '%s\n' 2> /dev/null |
        awk '{ s += $1 } END { printf "%d", s / 1048576 }')
  find "$@" -type f \( -name '*.safetensors' -o -path '*/train_state/*' \) -delete 2> /dev/null
  echo "weights deleted: $mib MiB (KEEP_WEIGHTS=1 keeps them)" >> "$OUT/status.txt"
}

peak_memory_sampler() {  # the GPU's peak memory over the whole check, whatever the loop logs
  command -v nvidia-smi > /dev/null || return 0
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 500 > "$OUT/gpu_memory_used_mib.txt" &
  SAMPLER=$!
}

FSDP_METHODS=${FSDP_METHODS:-full}   # the uninterrupted runs; full is always one (the resume's reference)
[[ " $FSDP_METHODS " == *" full "* ]] || FSDP_METHODS="full $FSDP_METHODS"
read -ra FSDP_RUNS <<< "$FSDP_METHODS"

part_fsdp() {  # the 1B shape under FSDP2: full (and LoRA when asked), then full killed in time step 1 and resumed
  local args=("${FSDP_MODEL[@]}" "${COMMON[@]}" "${FSDP_WORLD[@]}" "$FSDP_PRECISION" "${FSDP_STEPS[@]}"
              trainer.save_every_n_steps=2 "eval.evaluators=[splits]" eval.max_items_per_set=32)   # rows to compare
  local method dirs=()
  for method in "${FSDP_RUNS[@]}"; do
    timed "fsdp_$method" "$T_FSDP" "${FSDP_LAUNCH[@]}" train.py "hydra.run.dir=$OUT/fsdp_$method" "method=$method" "${args[@]}"
    dirs+=("$OUT/fsdp_$method")
  done
  figures fsdp "${dirs[@]}"
  local kill_at  # the optimizer steps of time step 0 in the full run, plus 3
  kill_at=$(timeout "$T_AUX" python3 -c 'import json, sys; rows = [json.loads(l) for l in open(sys.argv[1])]
print(max(r["optimizer_step"] for r in rows if r.get("time_step") == 0 and "optimizer_step" in r) + 3)' \
    "$OUT/fsdp_full/train_log.jsonl" 2>> "$OUT/status.txt") || {
    echo "FAIL resumed (no full run to compare with)" | tee -a "$OUT/status.txt"; prune_weights "${dirs[@]}"; return; }
  timed fsdp_killed "$T_FSDP" env "EVOLVE_TRAIN_FAULT=optimizer_step:$kill_at" "${FSDP_LAUNCH[@]}" train.py \
    "hydra.run.dir=$OUT/fsdp_resume" method=full "${args[@]}"
  timed fsdp_resumed "$T_FSDP" "${FSDP_LAUNCH[@]}" train.py "hydra.run.dir=$OUT/fsdp_resume" method=full "${args[@]}"
  timeout "$T_AUX" python3 scripts/resume_check.py "$OUT/fsdp_full" "$OUT/fsdp_resume" "${RESUME_BOUNDS[@]}" \
    --out "$OUT/resume_check.json" 2>&1 | tee -a "$OUT/status.txt"
  prune_weights "${dirs[@]}" "$OUT/fsdp_resume"
}

part_tokens() {
  timed tokens_fixed_rows "$T" python3 train.py "hydra.run.dir=$OUT/tokens_fixed_rows" "${BIG[@]}" "${COMMON[@]}" \
    data.objective=masked_entity trainer.mixed_precision=bf16
  timed tokens_budget "$T" python3 train.py "hydra.run.dir=$OUT/tokens_budget" "${BIG[@]}" "${COMMON[@]}" \
    data.objective=masked_entity trainer.mixed_precision=bf16 "trainer.tokens_per_batch=$TOKENS_PER_BATCH"
  figures tokens "$OUT/tokens_fixed_rows" "$OUT/tokens_budget"
}

part_bench() {  # gpu_bench.py rewrites $OUT/gpu_bench.json after each figure
  local args
  read -ra args <<< "${BENCH_ARGS:---steps 10 --no-compile}"
  timed gpu_bench "$T_BENCH" python3 scripts/gpu_bench.py --out "$OUT/gpu_bench.json" "${args[@]}"
}

part_memory() {
  local args=(--out "$OUT/memory_check.json" --peak-tflops "$PEAK_TFLOPS" --steps 3)
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
  timeout "$T_AUX" python3 - "$OUT/sweep_multi" > "$OUT/sweep_check.txt" 2>&1 <<'PY' || echo "sweep check failed" >> "$OUT/status.txt"
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

box() {  # box <part>: the part's time box in seconds, all its steps together
  case $1 in
    memory) echo "$T_MEMORY" ;;
    fsdp) echo $(( (${#FSDP_RUNS[@]} + 2) * T_FSDP + 3 * T_AUX )) ;;   # the runs, kill and resume; 3 short checks
    bench) echo "$T_BENCH" ;;
    tokens) echo $(( 2 * T + T_AUX )) ;;
    demo) echo "$T_DEMO" ;;
    sweep) echo $(( T_SWEEP + 2 * T_AUX )) ;;
    *) echo 0 ;;
  esac
}

: > "$OUT/status.txt"
BOXES="setup $T_SETUP s"
TOTAL=$T_SETUP
for part in $PARTS; do
  BOXES+=", $part $(box "$part") s"
  TOTAL=$(( TOTAL + $(box "$part") ))
done
[[ " $PARTS " == *" fsdp "* ]] && BOXES+=" (fsdp: $(( ${#FSDP_RUNS[@]} + 2 )) runs x $T_FSDP s + 3 x $T_AUX s)"
echo "time boxes: $BOXES; sum $TOTAL s" | tee -a "$OUT/status.txt"

# setup: the packages python3 lacks, from .gpu_wheels/ (scripts/gpu_env.sh says what it installed, if anything)
GPU_ENV_TIMEOUT=$T_GPU_ENV
. scripts/gpu_env.sh 2> "$OUT/gpu_env.log"
tee -a "$OUT/status.txt" < "$OUT/gpu_env.log"
[ "$GPU_ENV_RC" = 0 ] || echo "FAIL gpu_env rc=$GPU_ENV_RC: the parts lack packages ($OUT/gpu_env.log)" | tee -a "$OUT/status.txt"
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || echo "no nvidia-smi"
  echo "PYTHONPATH=$PYTHONPATH"
  timeout "$T_ENV" python3 -c 'import torch, transformers, accelerate, datasets, hydra
print(torch.__version__, transformers.__version__, accelerate.__version__, datasets.__version__, hydra.__version__)'
} > "$OUT/environment.txt" 2>&1
SAMPLER=""
peak_memory_sampler
for part in $PARTS; do
  if ! declare -F "part_$part" > /dev/null; then
    echo "unknown part $part (memory fsdp bench tokens demo sweep)" | tee -a "$OUT/status.txt"
    continue
  fi
  start=$(date +%s)
  "part_$part"
  echo "part $part done: $(( $(date +%s) - start )) s of its $(box "$part") s box" | tee -a "$OUT/status.txt"
done
[ -n "$SAMPLER" ] && kill "$SAMPLER" 2> /dev/null
[ -s "$OUT/gpu_memory_used_mib.txt" ] && echo "peak GPU memory (MiB, nvidia-smi): $(sort -n "$OUT/gpu_memory_used_mib.txt" | tail -1)" | tee -a "$OUT/status.txt"
cat "$OUT/status.txt"
