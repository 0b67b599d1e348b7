"""What data-parallel training costs: the gradient all-reduce and the per-step stop agreement
against the step's time, measured, and on paper for 8 and 64 GPUs.

    python scripts/bench_parallel.py CONFIG [--set key=value ...] [--steps 30]      # one process
    mpiexec -n 2 python scripts/bench_parallel.py CONFIG [--set ...] [--steps 30]   # two
    python scripts/bench_parallel.py --paper                                        # estimates

A measured run builds the trainer as gpgan-train would (nothing is written), trains ``--warmup``
steps, then times ``--steps`` generator steps: the whole step (inputs drawn and sliced, the maths,
the all-reduces), the time spent in the gradient all-reduces (one per update: critic_steps + 1
per step; with MPI on the CPU this includes waiting for the slower process) and the one-number
all-reduce that agrees on stops. Rank 0 prints milliseconds per step (median over steps, the
mean over processes) and the bytes reduced per step.

--paper counts each shipped CIFAR config's parameters and estimates the ring all-reduce time per
step, t = sum over updates of 2 (N - 1) / N * bytes / bandwidth + latency, for 8 GPUs joined by
NVLink and 64 GPUs (8 machines of 8) over InfiniBand, with the constants printed beside it.
"""
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from gpgan import configure_process  # noqa: E402
from gpgan.cli._args import Parser  # noqa: E402
from gpgan.parallel import connect  # noqa: E402
from gpgan.train.config import load_config  # noqa: E402
from gpgan.train.launch import make_trainer  # noqa: E402
from gpgan.train.run import RunFolder  # noqa: E402

CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")
# Seconds per generator step on one H100 (docs/benchmarks.md, training throughput), for the estimates' ratios.
H100_STEP = {"r1_cifar": 0.042, "wgangp_cifar": 0.155, "r1_resnet_cifar": 0.104, "wgangp_resnet_cifar": None}
# Alpha-beta model of NCCL's all-reduce: bus bandwidth (bytes/s) at messages of a few MB, and a
# latency per all-reduce (NCCL picks its tree algorithm where latency dominates: ~2 log2 N hops).
LINKS = {
    8: ("NVLink 4, one machine of 8 H100", 150e9, 2 * 3 * 3e-6),
    64: ("InfiniBand NDR 400 Gb/s per GPU, 8 machines of 8", 40e9, 2 * 6 * 6e-6),
}


def measure(args):
    comm = connect()
    config = load_config(args.config, [s for s in args.set])
    with tempfile.TemporaryDirectory() as folder:
        trainer = make_trainer(config, RunFolder(folder), quiet=True, comm=comm)
        spent = {"reduce": 0.0, "bytes": 0}
        if comm.size > 1:
            reduce = trainer.comm.all_reduce_sum

            def timed(array):
                t0 = time.perf_counter()
                reduce(array)
                spent["reduce"] += time.perf_counter() - t0
                spent["bytes"] += array.nbytes
                return array
            trainer.comm.all_reduce_sum = timed  # the step's communicator is this object
        for _ in range(args.warmup):
            trainer.train_step()
        steps, reduces, stops, sizes = [], [], [], []
        for _ in range(args.steps):
            spent["reduce"], spent["bytes"] = 0.0, 0
            t0 = time.perf_counter()
            trainer.train_step()
            t1 = time.perf_counter()
            comm.all_reduce_host([0], "max")  # what the loop's stop agreement costs
            t2 = time.perf_counter()
            steps.append(t2 - t0)
            reduces.append(spent["reduce"])
            stops.append(t2 - t1)
            sizes.append(spent["bytes"])
        transfer = _transfer_time(comm, trainer) if comm.size > 1 else 0.0
    mine = [statistics.median(x) for x in (steps, reduces, stops)]
    means = comm.mean({"step": mine[0], "reduce": mine[1], "stop": mine[2], "transfer": transfer})
    if comm.is_root:
        tc = config["train"]
        print(f"{os.path.basename(args.config)} {' '.join(args.set)}: {comm.size} process(es), "
              f"batch {tc['batch_size']} ({tc['batch_size'] // comm.size} each), {tc['critic_steps']} critic "
              f"step(s), {args.steps} steps after {args.warmup}")
        print(f"  step {1e3 * means['step']:.2f} ms; gradient all-reduce {1e3 * means['reduce']:.2f} ms "
              f"({100 * means['reduce'] / means['step']:.1f}%, {sizes[-1] / 2**20:.2f} MiB per step); "
              f"stop agreement {1e3 * means['stop']:.3f} ms ({100 * means['stop'] / means['step']:.2f}%)")
        if comm.size > 1:
            print(f"  the same all-reduces between processes that arrive together: {1e3 * means['transfer']:.2f} ms "
                  "per step (the rest of the all-reduce time above is waiting for the slower process)")


