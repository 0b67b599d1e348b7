#!/usr/bin/env python3
"""Where a CUDA training step's GPU time goes: per-kernel times of gpgan's step and PyTorch's.

Builds bench_engine.py's workloads (same weights and inputs for both engines), runs each engine's
step under PyTorch's profiler (CUPTI records every kernel launched in the process, CuPy's as
well as PyTorch's, also inside a replayed CUDA graph) and prints, per engine, the GPU time per
step and the kernels that took most of it. Kernel durations are GPU execution times, so an
eager step's table is valid even where the host bounds the step's wall time.

    python scripts/profile_cuda_kernels.py                          # generator, graphed and eager
    python scripts/profile_cuda_kernels.py --workloads r1,generator --top 25 --json prof.json

Needs CuPy and PyTorch with CUDA (a development aid; gpgan itself never imports torch).
"""
import json
import os
import sys

SCRIPTS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, SCRIPTS)
sys.path.insert(0, os.path.dirname(SCRIPTS))

import bench_engine  # noqa: E402
from gpgan.cli._args import Parser  # noqa: E402


def kernel_table(torch, step, steps):
    """{kernel name: (calls per step, GPU microseconds per step)} of ``steps`` runs of ``step``."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    table = {}
    for event in prof.key_averages():
        us = getattr(event, "self_device_time_total", None)
        if us is None:
            us = event.self_cuda_time_total
        if us > 0:
            table[event.key] = (event.count / steps, us / steps)
    return table


def print_table(title, table, top):
    total = sum(us for _, us in table.values())
    print(f"\n== {title}: {total / 1000:.3f} ms of GPU time per step, {sum(c for c, _ in table.values()):.0f} kernels")
    for name, (calls, us) in sorted(table.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"  {us:9.1f} us {100 * us / total:5.1f}%  x{calls:<5.0f} {name[:110]}")
    return total


def main(argv=None):
    parser = Parser(description=__doc__.split("\n")[0])
    parser.add_argument("--workloads", default="generator", help="bench_engine.py's workloads (generator)")
    parser.add_argument("--steps", type=int, default=10, help="profiled steps per engine (10)")
    parser.add_argument("--top", type=int, default=30, help="kernels listed per engine (30)")
    parser.add_argument("--precision", choices=["float32", "bf16"], default="float32")
    parser.add_argument("--json", metavar="FILE", help="also write every table as JSON")
    args = parser.parse_args(argv)

    import torch
    from gpgan.backend.precision import matmul_precision

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    results = {}
    for name in args.workloads.split(","):
        with matmul_precision(args.precision):
            work = bench_engine.Workload(name, "float32", "cuda")
            eager = work.timed_step(False)
            graphed = work.timed_step(True)
            theirs = bench_engine.torch_step(work, torch)
            for run in (eager, graphed, theirs):  # warm-up: compiled kernels, cuDNN plans
                run()
            tables = {"gpgan graphed": kernel_table(torch, graphed, args.steps),
                      "gpgan eager": kernel_table(torch, eager, args.steps),
                      "PyTorch eager": kernel_table(torch, theirs, args.steps)}
        results[name] = {}
        for engine, table in tables.items():
            total = print_table(f"{name}, {engine}", table, args.top)
            results[name][engine] = {"gpu_ms_per_step": total / 1000,
                                     "kernels": {k: {"calls": c, "us": us} for k, (c, us) in table.items()}}
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
