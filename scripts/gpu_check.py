#!/usr/bin/env python3
"""One prepared check of gpgan's CUDA path, for the rare times a GPU is at hand.

Stages, each in its own process under its own time limit (seconds, ``--budget`` scales them all),
so that one that hangs or fails does not cost the others:

  environment  the GPU, its driver, CuPy and PyTorch versions
  tests        ``pytest -m cuda`` (every test marked ``cuda``); counts and the failed tests' names
  bench        ``scripts/bench_engine.py --device cuda --torch``, graphed, then ``--eager``, then
               graphed with ``--precision bf16``: median ms per step of both engines and their
               ratio, per workload
  train        ``configs/r1_cifar.yaml`` on ``--data`` for ``--steps`` generator steps with CUDA
               graphs, once per ``--precisions`` (float32 and bf16): steps/s (median of the logged ``time_per_step`` after the first quarter),
               wall time, and the device's peak memory in use (``nvidia-smi``, polled)
  samples      ``gpgan-sample`` of the run: ``--n-fid`` images as ``samples.npz`` (kept in the
               output folder, to be scored elsewhere when the weights are not on this machine)
  fid          ``gpgan-eval`` of the run with the real Inception weights (``--inception-weights``
               or what ``gpgan-eval`` finds itself), against the training images of ``--data``;
               skipped, with the reason, where no weights are found
  profile      (only when named in ``--stages``) ``scripts/profile_cuda_kernels.py``: the GPU time
               of the generator step's kernels, gpgan graphed against PyTorch eager; the ten
               largest of each engine in the summary, every kernel in ``profile.json``

Writes ``summary.json`` (every number above and each stage's status, seconds and log file) and
the logs into ``--out``, and prints a summary table last. Exits 0 when every stage that ran
passed, 1 otherwise.

    bash scripts/gpu_check.sh                      # the same, with the defaults below
    python scripts/gpu_check.py --out gpu_check --data ../shared/data/cifar-10-batches-py
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ElementTree

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from gpgan.files import atomic_write  # noqa: E402
from gpgan.cli._args import Parser  # noqa: E402
from gpgan.train.manifest import git_commit  # noqa: E402

# Seconds per stage at --budget 1; the whole check then stays under 8 minutes. On the H200 on
# 2026-11-27 the 66 tests took 129 s on a fresh machine (kernels compiled the first time), a bench
# 17 to 28 s, 2,000 training steps 25 to 49 s, the samples 4 s.
LIMITS = {"tests": 200, "bench_graph": 35, "bench_eager": 25, "train": 50, "samples": 10, "fid": 30,
          "profile": 60}  # profile: not in the default stages


def run_stage(name, cmd, out, limit, env=None, poll_memory=False):
    """Run ``cmd`` with its output in ``out/NAME.log``; returns (status, seconds, peak MiB or None)."""
    log_path = os.path.join(out, f"{name}.log")
    peak = [None]
    stop = threading.Event()

    def poll():
        while not stop.wait(0.25):
            used = gpu_memory_used_mib()
            if used is not None and (peak[0] is None or used > peak[0]):
                peak[0] = used

    poller = threading.Thread(target=poll, daemon=True) if poll_memory else None
    start = time.perf_counter()
    with open(log_path, "w", encoding="utf-8") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        if poller:
            poller.start()
        try:
            proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env,
                                  timeout=limit)
            status = "passed" if proc.returncode == 0 else f"failed (exit {proc.returncode})"
        except subprocess.TimeoutExpired:
            status = f"timed out after {limit} s"
        finally:
            stop.set()
    seconds = time.perf_counter() - start
    print(f"[gpu_check] {name}: {status} in {seconds:.0f} s", flush=True)
    return status, seconds, peak[0]


def gpu_memory_used_mib():
    """The device's memory in use (MiB) as nvidia-smi reports it, or None."""
    try:
        text = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=10).stdout
        return float(text.split()[0])
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return None


