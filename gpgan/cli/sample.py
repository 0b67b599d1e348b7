"""``gpgan-sample``: samples of a trained generator, from a run folder or one of its checkpoints:
an image grid (or rows of latent interpolations), a scatter plot of generated over real points for
2-D toy data, or many samples for other tools (an ``.npz`` file, or one PNG per image).

Exit status: 0 on success, 2 for a bad command line, 1 for other errors (a missing or damaged
run or checkpoint, an option the run's data do not allow).
"""
import argparse
import math
import os
import sys

import numpy

from gpgan.cli._process import configure
from gpgan.train.sampling import batches, generate, load_generator, resolve_source

EPILOG = """\
examples:
  gpgan-sample experiments/r1_cifar/run1 --out samples.png
  gpgan-sample experiments/r1_cifar/run1/checkpoints/ckpt_010000.npz --grid 4x8 --seed 3 --out s.png
  gpgan-sample experiments/r1_cifar/run1 --interpolate --grid 8x10 --out interp.png
  gpgan-sample experiments/r1_cifar/run1 --n 50000 --out samples.npz      (uint8 NHWC images)
  gpgan-sample experiments/r1_cifar/run1 --n 1000 --out-dir samples/      (one PNG per image)
  gpgan-sample experiments/quickstart/run1 --n 5000 --out points.png     (2-D data: scatter plot)
"""

GRID_EXTENSIONS = (".png", ".jpg", ".jpeg")
#: the most images one grid picture holds (a larger --n goes to .npz or --out-dir)
MAX_GRID = 10_000


def _out_path(text):
    ext = os.path.splitext(text)[1].lower()
    if ext not in GRID_EXTENSIONS + (".npz",):
        raise argparse.ArgumentTypeError(
            f"{text!r} has no accepted extension ({', '.join(GRID_EXTENSIONS + ('.npz',))}): a picture "
            "(.png, .jpg) or an .npz file of the samples")
    return text


