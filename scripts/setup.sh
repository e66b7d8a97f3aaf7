#!/usr/bin/env bash
# Create .venv (if absent) and install evolve-train with its test, slurm, gguf (evolve-data fetch-model) and
# retrieval (bm25s) extras.
# torch is pinned to 2.13.0: on this kind of machine that is a CPU build already on disk; a plain
# "torch" requirement would pull a multi-GB CUDA build. On a GPU cluster install your CUDA torch first.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
# shellcheck disable=SC1091
. "$VENV/bin/activate"
python -m pip install -q --upgrade pip 2>&1 | grep -v "^WARNING: Location" || true
if ! python -c "import torch" 2>/dev/null; then
  python -m pip install -q "torch==${TORCH_VERSION:-2.13.0}" 2>&1 | grep -v "^WARNING: Location" || true
fi
python -m pip install -q -e ".[test,slurm,gguf,retrieval]" 2>&1 | grep -v "^WARNING: Location" || true
python -c "import torch, transformers, peft, accelerate, datasets, hydra, wandb; print(f'evolve-train env ready: torch {torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__}')"
