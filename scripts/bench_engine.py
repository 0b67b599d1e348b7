#!/usr/bin/env python3
"""Time the engine on a DCGAN critic step with an R1 penalty (double backward), CPU and CUDA.

The critic (32x32x3 images): conv(3->64, k4 s2 p1), leaky_relu(0.2), conv(64->128, k4 s2 p1),
leaky_relu, conv(128->256, k4 s2 p1), leaky_relu, flatten, linear(4096->1); plain Variables as
weights (no gpgan.nn). One R1 step is

    loss = mean(softplus(-D(x_real))) + mean(softplus(D(x_fake)))
           + 5 * mean_i ||d sum(D(x_real)) / d x_real_i||^2

with the image gradient taken by ``gpgan.grad(create_graph=True)``, then ``loss.backward()`` to all
critic weights. The plain step is the same without the penalty (first order only).

Also reported: the engine's own cost per function call, from 200,000 additions of one-element
float32 Variables: recorded (requires_grad, a node kept for backward), under no_grad, and NumPy's
bare ``a + b`` for scale.

Reported: wall milliseconds per step (mean and min over ``--steps`` after ``--warmup``), the
smallest process CPU time of a step (all threads; with ``OPENBLAS_NUM_THREADS=1`` a figure that
other load on the machine barely moves), and peak memory. CPU memory is the tracemalloc peak of
the allocations made during one extra step (NumPy reports its array buffers to tracemalloc;
weights and input batches, allocated before, are not counted); CUDA memory is the peak of the CuPy memory pool's used bytes, tracked by an
allocator wrapper, and the pool's total reserved bytes.

    python scripts/bench_engine.py                    # CPU, and CUDA when CuPy sees a GPU
    python scripts/bench_engine.py --device cpu --profile
    python scripts/bench_engine.py --torch            # also PyTorch's autograd on the same step

``--torch`` (optional; PyTorch is never a dependency of gpgan) runs the same two steps with the same
weights and inputs in PyTorch (``torch.autograd.grad(create_graph=True)``), on the same device and
thread count, checks that both engines give the same loss and weight gradients, and times it.
"""
import argparse
import cProfile
import operator
import os
import pstats
import sys
import time
import tracemalloc

import numpy

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import gpgan  # noqa: E402
import gpgan.functions as F  # noqa: E402
from gpgan.backend import cupy_available, device_description, to_device  # noqa: E402


def cpu_cores():
    """Cores this process may run on, of all the machine's."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{cores} available to this process"


def blas_description():
    try:
        info = numpy.show_config(mode="dicts")
        blas = info["Build Dependencies"]["blas"]
        return f"{blas.get('name')} {blas.get('version')}"
    except Exception:
        return "unknown BLAS"


def make_critic(rng, dtype, device):
    """Weights (DCGAN-style N(0, 0.02)) as plain Variables on ``device``."""
    shapes = [(64, 3, 4, 4), (64,), (128, 64, 4, 4), (128,), (256, 128, 4, 4), (256,), (1, 4096), (1,)]
    params = []
    for shape in shapes:
        data = (rng.standard_normal(shape) * 0.02).astype(dtype)
        params.append(gpgan.Variable(to_device(data, device), requires_grad=True))
    return params


def critic(params, x):
    w1, b1, w2, b2, w3, b3, w4, b4 = params
    h = F.leaky_relu(F.conv2d(x, w1, b1, stride=2, padding=1), 0.2)
    h = F.leaky_relu(F.conv2d(h, w2, b2, stride=2, padding=1), 0.2)
    h = F.leaky_relu(F.conv2d(h, w3, b3, stride=2, padding=1), 0.2)
    return F.linear(F.flatten(h), w4, b4)


def r1_step(params, x_real_data, x_fake_data, gamma=5.0):
    for p in params:
        p.grad = None
    x_real = gpgan.Variable(x_real_data, requires_grad=True)
    x_fake = gpgan.Variable(x_fake_data)
    d_real = critic(params, x_real)
    d_fake = critic(params, x_fake)
    g, = gpgan.grad(d_real.sum(), [x_real], create_graph=True)
    penalty = F.mean(F.sum(g * g, axis=(1, 2, 3)))
    loss = F.mean(F.softplus(-d_real)) + F.mean(F.softplus(d_fake)) + gamma * penalty
    loss.backward()
    return loss


def plain_step(params, x_real_data, x_fake_data):
    for p in params:
        p.grad = None
    d_real = critic(params, gpgan.Variable(x_real_data))
    d_fake = critic(params, gpgan.Variable(x_fake_data))
    loss = F.mean(F.softplus(-d_real)) + F.mean(F.softplus(d_fake))
    loss.backward()
    return loss


def _synchronize(device):
    if device == "cuda":
        import cupy

        cupy.cuda.Device().synchronize()


def time_step(step, args, device, inputs):
    for _ in range(args.warmup):
        step(*inputs)
    _synchronize(device)
    times, cpu_times = [], []
    for _ in range(args.steps):
        t0, c0 = time.perf_counter(), time.process_time()
        step(*inputs)
        _synchronize(device)
        times.append((time.perf_counter() - t0) * 1e3)
        cpu_times.append((time.process_time() - c0) * 1e3)
    return float(numpy.mean(times)), float(numpy.min(times)), float(numpy.min(cpu_times))


def peak_memory_cpu(step, inputs):
    tracemalloc.start()
    tracemalloc.reset_peak()
    step(*inputs)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


class _PeakAllocator:
    """CuPy allocator that records the peak of the default pool's used bytes."""

    def __init__(self, cupy):
        self.pool = cupy.get_default_memory_pool()
        self.peak = 0

    def __call__(self, size):
        mem = self.pool.malloc(size)
        used = self.pool.used_bytes()
        if used > self.peak:
            self.peak = used
        return mem