def build_parser():
    p = argparse.ArgumentParser(
        prog="gpgan-sample",
        description="Draw samples from a trained generator: an image grid, rows of latent "
                    "interpolations, (2-D toy data) generated points over real points, or many "
                    "samples as an .npz file or a folder of PNGs.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("source", metavar="RUN_DIR_OR_CHECKPOINT",
                   help="a run folder (its newest readable checkpoint is used) or a checkpoints/ckpt_N.npz file")
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
    p.add_argument("--batch-size", type=int, default=500, metavar="B",
                   help="samples generated at once (default 500): memory stays bounded by one batch")
    out = p.add_mutually_exclusive_group(required=True)
    out.add_argument("--out", type=_out_path, metavar="FILE",
                     help="FILE.png (or .jpg): a grid / scatter plot; FILE.npz: the samples themselves "
                          "(images: uint8 (N, H, W, C) under 'images'; 2-D data: float32 (N, 2) under 'points')")
    out.add_argument("--out-dir", metavar="DIR", help="write one PNG per image into DIR (000000.png, ...)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
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


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.n is not None and args.n < 1:
        parser.error(f"--n must be at least 1, got {args.n}")
    if args.batch_size < 1:
        parser.error(f"--batch-size must be at least 1, got {args.batch_size}")
    if args.grid:
        try:
            parse_grid(args.grid)
        except ValueError as exc:
            parser.error(str(exc))
    problem = configure(argv)
    if problem:
        print(f"gpgan-sample: error: {problem}", file=sys.stderr)
        return 1
    try:
        return _main(args)
    except (OSError, ValueError, RuntimeError) as exc:
        if os.environ.get("GPGAN_DEBUG"):
            raise
        print(f"gpgan-sample: error: {args.source}: {exc}" if args.source not in str(exc)
              else f"gpgan-sample: error: {exc}", file=sys.stderr)
        return 1


def _progress(args, total):
    from tqdm import tqdm

    return tqdm(total=total, unit="sample", disable=True if args.quiet else None, desc="gpgan-sample")


def _main(args):
    from gpgan.data import is_toy

    run, checkpoint = resolve_source(args.source)
    generator, config, used_ema = load_generator(run, checkpoint, args.ema, args.device)
    rng = numpy.random.default_rng(args.seed)
    latent = int(generator.latent_dim)
    data = config["data"]
    many = args.out_dir is not None or args.out.lower().endswith(".npz")
    if is_toy(data["name"]):
        if args.interpolate or args.grid:
            raise ValueError("--interpolate and --grid need image data; this run trained on 2-D "
                             f"points ({data['name']}), which are drawn as a scatter plot")
        if args.out_dir is not None:
            raise ValueError(f"--out-dir writes one PNG per image; this run trained on 2-D points "
                             f"({data['name']}): use --out FILE.npz or FILE.png")
        written = _toy(args, generator, config, rng, latent, many)
    elif many:
        written = _many_images(args, generator, rng, latent)
    else:
        written = _grid(args, generator, rng, latent)
    print(f"gpgan-sample: wrote {written} (checkpoint {checkpoint}, {'EMA' if used_ema else 'raw'} weights)",
          file=sys.stderr)
    return 0


def _toy(args, generator, config, rng, latent, many):
    from gpgan.data.toy import make_toy
    from gpgan.viz import scatter_samples

    data = config["data"]
    n = args.n or config["train"]["eval_samples"]
    points = generate(generator, rng.standard_normal((n, latent)), args.device, args.batch_size)
    _make_parent(args.out)
    if many:
        from gpgan.files import atomic_write

        atomic_write(args.out, lambda f: numpy.savez(f, points=points.astype(numpy.float32)))
        return f"{args.out} ({n} points)"
    real = make_toy(data["name"], **data["options"]).sample(n, numpy.random.default_rng(args.seed + 1))
    scatter_samples(args.out, real, points, title=f"{data['name']}: {n} generated over {n} real")
    return args.out


def _grid(args, generator, rng, latent):
    from gpgan.viz import save_image_grid

    if args.grid:
        rows, cols = parse_grid(args.grid)
        n = rows * cols
    else:
        n = args.n or 64
        cols = int(math.ceil(math.sqrt(n)))
        rows = int(math.ceil(n / cols))
    if n > MAX_GRID:
        raise ValueError(f"--n {n} is too many images for one picture (at most {MAX_GRID:,}); write them with "
                         "--out FILE.npz or --out-dir DIR")
    if args.interpolate:
        if cols < 2:
            raise ValueError("--interpolate needs at least 2 columns")
        z0, z1 = rng.standard_normal((rows, latent)), rng.standard_normal((rows, latent))
        z = slerp(z0, z1, numpy.linspace(0.0, 1.0, cols)).reshape(rows * cols, latent)
    else:
        z = rng.standard_normal((n, latent))
    _make_parent(args.out)
    save_image_grid(args.out, generate(generator, z, args.device, args.batch_size), nrow=cols)
    return args.out


def _many_images(args, generator, rng, latent):
    """--out FILE.npz or --out-dir DIR: every image, as uint8, generated batch by batch."""
    from PIL import Image

    from gpgan.files import atomic_write
    from gpgan.data import to_uint8

    if args.interpolate or args.grid:
        raise ValueError("--interpolate and --grid make a picture: use --out FILE.png")
    n = args.n or 64
    z = rng.standard_normal((n, latent))
    images = None
    bar = _progress(args, n)
    try:
        done = 0
        for batch in batches(generator, z, args.device, args.batch_size):
            pixels = to_uint8(batch).transpose(0, 2, 3, 1)  # (B, H, W, C), as image files store them
            if args.out_dir is not None:
                os.makedirs(args.out_dir, exist_ok=True)
                for k, image in enumerate(pixels):
                    Image.fromarray(image.squeeze(-1) if image.shape[-1] == 1 else image).save(
                        os.path.join(args.out_dir, f"{done + k:06d}.png"))
            else:
                if images is None:
                    images = numpy.empty((n,) + pixels.shape[1:], dtype=numpy.uint8)
                images[done:done + len(pixels)] = pixels
            done += len(pixels)
            bar.update(len(pixels))
    finally:
        bar.close()
    if args.out_dir is not None:
        return f"{n} PNG files into {args.out_dir}"
    _make_parent(args.out)
    atomic_write(args.out, lambda f: numpy.savez(f, images=images))
    return f"{args.out} ({n} images, uint8 NHWC)"


def _make_parent(path):
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)


if __name__ == "__main__":
    sys.exit(main())
