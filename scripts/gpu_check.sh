#!/usr/bin/env bash
# The prepared check of gpgan's CUDA path: run it first whenever a GPU is at hand.
#
#   bash scripts/gpu_check.sh [--out DIR] [--data CIFAR_DIR] [--inception-weights FILE] [--budget X]
#
# Runs the tests marked `cuda`, bench_engine.py on CUDA with PyTorch (graphed and eager), 2,000 steps
# of configs/r1_cifar.yaml on the CIFAR-10 folder --data (default ../shared/data/cifar-10-batches-py),
# 5,000 samples of that run and their FID; at most about 8 minutes. Prints a summary last and writes
# it to DIR/summary.json (default DIR: gpu_check/). Needs CuPy (`pip install -e '.[cuda]'`); PyTorch
# is optional (the benchmark's comparison). gpgan runs from this checkout, installed or not.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if ! "$PYTHON" -c "import cupy; cupy.cuda.runtime.getDeviceCount()" >/dev/null 2>&1; then
  echo "gpu_check: CuPy with a CUDA GPU is not available to $PYTHON (pip install -e '.[cuda]')" >&2
  exit 2
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
exec "$PYTHON" scripts/gpu_check.py "$@"