def peak_memory_cuda(step, inputs):
    import cupy

    allocator = _PeakAllocator(cupy)
    cupy.cuda.set_allocator(allocator)
    try:
        base = allocator.pool.used_bytes()
        allocator.peak = base
        step(*inputs)
        cupy.cuda.Device().synchronize()
    finally:
        cupy.cuda.set_allocator(allocator.pool.malloc)
    return allocator.peak, base, allocator.pool.total_bytes()


def torch_steps(params, x_real_data, x_fake_data, device, gamma=5.0):
    """The R1 and plain steps in PyTorch, on copies of gpgan's weights and inputs."""
    import torch
    import torch.nn.functional as TF

    def tensor(a):
        return torch.as_tensor(numpy.asarray(to_device(a, "cpu"))).to(device)

    weights = [tensor(p.data).requires_grad_(True) for p in params]
    x_real, x_fake = tensor(x_real_data), tensor(x_fake_data)

    def critic_t(x):
        w1, b1, w2, b2, w3, b3, w4, b4 = weights
        h = TF.leaky_relu(TF.conv2d(x, w1, b1, stride=2, padding=1), 0.2)
        h = TF.leaky_relu(TF.conv2d(h, w2, b2, stride=2, padding=1), 0.2)
        h = TF.leaky_relu(TF.conv2d(h, w3, b3, stride=2, padding=1), 0.2)
        return TF.linear(h.flatten(1), w4, b4)

    def r1():
        for w in weights:
            w.grad = None
        x = x_real.detach().requires_grad_(True)
        d_real, d_fake = critic_t(x), critic_t(x_fake)
        g, = torch.autograd.grad(d_real.sum(), [x], create_graph=True)
        loss = TF.softplus(-d_real).mean() + TF.softplus(d_fake).mean() + gamma * g.pow(2).sum((1, 2, 3)).mean()
        loss.backward()
        return loss

    def plain():
        for w in weights:
            w.grad = None
        loss = TF.softplus(-critic_t(x_real)).mean() + TF.softplus(critic_t(x_fake)).mean()
        loss.backward()
        return loss

    return weights, r1, plain


def _float64_reference(step, inputs):
    """Weight gradients of ``step`` computed by gpgan on the CPU in float64 from the same data."""
    params, x_real, x_fake = inputs
    params64 = [gpgan.Variable(numpy.asarray(to_device(p.data, "cpu"), numpy.float64), requires_grad=True)
                for p in params]
    step(params64, *(numpy.asarray(to_device(a, "cpu"), numpy.float64) for a in (x_real, x_fake)))
    return [p.grad.data for p in params64]


def _relative_error(grads, reference):
    """||g - ref|| / ||ref|| over all weight gradients taken as one vector (a per-weight maximum
    is dominated by float32 cancellation in small bias gradients, in both engines alike)."""
    diff = sum(float(numpy.sum((g - r) ** 2)) for g, r in zip(grads, reference))
    return (diff / sum(float(numpy.sum(r ** 2)) for r in reference)) ** 0.5


