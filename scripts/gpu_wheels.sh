#!/usr/bin/env bash
# Downloads the wheels of the packages the GPU image lacks (scripts/gpu_wheels.txt: hydra-core, omegaconf,
# antlr4-python3-runtime, datasets, dill, multiprocess, zstandard, and the sweep's submitit launcher) into
# .gpu_wheels/ (git-ignored), for a GPU machine without network: the folder travels with the working tree, and
# scripts/gpu_check.sh installs there what the image cannot import (scripts/gpu_env.sh). Run it where pip reaches
# the package index:
#   bash scripts/gpu_wheels.sh                                # CPython 3.12, manylinux x86-64 (the GPU image)
#   PY_VERSION=3.11 WHEELS=somewhere bash scripts/gpu_wheels.sh   # for another CPython version, elsewhere
# Wheels only (--only-binary=:all:, --no-deps: the table lists every package the image lacks). A package published
# as source only (antlr4-python3-runtime 4.9.3) is built here into a wheel, kept only when it is pure Python
# (py3-none-any), which installs on any CPython. Prints each wheel and the folder's size (under 20 MB).
set -euo pipefail
cd "$(dirname "$0")/.."
PY_VERSION=${PY_VERSION:-3.12}
WHEELS=${WHEELS:-.gpu_wheels}
TABLE=${TABLE:-scripts/gpu_wheels.txt}
PYTHON=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
PLATFORMS=(--platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64)

mapfile -t SPECS < <(sed -e 's/#.*//' "$TABLE" | awk 'NF { print $1 }')
mkdir -p "$WHEELS"
rm -f "$WHEELS"/*.whl
BUILD=$(mktemp -d)
trap 'rm -rf "$BUILD"' EXIT
for spec in "${SPECS[@]}"; do
  if "$PYTHON" -m pip download --quiet --disable-pip-version-check --only-binary=:all: --no-deps --implementation cp \
      --python-version "$PY_VERSION" "${PLATFORMS[@]}" --dest "$WHEELS" "$spec" 2> "$BUILD/error.txt"; then
    continue
  fi
  # no wheel on the index: build one from the source distribution; only a pure-Python one fits any interpreter
  "$PYTHON" -m pip wheel --quiet --disable-pip-version-check --no-deps --no-binary :all: --wheel-dir "$BUILD/built" \
    "$spec" || { cat "$BUILD/error.txt" >&2; echo "no wheel for $spec" >&2; exit 1; }
  built=("$BUILD"/built/*.whl)
  case "${built[0]}" in
    *-py3-none-any.whl|*-py2.py3-none-any.whl) mv "${built[0]}" "$WHEELS/" ;;
    *) echo "$spec: built ${built[0]##*/}, not pure Python: no wheel for CPython $PY_VERSION" >&2; exit 1 ;;
  esac
  rm -rf "$BUILD/built"
done
ls -1 "$WHEELS"/*.whl
n=$(ls -1 "$WHEELS"/*.whl | wc -l)
bytes=$(cat "$WHEELS"/*.whl | wc -c)
echo "$n wheels for CPython $PY_VERSION in $WHEELS: $(( bytes / 1024 )) KiB"
if [ "$n" -ne "${#SPECS[@]}" ]; then
  echo "expected ${#SPECS[@]} wheels (one per line of $TABLE)" >&2
  exit 1
fi
if [ "$bytes" -gt $(( 20 * 1000 * 1000 )) ]; then
  echo "the wheels weigh over 20 MB: they travel with the working tree" >&2
  exit 1
fi
