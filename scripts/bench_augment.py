#!/usr/bin/env python3
"""Time the augmentations alone on a DCGAN-sized batch: what they add to a critic step (the real
and the fake batch augmented, forward only) and to a generator step (forward and backward through
the augmentation). Median process CPU time and minimum wall time over ``--repeats`` calls.

    python scripts/bench_augment.py                 # CPU, batch 64 of 3x32x32 float32
    python scripts/bench_augment.py --device cuda
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import gpgan  # noqa: E402
from gpgan.cli._args import Parser  # noqa: E402
import numpy  # noqa: E402
from gpgan.augment import ADA, DiffAugment  # noqa: E402
from gpgan.autograd import Variable, no_grad  # noqa: E402
from gpgan.backend import to_device  # noqa: E402


def timed(fn, repeats, sync):
    fn()
    sync()
    wall, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        sync()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return 1e3 * min(wall), 1e3 * float(numpy.median(cpu))


def main(argv=None):
    parser = Parser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=40)
    args = parser.parse_args(argv)
    rng = numpy.random.default_rng(0)
    host = rng.uniform(-1, 1, (args.batch, 3, 32, 32)).astype(numpy.float32)
    x = to_device(host, args.device)
    gy = to_device(rng.standard_normal(host.shape).astype(numpy.float32), args.device)
    if args.device == "cuda":
        import cupy

        sync = cupy.cuda.Device().synchronize
    else:
        def sync():
            return None
    augments = {"diffaugment": DiffAugment(), "ada p=0.5": ADA(p=0.5, mode="fixed", device=args.device),
                "ada p=0": ADA(p=0.0, mode="fixed", device=args.device)}
    print(f"batch {args.batch} of 3x32x32 float32 on {args.device}; ms: median CPU time (min wall), "
          f"{args.repeats} calls")
    for name, aug in augments.items():
        d1, d2 = ({k: to_device(v, args.device) for k, v in aug.draw(rng, host).items()} for _ in range(2))

        def critic():
            with no_grad():
                aug(x, d1)
                aug(x, d2)

        def generator():
            v = Variable(x, requires_grad=True)
            gpgan.grad(aug(v, d1), [v], grad_outputs=gy)

        (cw, cc), (gw, gc) = timed(critic, args.repeats, sync), timed(generator, args.repeats, sync)
        print(f"  {name:12s} critic step (real + fake, forward) {cc:6.1f} ({cw:.1f}); "
              f"generator step (forward + backward) {gc:6.1f} ({gw:.1f})")


if __name__ == "__main__":
    main()