def bench_torch(args, device, inputs):
    try:
        import torch
    except ImportError:
        print("  (PyTorch not installed: --torch skipped)")
        return
    if device == "cpu":
        torch.set_num_threads(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count())
    # TF32 off: PyTorch's CUDA convolutions default to TF32 (10-bit mantissa), gpgan's CuPy GEMMs
    # compute in full float32.
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    weights, r1, plain = torch_steps(*inputs, device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    print(f"  PyTorch {torch.__version__} ({torch.get_num_threads()} threads, TF32 off), same weights and inputs;")
    print("  gradient error = ||g - g64|| / ||g64|| over all weights, g64 from gpgan in float64 on the CPU:")
    for label, step, ours in (("R1 step (double backward)", r1, r1_step), ("plain step (first order)", plain, plain_step)):
        loss_t = step()
        loss_g = ours(*inputs)
        reference = _float64_reference(ours, inputs)
        err_t = _relative_error([w.grad.cpu().numpy() for w in weights], reference)
        err_g = _relative_error([numpy.asarray(to_device(p.grad.data, "cpu")) for p in inputs[0]], reference)
        for _ in range(args.warmup):
            step()
        sync()
        times = []
        for _ in range(args.steps):
            t0 = time.perf_counter()
            step()
            sync()
            times.append((time.perf_counter() - t0) * 1e3)
        print(f"  {label:28s} {numpy.mean(times):8.1f} ms/step (min {numpy.min(times):.1f}); "
              f"loss {loss_t.item():.6g} vs gpgan {loss_g.item():.6g}; gradient error PyTorch {err_t:.1e}, "
              f"gpgan {err_g:.1e}")


def node_overhead(n=200_000):
    """Microseconds per ``a + b`` on one-element Variables: recorded, under no_grad, bare NumPy."""
    a = gpgan.Variable(numpy.ones(1, numpy.float32), requires_grad=True)
    b = gpgan.Variable(numpy.ones(1, numpy.float32), requires_grad=True)

    def per_call(add, x, y):
        t0 = time.perf_counter()
        for _ in range(n):
            add(x, y)
        return (time.perf_counter() - t0) / n * 1e6

    add = operator.add
    recorded = per_call(add, a, b)
    with gpgan.no_grad():
        unrecorded = per_call(add, a, b)
    bare = per_call(add, a.data, b.data)
    print(f"  node overhead: {recorded:.2f} us per recorded call, {unrecorded:.2f} us under no_grad, "
          f"{bare:.2f} us for NumPy's bare a + b")


def bench_device(args, device):
    dtype = numpy.dtype(args.dtype)
    rng = numpy.random.default_rng(0)
    params = make_critic(rng, dtype, device)
    shape = (args.batch, 3, 32, 32)
    x_real = to_device(rng.uniform(-1, 1, shape).astype(dtype), device)
    x_fake = to_device(rng.uniform(-1, 1, shape).astype(dtype), device)
    inputs = (params, x_real, x_fake)
    if device == "cuda":
        import cupy

        print(f"\n[cuda] {device_description('cuda')}, CuPy {cupy.__version__}")
    else:
        print(f"\n[cpu] {device_description('cpu')}, {cpu_cores()}; NumPy {numpy.__version__}, "
              f"{blas_description()}")
    if device == "cpu":
        node_overhead()
    print(f"batch {args.batch} x 3x32x32, {dtype}, {args.warmup} warmup + {args.steps} timed steps")
    for label, step in (("R1 step (double backward)", r1_step), ("plain step (first order)", plain_step)):
        mean_ms, min_ms, cpu_ms = time_step(step, args, device, inputs)
        if device == "cpu":
            peak = peak_memory_cpu(step, inputs)
            mem = f"peak {peak / 2**20:.1f} MiB (tracemalloc, one step)"
        else:
            peak, base, total = peak_memory_cuda(step, inputs)
            mem = (f"peak used {peak / 2**20:.1f} MiB (pool used bytes, {base / 2**20:.1f} MiB before the step), "
                   f"pool total {total / 2**20:.1f} MiB")
        print(f"  {label:28s} {mean_ms:8.1f} ms/step (min {min_ms:.1f}; process CPU time min {cpu_ms:.1f} ms); {mem}")
    if args.torch:
        bench_torch(args, device, inputs)
    if args.profile:
        # On CUDA the host's time is what bounds a step (kernels are queued asynchronously), so
        # the profile of the host shows where a CUDA step goes too.
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(args.steps):
            r1_step(*inputs)
        _synchronize(device)
        profiler.disable()
        print(f"\n  cProfile of {args.steps} R1 steps (top {args.profile_top} by own time):")
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(args.profile_top)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=["cpu", "cuda", "all"], default="all",
                        help="'all' (default): the CPU, and CUDA when CuPy sees a GPU")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--profile", action="store_true", help="cProfile the R1 step (on CUDA: the host side, which bounds it)")
    parser.add_argument("--profile-top", type=int, default=25)
    parser.add_argument("--torch", action="store_true",
                        help="also time PyTorch on the same step and compare its gradients (optional)")
    args = parser.parse_args(argv)
    devices = ["cpu"] if args.device == "cpu" else ["cuda"] if args.device == "cuda" else ["cpu"]
    if args.device == "all" and cupy_available():
        devices.append("cuda")
    if "cuda" in devices and not cupy_available():
        parser.error("--device cuda: CuPy with a CUDA GPU is not available")
    for device in devices:
        bench_device(args, device)


if __name__ == "__main__":
    main()
