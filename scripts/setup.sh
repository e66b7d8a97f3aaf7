#!/usr/bin/env bash
# Set up the Python environment evolve-train runs in and install it (editable) with its test, slurm, gguf
# (evolve-data fetch-model) and retrieval (bm25s) extras. Which environment:
#   nothing set                   .venv, created if absent: a fresh venv, which does not see a torch installed
#                                 elsewhere (it gets the pinned torch below)
#   VENV=path                     that environment, used as it is if it exists (a venv or a conda env:
#                                 VENV=$CONDA_PREFIX), else created there as a venv
#   an active venv ($VIRTUAL_ENV) that venv, when VENV is not set
#   VENV_SYSTEM_SITE_PACKAGES=1   the venv sees the packages of the environment of $PYTHON (python3 unless set):
#                                 created with `python -m venv --system-site-packages`, or, if it exists, its
#                                 pyvenv.cfg switched to include-system-site-packages = true
# torch: an importable torch of the environment (its own, or seen through its system site-packages or PYTHONPATH)
# is kept and never replaced: the install runs under a constraint on that torch's version, so pip stops with a
# conflict rather than swap it. Only where none is importable is torch installed, pinned to 2.13.0
# (TORCH_VERSION=...), from pip's configured index: a CPU build where that index serves CPU wheels, a multi-GB
# CUDA build where it serves CUDA ones (PyPI on Linux x86-64). For a CPU torch there, install it into the
# environment first (`pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu`); on a GPU
# machine install your CUDA torch first; then run this from that environment (activated, VENV=..., or
# VENV_SYSTEM_SITE_PACKAGES=1). The script prints which torch it uses.
# scripts/test.sh and scripts/demo.sh run in .venv: when the environment is another venv and .venv does not
# exist, .venv becomes a link to it.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ -z "${VENV:-}" ] && [ -n "${VIRTUAL_ENV:-}" ] && [ -x "$VIRTUAL_ENV/bin/python" ]; then
  VENV=$VIRTUAL_ENV
  echo "setup: using the active venv $VENV"
fi
VENV=${VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  if [ "${VENV_SYSTEM_SITE_PACKAGES:-0}" = 1 ]; then
    "$PYTHON" -m venv --system-site-packages "$VENV"
  else
    "$PYTHON" -m venv "$VENV"
  fi
elif [ "${VENV_SYSTEM_SITE_PACKAGES:-0}" = 1 ] && [ -f "$VENV/pyvenv.cfg" ] &&
  grep -q "^include-system-site-packages *= *false" "$VENV/pyvenv.cfg"; then
  sed -i.bak "s/^include-system-site-packages *= *false/include-system-site-packages = true/" "$VENV/pyvenv.cfg"
  rm -f "$VENV/pyvenv.cfg.bak"
  echo "setup: $VENV now sees the system site-packages (VENV_SYSTEM_SITE_PACKAGES=1)"
fi
if [ "$VENV" != .venv ] && [ ! -e .venv ] && [ -f "$VENV/bin/activate" ]; then
  ln -s "$(cd "$VENV" && pwd)" .venv
  echo "setup: .venv -> $VENV (scripts/test.sh and scripts/demo.sh run in .venv)"
fi
PY=$VENV/bin/python
"$PY" -m pip install -q --upgrade pip 2>&1 | grep -v "^WARNING: Location" || true
torch_found() {  # "<version><TAB><where, CUDA build>" of the torch the environment imports, if any
  "$PY" -c "import os, torch; cuda = getattr(getattr(torch, 'version', None), 'cuda', None); \
where = os.path.dirname(torch.__file__); \
print(f'{torch.__version__}\t{where}, ' + ('CUDA ' + cuda if cuda else 'no CUDA'))" 2>/dev/null
}
if found=$(torch_found); then
  echo "setup: keeping the importable torch ${found%%$'\t'*} (${found#*$'\t'}): it is not replaced"
else
  pinned="torch==${TORCH_VERSION:-2.13.0}"
  echo "setup: no importable torch in $VENV: installing $pinned"
  "$PY" -m pip install -q "$pinned" 2>&1 | grep -v "^WARNING: Location" || true
  found=$(torch_found) || found=""
  if [ -n "$found" ]; then
    echo "setup: using the installed torch ${found%%$'\t'*} (${found#*$'\t'})"
  fi
fi
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
if [ -n "$found" ]; then
  echo "torch==${found%%$'\t'*}" >"$constraints"  # the extras' requirements may not swap the torch in use
fi
"$PY" -m pip install -q -c "$constraints" -e ".[test,slurm,gguf,retrieval]" 2>&1 | grep -v "^WARNING: Location" || true
"$PY" -c "import torch, transformers, peft, accelerate, datasets, hydra, wandb; print(f'evolve-train env ready: torch {torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__}')"
