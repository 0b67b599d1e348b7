#!/usr/bin/env python3
"""Images per second of Inception feature extraction: gpgan's, beside pytorch-fid's on the same machine.

    python scripts/bench_inception.py                          # gpgan only, CPU
    /work/compare-venv/bin/python scripts/bench_inception.py --torch --repeats 5
    python scripts/bench_inception.py --device cuda --n 500

Both take the same uint8 images (``--size`` square, default CIFAR's 32) in batches of
``--batch-size`` (default 50, pytorch-fid's) through the whole path FID uses: to [0, 1], bilinear to
299x299, the network to pool3. gpgan runs ``InceptionV3.features`` (which also computes the
logits); pytorch-fid runs ``InceptionV3([3])`` as its ``get_activations`` does (``torch.no_grad``,
the same thread count). Weights are random in the official layout (speed does not depend on them),
or ``--weights FILE``.

On a shared machine timings wander, so the two are timed alternately, ``--repeats`` times, after one
warm-up batch each; printed are each run's images/s, the best and the median, and the median of the
per-run ratios.
"""
import os
import statistics
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

import gpgan  # noqa: E402
from gpgan.cli._args import Parser  # noqa: E402
import numpy  # noqa: E402
from gpgan.backend import available_cores, device_description  # noqa: E402
from gpgan.metrics.inception import InceptionV3, load_state_dict, random_state_dict  # noqa: E402


def gpgan_runner(state, images, batch_size, device):
    net = InceptionV3(state, device=device)

    def run(batch):
        net.features(batch, batch_size=batch_size)
        if device == "cuda":
            import cupy

            cupy.cuda.Device().synchronize()
    return run


def torch_runner(state, batch_size, threads):
    import torch

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from compare_inception import pytorch_fid_model

    torch.set_num_threads(threads)
    model = pytorch_fid_model(state)

    def run(images):
        with torch.no_grad():
            for start in range(0, len(images), batch_size):
                x = torch.as_tensor(images[start:start + batch_size]).float() / 255
                model(x)[0].squeeze(3).squeeze(2).cpu().numpy()
    return run, f"PyTorch {torch.__version__}, {torch.get_num_threads()} threads"


def main():
    gpgan.configure_process(restart=True)  # as gpgan-eval does
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100, help="images per timed run")
    parser.add_argument("--batch-size", type=int, default=50)
    parser.add_argument("--size", type=int, default=32, help="input height and width (resized to 299)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--weights", help="a weights file (default: random weights)")
    parser.add_argument("--torch", action="store_true", help="also time pytorch-fid (CPU)")
    args = parser.parse_args()

    threads = available_cores()
    state = load_state_dict(args.weights) if args.weights else random_state_dict(0)
    images = numpy.random.default_rng(0).integers(0, 256, (args.n, 3, args.size, args.size), numpy.uint8)
    runners = {"gpgan": gpgan_runner(state, images, args.batch_size, args.device)}
    print(f"device: {device_description(args.device)}; NumPy {numpy.__version__}")
    if args.torch:
        runners["pytorch-fid"], what = torch_runner(state, args.batch_size, threads)
        print(f"pytorch-fid: {what}")
    print(f"{args.n} images of {args.size}x{args.size}, batch {args.batch_size}, {args.repeats} alternating runs")
    for run in runners.values():
        run(images[:args.batch_size])  # warm-up: allocations, lazy imports
    rates = {name: [] for name in runners}
    for _ in range(args.repeats):
        for name, run in runners.items():
            start = time.perf_counter()
            run(images)
            rates[name].append(args.n / (time.perf_counter() - start))
    for name, values in rates.items():
        print(f"{name:12s} images/s: best {max(values):.2f}, median {statistics.median(values):.2f} "
              f"(runs: {', '.join(f'{v:.2f}' for v in values)})")
    if args.torch:
        ratios = [a / b for a, b in zip(rates["gpgan"], rates["pytorch-fid"])]
        print(f"gpgan / pytorch-fid speed: median {statistics.median(ratios):.2f} "
              f"(per run: {', '.join(f'{r:.2f}' for r in ratios)})")


if __name__ == "__main__":
    main()
