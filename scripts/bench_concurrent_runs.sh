#!/usr/bin/env bash
# Whether one GPU trains several r1_cifar.yaml runs at once faster than one after another: for
# each N given, N runs of STEPS generator steps (seeds 1..N, no evaluation) start together, and the
# summary gives the wall time, each run's median time per step after its first third, and the
# runs' steps per second together. (On an H200 it does not: processes share the GPU by time
# slices, so 4 runs took 4.4 times one run's step; docs/benchmarks.md.)
#
#   bash scripts/bench_concurrent_runs.sh CIFAR_DIR STEPS N [N ...]     # e.g. DATA 1200 1 4 8
#
# Runs write under $BENCH_OUT (default /tmp/gpgan-concurrent), replaced per N; BENCH_DEVICE=cpu
# tries the script without a GPU.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 3 ]; then
  echo "usage: bash scripts/bench_concurrent_runs.sh CIFAR_DIR STEPS N [N ...]" >&2
  exit 2
fi
data=$1; steps=$2; shift 2
out=${BENCH_OUT:-/tmp/gpgan-concurrent}
log=$(( steps >= 1000 ? 100 : 10 ))
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
for n in "$@"; do
  rm -rf "${out:?}/$n"
  start=$(date +%s.%N)
  for i in $(seq 1 "$n"); do
    python3 -m gpgan.cli.train configs/r1_cifar.yaml --device "${BENCH_DEVICE:-cuda}" --quiet --out "$out/$n" --name "run$i" \
      --set data.root="$data" --set data.download=false --set train.steps="$steps" --set train.seed="$i" \
      --set train.log_interval="$log" --set train.checkpoint_interval="$steps" \
      --set train.sample_interval="$steps" >"$out.$n.$i.log" 2>&1 &
  done
  wait
  end=$(date +%s.%N)
  python3 - "$out/$n/r1_cifar" "$n" "$steps" "$start" "$end" <<'EOF'
import json, os, statistics, sys
folder, n, steps, start, end = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
per_run = []
for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
    with open(os.path.join(folder, name, "metrics.jsonl"), encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    timed = [r["time_per_step"] for r in records if r.get("time_per_step") and r.get("step", 0) > steps // 3]
    if timed and records[-1].get("step") == steps:
        per_run.append(statistics.median(timed))
row = {"runs": n, "finished": len(per_run), "wall_s": round(end - start, 1)}
if per_run:
    row["median_ms_per_step"] = round(1000 * statistics.median(per_run), 2)
    row["steps_per_s_together"] = round(sum(1.0 / t for t in per_run), 1)
print(json.dumps(row), flush=True)
EOF
done
