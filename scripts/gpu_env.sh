# The packages the GPU image lacks (scripts/gpu_wheels.txt), put on the path from the wheels carried with the tree
# (.gpu_wheels/, made by scripts/gpu_wheels.sh where pip reaches the package index). Sourced, from the repository
# root, by scripts/gpu_check.sh and by its rehearsal (tests/e2e/test_gpu_env_rehearsal.py):
#   . scripts/gpu_env.sh        # GPU_WHEELS / GPU_DEPS: other folders; GPU_ENV_TIMEOUT: seconds (default 60)
# python3 installs the wheels of the modules it cannot import into .gpu_deps/ (pip install --no-index --no-deps
# --target; scripts/gpu_env.py), says what it did on stderr, and that folder is appended to PYTHONPATH when a
# module comes from it; with nothing missing nothing is installed and PYTHONPATH is left as it is.
# GPU_ENV_RC: 0, or the install's exit status.
GPU_ENV_DIR=$(timeout "${GPU_ENV_TIMEOUT:-60}" python3 scripts/gpu_env.py --wheels "${GPU_WHEELS:-.gpu_wheels}" \
  --target "${GPU_DEPS:-.gpu_deps}")
GPU_ENV_RC=$?
if [ -n "$GPU_ENV_DIR" ]; then
  export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$GPU_ENV_DIR"
  echo "gpu_env: PYTHONPATH += $GPU_ENV_DIR" >&2
fi
