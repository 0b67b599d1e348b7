#!/usr/bin/env bash
# Runs configs/ablations/rpgan_toy.yaml (6 short CPU runs) on a many-core machine, one thread per
# run, and leaves the report and each run's logs (no checkpoints) under $OUT (default ./rpgan_toy_out).
#   bash scripts/run_rpgan_toy.sh [JOBS]
set -u
OUT=${OUT:-$PWD/rpgan_toy_out}
JOBS=${1:-6}
export PYTHONPATH=$PWD GPGAN_NUM_THREADS=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
python -c "import gpgan, numpy, yaml, tqdm, matplotlib; print('gpgan', gpgan.__file__, 'numpy', numpy.__version__)" || exit 3
nproc; lscpu | grep -m1 "Model name"; git log -1 --format=%h 2>/dev/null; date -u
runs=/tmp/rpgan_toy_runs
time python -m gpgan.cli.ablate configs/ablations/rpgan_toy.yaml --jobs "$JOBS" --out "$runs" --report-dir "$OUT/report"
rc=$?
for d in "$runs"/runs/*/*/; do
  name=$(basename "$d"); mkdir -p "$OUT/runs/$name"
  cp "$d"/metrics.jsonl "$d"/final.json "$d"/config.yaml "$OUT/runs/$name/" 2>/dev/null
  cp "$d"/samples/final.png "$OUT/runs/$name/" 2>/dev/null
done
date -u
exit $rc
