"""``gpgan-sample``: images (a grid, or rows of latent interpolations) or, for 2-D toy data, a
scatter plot of generated over real points, from a run folder or one of its checkpoints."""
import argparse
import math
import os
import sys

import numpy

EPILOG = """\
examples:
  gpgan-sample experiments/r1_cifar/run1 --out samples.png
  gpgan-sample experiments/r1_cifar/run1/checkpoints/ckpt_010000.npz --grid 4x8 --seed 3 --out s.png
  gpgan-sample experiments/r1_cifar/run1 --interpolate --grid 8x10 --out interp.png
  gpgan-sample experiments/quickstart/run1 --n 5000 --out points.png     (2-D data: scatter plot)
"""


def build_parser():
    p = argparse.ArgumentParser(
        prog="gpgan-sample",
        description="Draw samples from a trained generator: an image grid, rows of latent "
                    "interpolations, or (2-D toy data) generated points over real points.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("source", metavar="RUN_DIR_OR_CHECKPOINT",
                   help="a run folder (its latest checkpoint is used) or a checkpoints/ckpt_N.npz file")
    p.add_argument("--n", type=int, metavar="N",
                   help="number of samples (default 64 images; 2-D data: the run's train.eval_samples)")
    p.add_argument("--grid", metavar="RxC",
                   help="rows x columns of the image grid, e.g. 8x8 (sets --n to R*C); default: a "
                        "near-square grid")
    p.add_argument("--seed", type=int, default=0, help="seed of the latent noise (default 0)")
    p.add_argument("--ema", action=argparse.BooleanOptionalAction, default=None,
                   help="use the generator's exponential moving average (default: when the run kept one)")
    p.add_argument("--interpolate", action="store_true",
                   help="each row interpolates (spherically) between two random latents, left to right")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where to run the generator (cpu)")
    p.add_argument("--out", required=True, metavar="FILE.png", help="the PNG file to write")
    return p


def parse_grid(text):
    """``"8x8"`` -> (8, 8)."""
    try:
        rows, cols = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise ValueError(f"--grid {text!r}: expected ROWSxCOLS, e.g. 8x8") from None
    if rows < 1 or cols < 1:
        raise ValueError(f"--grid {text!r}: rows and columns must be positive")
    return rows, cols


def slerp(z0, z1, t):
    """Spherical interpolation between rows of ``z0`` and ``z1`` (n, d) at fractions ``t`` (k,):
    (n, k, d). Gaussian latents keep their typical norm along the path, unlike a straight line."""
    a = z0 / numpy.linalg.norm(z0, axis=1, keepdims=True)
    b = z1 / numpy.linalg.norm(z1, axis=1, keepdims=True)
    omega = numpy.arccos(numpy.clip((a * b).sum(axis=1), -1.0, 1.0))[:, None, None]  # (n, 1, 1)
    t = t[None, :, None]
    so = numpy.sin(omega)
    small = so < 1e-6
    safe = numpy.where(small, 1.0, so)
    w0 = numpy.where(small, 1.0 - t, numpy.sin((1.0 - t) * omega) / safe)
    w1 = numpy.where(small, t, numpy.sin(t * omega) / safe)
    return w0 * z0[:, None, :] + w1 * z1[:, None, :]


def resolve_source(source):
    """(run folder, checkpoint path) for a run folder or a checkpoint file."""
    from gpgan.train.run import RunFolder

    if os.path.isdir(source):
        run = RunFolder(source)
        last = run.latest_checkpoint()
        if last is None:
            raise FileNotFoundError(f"{run.checkpoints_dir} holds no checkpoint (ckpt_N.npz)")
        return run, last[1]
    if not os.path.isfile(source):
        raise FileNotFoundError(f"{source} is neither a run folder nor a checkpoint file")
    return RunFolder(os.path.dirname(os.path.dirname(os.path.abspath(source)))), source


def load_generator(run, checkpoint, use_ema=None, device="cpu"):
    """(generator in eval mode, config, whether the EMA weights are in it)."""
    from gpgan.checkpoint import load_checkpoint
    from gpgan.models import make_model
    from gpgan.optim import EMA

    config = run.read_config()
    mc = config["model"]
    generator = make_model(mc["generator"], **mc["generator_options"]).to(device)
    has_ema = config["train"]["ema"]["enabled"]
    if use_ema is None:
        use_ema = has_ema
    if use_ema and not has_ema:
        raise ValueError(f"the run {run.path} kept no EMA of the generator (train.ema.enabled is false); "
                         "use --no-ema")
    emas = {"generator": EMA(generator)} if use_ema else {}
    load_checkpoint(checkpoint, {"generator": generator}, {}, emas=emas)
    if use_ema:
        emas["generator"].copy_to(generator)
    generator.eval()
    return generator, config, use_ema


def _generate(generator, z, device):
    from gpgan.autograd import Variable, no_grad
    from gpgan.backend import to_device

    with no_grad():
        return generator(Variable(to_device(z.astype(numpy.float32), device))).numpy()


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.n is not None and args.n < 1:
        parser.error(f"--n must be at least 1, got {args.n}")
    try:
        return _main(args)
    except (FileNotFoundError, ValueError, RuntimeError) as exc:
        if os.environ.get("GPGAN_DEBUG"):
            raise
        print(f"gpgan-sample: error: {exc}", file=sys.stderr)
        return 1


def _main(args):
    from gpgan.data import is_toy
    from gpgan.viz import save_image_grid, scatter_plot

    run, checkpoint = resolve_source(args.source)
    generator, config, used_ema = load_generator(run, checkpoint, args.ema, args.device)
    rng = numpy.random.default_rng(args.seed)
    latent = int(generator.latent_dim)
    out_dir = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(out_dir, exist_ok=True)
    data = config["data"]

    if is_toy(data["name"]):
        if args.interpolate or args.grid:
            raise ValueError("--interpolate and --grid need image data; this run trained on 2-D "
                             f"points ({data['name']}), which are drawn as a scatter plot")
        from gpgan.data.toy import make_toy

        n = args.n or config["train"]["eval_samples"]
        points = _generate(generator, rng.standard_normal((n, latent)), args.device)
        real = make_toy(data["name"], **data["options"]).sample(n, numpy.random.default_rng(args.seed + 1))
        lo, hi = real.min(axis=0), real.max(axis=0)
        pad = 0.25 * (hi - lo)
        limits = ((lo[0] - pad[0], hi[0] + pad[0]), (lo[1] - pad[1], hi[1] + pad[1]))
        scatter_plot(args.out, [(real, (170, 170, 170), "real"), (points, (31, 119, 180), "generated")],
                     limits=limits, title=f"{data['name']}: {n} generated over {n} real")
    else:
        if args.grid:
            rows, cols = parse_grid(args.grid)
        else:
            n = args.n or 64
            if n < 1:
                raise ValueError(f"--n must be positive, got {n}")
            cols = int(math.ceil(math.sqrt(n)))
            rows = int(math.ceil(n / cols))
        if args.interpolate:
            if cols < 2:
                raise ValueError("--interpolate needs at least 2 columns")
            z0, z1 = rng.standard_normal((rows, latent)), rng.standard_normal((rows, latent))
            z = slerp(z0, z1, numpy.linspace(0.0, 1.0, cols)).reshape(rows * cols, latent)
        else:
            n = rows * cols if args.grid else (args.n or 64)
            z = rng.standard_normal((n, latent))
        save_image_grid(args.out, _generate(generator, z, args.device), nrow=cols)
    print(f"gpgan-sample: wrote {args.out} (checkpoint {checkpoint}, {'EMA' if used_ema else 'raw'} weights)",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
