#!/usr/bin/env bash
# lm-evaluation-harness on a step checkpoint of a run, against evolve-train's own evaluation of the same
# checkpoint in the same precision (docs/evaluation.md "Scoring with lm-evaluation-harness").
#   bash scripts/lm_eval_check.sh RUN_DIR STEP OUT [TASKS]     (needs pip install -e '.[lmeval]')
#   MODEL_ARGS=add_bos_token=False bash scripts/lm_eval_check.sh ...   (more --model_args for lm-eval's hf model)
# 1. evolve-eval RUN_DIR --steps STEP in fp32 (trainer.mixed_precision=no: lm-eval's hf model runs fp32)
# 2. evolve-data export-lm-eval with the run's own overrides (.hydra/overrides.yaml)
# 3. lm_eval --model hf on RUN_DIR/steps/STEP, offline, --log_samples; lm-eval's tokenizer settings left at their
#    defaults, which encode the prompt as our evaluator does (a BOS first when the tokenizer prepends one)
# 4. both EMs per task, and the items whose predictions differ
set -euo pipefail
RUN=$(realpath "$1"); STEP=$2; OUT=$(realpath -m "$3"); TASKS=${4:-evolve_unchanged,evolve_updated_1,evolve_new_1,evolve_outdated_1}
PY=${PYTHON:-python}
mkdir -p "$OUT"
"$PY" -m evolve_train.cli.evaluate "$RUN" --steps "$STEP" trainer.mixed_precision=no "eval.evaluators=[splits]" \
  --out "$OUT/ours" > "$OUT/ours.log" 2>&1
mapfile -t OVERRIDES < <("$PY" -c "import sys, yaml; [print(o) for o in yaml.safe_load(open(sys.argv[1])) if not o.startswith(('hydra.', 'method', '+'))]" "$RUN/.hydra/overrides.yaml")
"$PY" -m evolve_train.cli.data export-lm-eval --out "$OUT/tasks" "${OVERRIDES[@]}" > "$OUT/export.log" 2>&1
HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_CACHE="$OUT/hf_datasets" \
TOKENIZERS_PARALLELISM=false "$PY" -m lm_eval --model hf --model_args "pretrained=$RUN/steps/$STEP,dtype=float32${MODEL_ARGS:+,$MODEL_ARGS}" \
  --tasks "$TASKS" --include_path "$OUT/tasks" --device cpu --batch_size 32 --log_samples --output_path "$OUT/lm_eval" \
  > "$OUT/lm_eval.log" 2>&1
"$PY" - "$OUT" "$STEP" <<'PY'
import glob, json, sys
from pathlib import Path
out, step = Path(sys.argv[1]), sys.argv[2]
rows = [json.loads(l) for l in (out / "ours" / "metrics.jsonl").read_text().splitlines()]
ours = {r["set_name"]: r for r in rows if r["group"] == "splits" and str(r["checkpoint"]) == step}
(results,) = glob.glob(str(out / "lm_eval" / "*" / "results_*.json"))
results = json.loads(Path(results).read_text())["results"]
print(f"{'task':22s} {'n':>4s} {'ours EM':>8s} {'lm-eval EM':>10s} {'ours F1':>8s} {'lm-eval F1':>10s} {'differing':>9s}")
for task, r in sorted(results.items()):
    name = task.removeprefix("evolve_")
    mine = ours.get(name)
    if mine is None:
        continue
    preds = {json.loads(l)["id"]: json.loads(l)["prediction"]
             for l in (out / "ours" / "predictions" / f"step_{step}" / f"{name}.jsonl").read_text().splitlines()}
    (samples,) = glob.glob(str(out / "lm_eval" / "*" / f"samples_{task}_*.jsonl"))
    theirs = {s["doc"]["id"]: s["filtered_resps"][0] for s in map(json.loads, Path(samples).read_text().splitlines())}
    differ = sum(preds.get(i) != p for i, p in theirs.items())
    print(f"{task:22s} {mine['n']:4d} {mine['em']:8.3f} {r['exact_match,answer']:10.3f} {mine['f1']:8.3f} "
          f"{r['f1,answer']:10.3f} {differ:9d}")
PY