def environment():
    info = {"python": sys.version.split()[0]}
    try:
        text = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                               "--format=csv,noheader"], capture_output=True, text=True, timeout=20).stdout
        info["gpu"] = text.strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        info["gpu"] = f"nvidia-smi unavailable ({exc})"
    probe = ("import json, cupy; d = {'cupy': cupy.__version__, "
             "'cuda_runtime': cupy.cuda.runtime.runtimeGetVersion()}\n"
             "try:\n import torch; d['torch'] = torch.__version__\nexcept ImportError: d['torch'] = None\n"
             "print(json.dumps(d))")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT)
    try:
        info.update(json.loads(proc.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        info["cupy"] = f"not importable: {proc.stderr.strip().splitlines()[-1:] or proc.stdout}"
    return info


def junit_counts(path):
    """passed/failed/errors/skipped counts and the failed tests' ids from a JUnit XML file."""
    root = ElementTree.parse(path).getroot()
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    failed = []
    for case in root.iter("testcase"):
        ident = f"{case.get('classname')}::{case.get('name')}"
        if case.find("failure") is not None:
            counts["failed"] += 1
            failed.append(ident)
        elif case.find("error") is not None:
            counts["errors"] += 1
            failed.append(ident)
        elif case.find("skipped") is not None:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    return counts, failed


def bench_summary(path):
    """{workload: {gpgan_ms, torch_ms, ratio, ...}} from bench_engine.py's JSON."""
    with open(path, encoding="utf-8") as f:
        reports = json.load(f)
    rows = {}
    for report in reports:
        for name, entry in report.get("workloads", {}).items():
            row = {"gpgan_ms": entry["gpgan"]["median_ms"]}
            if "torch" in entry:
                row["torch_ms"] = entry["torch"]["median_ms"]
                row["ratio"] = entry["ratio_median"]
            for key in ("cuda_pool_peak_mib", "cuda_graph_pool_mib", "grad_difference_gpgan_torch"):
                if key in entry:
                    row[key] = entry[key]
            rows[name] = row
    return rows


def profile_summary(path, top=10):
    """{engine: {gpu_ms_per_step, top: [[kernel, us per step], ...]}} of the generator step from
    profile_cuda_kernels.py's JSON."""
    with open(path, encoding="utf-8") as f:
        report = json.load(f)["generator"]
    return {engine: {"gpu_ms_per_step": round(entry["gpu_ms_per_step"], 3),
                     "top": [[name, round(k["us"], 1)] for name, k in
                             sorted(entry["kernels"].items(), key=lambda kv: -kv[1]["us"])[:top]]}
            for engine, entry in report.items()}


def training_summary(run_dir, steps):
    """Steps/s from metrics.jsonl's time_per_step (median after the first quarter of the run)."""
    records = []
    with open(os.path.join(run_dir, "metrics.jsonl"), encoding="utf-8") as f:
        for line in f:
            records.append(json.loads(line))
    timed = [r["time_per_step"] for r in records if r.get("time_per_step") and r.get("step", 0) > steps // 4]
    summary = {"records": len(records), "last_step": records[-1].get("step") if records else None}
    if timed:
        summary["median_time_per_step_s"] = statistics.median(timed)
        summary["steps_per_s"] = 1.0 / summary["median_time_per_step_s"]
    return summary


def main(argv=None):
    parser = Parser(description="One prepared check of gpgan's CUDA path.")
    parser.add_argument("--out", default="gpu_check", help="output folder (created; default gpu_check)")
    parser.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data", "cifar-10-batches-py"),
                        help="CIFAR-10 'python version' folder to train and score on")
    parser.add_argument("--steps", type=int, default=2000, help="generator steps of r1_cifar.yaml (2000)")
    parser.add_argument("--n-fid", type=int, default=5000, help="samples drawn for FID (5000)")
    parser.add_argument("--inception-weights", metavar="PATH", help="FID Inception weights for the fid stage")
    parser.add_argument("--precisions", default="float32,bf16",
                        help="train.precision values to benchmark and train with (float32,bf16)")
    parser.add_argument("--budget", type=float, default=1.0, help="scales every stage's time limit (1.0)")
    parser.add_argument("--stages", default="tests,bench,train,samples,fid",
                        help="comma-separated subset of tests,bench,train,samples,fid,profile "
                             "(default: all but profile)")
    args = parser.parse_args(argv)
    stages = {s.strip() for s in args.stages.split(",") if s.strip()}
    precisions = [p.strip() for p in args.precisions.split(",") if p.strip()]
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    data = os.path.abspath(args.data)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               PYTHONUNBUFFERED="1")
    limit = {k: int(v * args.budget) for k, v in LIMITS.items()}
    commit, dirty = git_commit(ROOT)
    summary = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "commit": commit, "dirty": dirty,
               "environment": environment(), "stages": {}}
    print(f"[gpu_check] {json.dumps(summary['environment'])}", flush=True)

    def record(name, status, seconds, **extra):
        log = f"{name}.log"
        if status != "passed" and "failed_tests" not in extra and os.path.exists(os.path.join(out, log)):
            extra["reason"] = last_line(os.path.join(out, log))  # e.g. gpgan-train's one-line error
        summary["stages"][name] = {"status": status, "seconds": round(seconds, 1), "log": log, **extra}
        write_summary(out, summary)

    py = sys.executable
    if "tests" in stages:
        junit = os.path.join(out, "tests.xml")
        status, seconds, _ = run_stage("tests", [py, "-m", "pytest", "-m", "cuda", "-q", "-p", "no:cacheprovider",
                                                 f"--junitxml={junit}", "tests"], out, limit["tests"], env)
        extra = {}
        if os.path.exists(junit):
            extra["counts"], extra["failed_tests"] = junit_counts(junit)
        record("tests", status, seconds, **extra)

    if "bench" in stages:
        benches = [("bench_graph", [])] + [("bench_eager", ["--eager"])]
        benches += [(f"bench_graph_{p}", ["--precision", p]) for p in precisions if p != "float32"]
        for name, flags in benches:
            path = os.path.join(out, f"{name}.json")
            status, seconds, _ = run_stage(name, [py, "scripts/bench_engine.py", "--device", "cuda", "--torch",
                                                  "--steps", "30", "--json", path, *flags], out,
                                           limit["bench_eager" if "eager" in name else "bench_graph"], env)
            extra = {"workloads": bench_summary(path)} if os.path.exists(path) else {}
            record(name, status, seconds, **extra)

    for precision in precisions:
        suffix = "" if precision == "float32" else f"_{precision}"
        run_dir = os.path.join(out, "runs", "r1_cifar", f"check{suffix}")  # gpgan-train's --out/<config>/<--name>
        if "train" in stages:
            shutil.rmtree(run_dir, ignore_errors=True)
            cmd = [py, "-m", "gpgan.cli.train", "configs/r1_cifar.yaml", "--device", "cuda", "--quiet",
                   "--out", os.path.join(out, "runs"), "--name", f"check{suffix}",
                   "--set", f"data.root={data}", "--set", "data.download=false", "--set", f"train.precision={precision}",
                   "--set", f"train.steps={args.steps}", "--set", "train.log_interval=100",
                   "--set", f"train.checkpoint_interval={args.steps}", "--set", f"train.sample_interval={args.steps}"]
            status, seconds, peak = run_stage(f"train{suffix}", cmd, out, limit["train"], env, poll_memory=True)
            extra = {"precision": precision, "peak_gpu_memory_used_mib": peak, "wall_s": round(seconds, 1)}
            if os.path.exists(os.path.join(run_dir, "metrics.jsonl")):
                extra.update(training_summary(run_dir, args.steps))
            record(f"train{suffix}", status, seconds, **extra)

        if "samples" in stages:
            cmd = [py, "-m", "gpgan.cli.sample", run_dir, "--device", "cuda", "--n", str(args.n_fid),
                   "--out", os.path.join(out, f"samples{suffix}.npz"), "--quiet"]
            status, seconds, _ = run_stage(f"samples{suffix}", cmd, out, limit["samples"], env)
            record(f"samples{suffix}", status, seconds, file=f"samples{suffix}.npz")

        if "fid" in stages:
            cmd = [py, "-m", "gpgan.cli.eval", run_dir, "--metrics", "fid,kid", "--n", str(args.n_fid),
                   "--ref", "cifar10:train", "--data-root", data, "--device", "cuda", "--quiet"]
            if args.inception_weights:
                cmd += ["--inception-weights", args.inception_weights]
            status, seconds, _ = run_stage(f"fid{suffix}", cmd, out, limit["fid"], env)
            extra = {}
            scores = sorted(f for f in os.listdir(run_dir) if f.startswith("eval_")) if os.path.isdir(run_dir) else []
            if scores:
                with open(os.path.join(run_dir, scores[-1]), encoding="utf-8") as f:
                    extra["scores"] = json.load(f)
            record(f"fid{suffix}", status, seconds, **extra)

    if "profile" in stages:
        path = os.path.join(out, "profile.json")
        status, seconds, _ = run_stage("profile", [py, "scripts/profile_cuda_kernels.py", "--workloads", "generator",
                                                   "--json", path], out, limit["profile"], env)
        extra = {"engines": profile_summary(path)} if os.path.exists(path) else {}
        record("profile", status, seconds, **extra)

    summary["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    write_summary(out, summary)
    print_table(summary)
    return 0 if all(s["status"] == "passed" for s in summary["stages"].values()) else 1


def last_line(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = [line.strip() for line in f if line.strip()]
    return lines[-1] if lines else ""


def write_summary(out, summary):
    atomic_write(os.path.join(out, "summary.json"), json.dumps(summary, indent=1))


def print_table(summary):
    print("\n== gpu_check summary ==")
    env = summary["environment"]
    print(f"GPU {env.get('gpu')} | CuPy {env.get('cupy')} (CUDA runtime {env.get('cuda_runtime')}) | "
          f"torch {env.get('torch')} | commit {str(summary.get('commit'))[:10]}{' (dirty)' if summary.get('dirty') else ''}")
    for name, stage in summary["stages"].items():
        line = f"{name:12s} {stage['status']:24s} {stage['seconds']:6.0f} s"
        if "counts" in stage:
            line += "  " + ", ".join(f"{v} {k}" for k, v in stage["counts"].items())
        if "steps_per_s" in stage:
            line += f"  {stage['steps_per_s']:.1f} steps/s, peak GPU memory {stage.get('peak_gpu_memory_used_mib')} MiB"
        if "scores" in stage:
            line += "  " + json.dumps(stage["scores"])[:200]
        if "reason" in stage:
            line += "  " + stage["reason"][:200]
        print(line)
        for test in stage.get("failed_tests", []):
            print(f"    FAILED {test}")
        for engine, entry in stage.get("engines", {}).items():
            print(f"    {engine}: {entry['gpu_ms_per_step']:.2f} ms of GPU time per step; largest: "
                  + ", ".join(f"{name[:40]} {us:.0f} us" for name, us in entry["top"][:3]))
        for workload, row in stage.get("workloads", {}).items():
            ratio = f"ratio {row['ratio']:.2f}" if "ratio" in row else ""
            torch_ms = f"torch {row['torch_ms']:.2f} ms" if "torch_ms" in row else ""
            print(f"    {workload:10s} gpgan {row['gpgan_ms']:.2f} ms  {torch_ms}  {ratio}")


if __name__ == "__main__":
    sys.exit(main())