def _transfer_time(comm, trainer, repeats=30):
    """Median seconds per step of the step's gradient all-reduces alone (same sizes), each started
    right after a synchronizing one, so that no process waits for another's computation."""
    import numpy

    tc = trainer.tc
    sizes = [sum(p.data.size for p in trainer.parts.critic.parameters())] * tc["critic_steps"]
    sizes.append(sum(p.data.size for p in trainer.parts.generator.parameters()))
    buffers = [numpy.ones(n + 4, dtype=numpy.float32) for n in sizes]  # + the loss/penalty values
    times = []
    for _ in range(repeats):
        total = 0.0
        for buffer in buffers:
            comm.all_reduce_host([0], "max")
            t0 = time.perf_counter()
            trainer.comm.all_reduce_sum(buffer)
            total += time.perf_counter() - t0
        times.append(total)
    return statistics.median(times)


def paper():
    from gpgan.models import make_model

    print("ring all-reduce estimate per generator step (float32 gradients, one all-reduce per update)")
    for n, (link, bandwidth, latency) in LINKS.items():
        print(f"  N={n}: {link}: bus bandwidth {bandwidth / 1e9:.0f} GB/s, {1e6 * latency:.0f} us per all-reduce")
    for name in ("r1_cifar", "wgangp_cifar", "r1_resnet_cifar", "wgangp_resnet_cifar"):
        config = load_config(os.path.join(CONFIGS, name + ".yaml"))
        mc, tc = config["model"], config["train"]
        counts = {k: sum(p.data.size for p in make_model(mc[k], **mc[k + "_options"]).parameters())
                  for k in ("generator", "critic")}
        updates = [4 * counts["critic"]] * tc["critic_steps"] + [4 * counts["generator"]]
        line = (f"{name}: G {counts['generator'] / 1e6:.2f}M, D {counts['critic'] / 1e6:.2f}M parameters; "
                f"{len(updates)} all-reduces, {sum(updates) / 2**20:.1f} MiB per step")
        for n, (_, bandwidth, latency) in LINKS.items():
            t = sum(2 * (n - 1) / n * b / bandwidth + latency for b in updates)
            step = H100_STEP.get(name)
            ratio = f" = {100 * t / step:.0f}% of a {1e3 * step:.0f} ms H100 step" if step else ""
            line += f"\n    N={n}: {1e3 * t:.2f} ms{ratio}"
        print(line)


def main(argv=None):
    configure_process(restart=argv is None)  # as gpgan-train: each rank's share of the cores for BLAS
    p = Parser(description=__doc__.split("\n\n")[0])
    p.add_argument("config", nargs="?", help="a gpgan config (YAML)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override (repeatable)")
    p.add_argument("--steps", type=int, default=30, help="timed generator steps")
    p.add_argument("--warmup", type=int, default=5, help="untimed generator steps first")
    p.add_argument("--paper", action="store_true", help="print the estimates for 8 and 64 GPUs and exit")
    args = p.parse_args(argv)
    if args.paper:
        return paper()
    if args.config is None:
        p.error("give CONFIG (or --paper)")
    measure(args)


if __name__ == "__main__":
    main()
