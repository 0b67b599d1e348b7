"""``gpgan-sample``: samples of a trained generator, from a run folder or one of its checkpoints:
an image grid (or rows of latent interpolations), a scatter plot of generated over real points for
2-D toy data, or many samples for other tools (an ``.npz`` file, or one PNG per image).

Exit status: 0 on success, 2 for a bad command line, 1 for other errors (a missing or damaged
run or checkpoint, an option the run's data do not allow, samples or a picture too large for
memory), 130 when interrupted (nothing is written, unless the PNG files were being moved into an
existing --out-dir folder: the message says so).
"""
import argparse
import contextlib
import math
import os
import sys

import numpy

from gpgan.cli._args import Parser, truncation, whole_number
from gpgan.cli._console import Console
from gpgan.cli._process import configure, stopped_by_signals
from gpgan.files import make_folder, staged_folder
from gpgan.train.sampling import (batches, class_grid, draw_latents, generate, latent_batches, load_generator,
                                  resolve_source, skipped_note)

CONSOLE = Console("gpgan-sample")

EPILOG = """\
examples:
  gpgan-sample experiments/r1_cifar/run1 --out samples.png
  gpgan-sample experiments/r1_cifar/run1/checkpoints/ckpt_010000.npz --grid 4x8 --seed 3 --out s.png
  gpgan-sample experiments/r1_cifar/run1 --side-by-side --out raw_and_ema.png
  gpgan-sample experiments/r1_cifar/run1 --interpolate --grid 8x10 --out interp.png
  gpgan-sample experiments/r1_cifar/run1 --truncation 0.5 --out truncated.png  (BigGAN's truncation trick)
  gpgan-sample experiments/r1_cifar/run1 --n 50000 --out samples.npz      (uint8 NHWC images)
  gpgan-sample experiments/r1_cifar/run1 --n 1000 --out-dir samples/      (one PNG per image)
  gpgan-sample experiments/quickstart/run1 --n 5000 --out points.png     (2-D data: scatter plot)
  gpgan-sample experiments/r3gan_cifar/run1 --class 3 --out cats.png      (class-conditional: class 3;
                                                                          without --class, a row per class)
"""

GRID_EXTENSIONS = (".png", ".jpg", ".jpeg")
#: the most images one grid picture holds (a larger --n goes to .npz or --out-dir)
MAX_GRID = 10_000
#: the most pixels a side of a JPEG picture can have (libjpeg's JPEG_MAX_DIMENSION)
MAX_JPEG_SIDE = 65_500


def _out_path(text):
    ext = os.path.splitext(text)[1].lower()
    if ext not in GRID_EXTENSIONS + (".npz",):
        raise argparse.ArgumentTypeError(
            f"{text!r} has no accepted extension ({', '.join(GRID_EXTENSIONS + ('.npz',))}): a picture "
            "(.png, .jpg) or an .npz file of the samples")
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text!r} is a folder; give a file name (or use --out-dir)")
    return text


def _out_dir(text):
    if os.path.exists(text) and not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text!r} is a file, not a folder: give a folder (new or existing)")
    return text


def build_parser():
    p = Parser(
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
    p.add_argument("--seed", type=whole_number(0), default=0, help="seed of the latent noise, >= 0 (default 0)")
    p.add_argument("--truncation", type=truncation, metavar="T",
                   help="the truncation trick (BigGAN): every latent component drawn from the standard normal "
                        "within [-T, T] (values outside are drawn again); smaller T trades variety for "
                        "fidelity. Default: no truncation")
    p.add_argument("--class", dest="label", type=int, metavar="K", default=None,
                   help="class-conditional runs: every sample of class K (default: a grid has one row per "
                        "class; many samples take the classes in turn)")
    p.add_argument("--ema", action=argparse.BooleanOptionalAction, default=None,
                   help="use the generator's exponential moving average (default: when the run kept one)")
    p.add_argument("--side-by-side", action="store_true",
                   help="a picture of the raw weights' grid beside the EMA's, from the same noise "
                        "(needs a run that kept an EMA)")
    p.add_argument("--scale", type=whole_number(1), metavar="K",
                   help="enlarge a grid picture K times (nearest neighbour); default: to at least "
                        "512 pixels wide. Pictures are captioned with the step and EMA or raw weights")
    p.add_argument("--interpolate", action="store_true",
                   help="each row interpolates (spherically) between two random latents, left to right")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where to run the generator (cpu)")
    p.add_argument("--batch-size", type=int, default=500, metavar="B",
                   help="samples generated at once (default 500): with --out-dir, memory stays bounded by "
                        "one batch (an .npz file is made in memory: N images or points)")
    out = p.add_mutually_exclusive_group(required=True)
    out.add_argument("--out", type=_out_path, metavar="FILE",
                     help="FILE.png (or .jpg): a grid / scatter plot; FILE.npz: the samples themselves "
                          "(images: uint8 (N, H, W, C) under 'images'; 2-D data: float32 (N, 2) under 'points')")
    out.add_argument("--out-dir", type=_out_dir, metavar="DIR",
                     help="write one PNG per image into DIR (000000.png, ...); all of them or none")
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
            rows, cols = parse_grid(args.grid)
        except ValueError as exc:
            parser.error(str(exc))
        if args.n is not None and args.n != rows * cols:
            parser.error(f"--grid {args.grid} holds {rows * cols} images but --n is {args.n}: give one of them")
    if args.side_by_side and args.ema is not None:
        parser.error("--side-by-side shows both the raw and the EMA weights: drop --ema/--no-ema")
    pictures_only = [option for option, given in (("--interpolate", args.interpolate), ("--side-by-side",
                     args.side_by_side), (f"--grid {args.grid}", args.grid)) if given]
    if pictures_only and (args.out_dir is not None or args.out.lower().endswith(".npz")):
        given = f"--out-dir {args.out_dir}" if args.out_dir is not None else f"--out {args.out}"
        parser.error(f"{' and '.join(pictures_only)} make{'s' if len(pictures_only) == 1 else ''} a picture, but "
                     f"{given} writes the samples themselves: use --out FILE.png (or .jpg)")
    problem = configure(argv)
    if problem:
        return CONSOLE.error(problem)
    try:
        with stopped_by_signals():
            return _main(args)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM; the outputs are written all at once (staged, atomic): none was
        left = (f"some of the PNG files may be in {args.out_dir} already" if getattr(args, "moving", False)
                else "nothing written")
        CONSOLE.say(f"interrupted; {left}", after_progress=True)
        return 130
    except MemoryError:  # not the samples kept nor the picture (those name --n, --scale): one batch
        return CONSOLE.error(f"out of memory generating a batch of {args.batch_size:,} samples: give a smaller "
                             "--batch-size")
    except (OSError, ValueError, RuntimeError) as exc:
        if os.environ.get("GPGAN_DEBUG"):
            raise
        text = CONSOLE.text(exc)
        names_its_file = isinstance(exc, OSError) and exc.filename is not None  # the source or the output
        if not names_its_file and args.source not in text:
            text = f"{args.source}: {text}"
        return CONSOLE.error(text)


def _progress(args, total):
    from tqdm import tqdm

    return tqdm(total=total, unit="sample", disable=True if args.quiet else None, desc="gpgan-sample")


def _main(args):
    from gpgan.data import is_toy

    from gpgan.checkpoint import read_meta

    skipped = []
    run, checkpoint = resolve_source(args.source, skipped)
    note = skipped_note(skipped, checkpoint)
    if note:
        CONSOLE.warn(note)
    generator, config, used_ema = load_generator(run, checkpoint, True if args.side_by_side else args.ema,
                                                 args.device)
    args.step, args.used_ema = int(read_meta(checkpoint)["step"]), used_ema
    classes = getattr(generator, "num_classes", None)
    if args.label is not None:
        if classes is None:
            raise ValueError(f"--class {args.label}: this run is not class-conditional (model.conditional is false)")
        if not 0 <= args.label < classes:
            raise ValueError(f"--class {args.label} is not a class of this run; accepted: 0 to {classes - 1}")
    args.classes = classes
    rng = numpy.random.default_rng(args.seed)
    latent = int(generator.latent_dim)
    data = config["data"]
    many = args.out_dir is not None or args.out.lower().endswith(".npz")
    if args.side_by_side and is_toy(data["name"]):  # (with .npz or --out-dir: refused by main)
        raise ValueError("--side-by-side makes a picture of image grids: use --out FILE.png on an image run")
    if args.side_by_side:
        args.raw_generator = load_generator(run, checkpoint, False, args.device)[0]
    if is_toy(data["name"]):
        given = [option for option, on in (("--interpolate", args.interpolate), (f"--grid {args.grid}", args.grid))
                 if on]
        if given:
            raise ValueError(f"{' and '.join(given)} need{'s' if len(given) == 1 else ''} image data; this run "
                             f"trained on 2-D points ({data['name']}), which are drawn as a scatter plot")
        if args.out_dir is not None:
            raise ValueError(f"--out-dir writes one PNG per image; this run trained on 2-D points "
                             f"({data['name']}): use --out FILE.npz or FILE.png")
        written = _toy(args, generator, config, rng, latent, many)
    elif many:
        written = _many_images(args, generator, rng, latent)
    else:
        written = _grid(args, generator, rng, latent)
    weights = "raw and EMA" if args.side_by_side else "EMA" if used_ema else "raw"
    CONSOLE.say(f"wrote {written} (checkpoint {checkpoint}, step {args.step}, {weights} weights{_truncated(args)})")
    return 0


def _toy(args, generator, config, rng, latent, many):
    from gpgan.data.toy import make_toy
    from gpgan.viz import scatter_samples

    data = config["data"]
    n = args.n or config["train"]["eval_samples"]
    points, done = None, 0
    for batch in _samples(args, generator, rng, latent, n):
        if points is None:
            points = _all_samples(n, batch, "points")
        points[done:done + len(batch)] = batch
        done += len(batch)
    _make_parent(args.out)
    if many:
        from gpgan.files import atomic_write

        atomic_write(args.out, lambda f: numpy.savez(f, points=points.astype(numpy.float32)))
        return f"{args.out} ({n} points)"
    try:
        real = make_toy(data["name"], **data["options"]).sample(n, numpy.random.default_rng(args.seed + 1))
    except MemoryError:
        raise ValueError(f"--n {n:,}: {n:,} real points to draw beside them do not fit in memory; give a smaller "
                         "--n (or write the generated points alone with --out FILE.npz)") from None
    how = f"{'EMA' if args.used_ema else 'raw'} weights" + _truncated(args)
    scatter_samples(args.out, real, points,
                    title=f"{data['name']}, step {args.step}: {n} generated ({how}) over {n} real")
    return args.out


def _grid(args, generator, rng, latent):
    from gpgan.viz import grid_picture, save_picture
    from gpgan.viz.grid import PADDING

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
        n = rows * cols  # whole rows: each is one interpolation (--n 3 gives 2 rows of 2)
        z0, z1 = (draw_latents(rng, rows, latent, args.truncation) for _ in range(2))
        z = slerp(z0, z1, numpy.linspace(0.0, 1.0, cols)).reshape(rows * cols, latent)
    else:
        z = draw_latents(rng, n, latent, args.truncation)
    labels = None
    if args.label is not None:
        labels = numpy.full(n, args.label)
    elif args.classes is not None:
        if args.grid or args.interpolate:  # row r of class r mod K
            labels = numpy.arange(n) // cols % args.classes
        else:  # one row per class
            labels, cols = class_grid(n, args.classes)
    images = generate(generator, z, args.device, args.batch_size, labels)
    if args.side_by_side:
        panels = [("raw weights", generate(args.raw_generator, z, args.device, args.batch_size, labels)),
                  ("EMA weights", images)]
        caption = f"step {args.step}"
    else:
        panels = [(None, images)]
        caption = f"step {args.step}, {'EMA' if args.used_ema else 'raw'} weights"
    caption += _truncated(args)
    try:
        picture = grid_picture(panels, cols, caption=caption, scale=args.scale)
    except (MemoryError, ValueError):  # a large --scale (the images, at most MAX_GRID, are in memory
        # already); ValueError: more bytes than NumPy can address
        if args.scale is None:
            raise
        h, w = images.shape[2:]
        side = f"{(min(cols, n) * (w + PADDING) + PADDING) * args.scale:,} x " \
               f"{(-(-n // min(cols, n)) * (h + PADDING) + PADDING) * args.scale:,}"
        raise ValueError(f"--scale {args.scale}: a grid picture of {side} pixels does not fit in memory; give a "
                         "smaller --scale (without it, the picture is at least 512 pixels wide)") from None
    if args.out.lower().endswith((".jpg", ".jpeg")) and max(picture.shape[:2]) > MAX_JPEG_SIDE:
        smaller = "give a smaller --scale or " if args.scale and args.scale > 1 else ""
        raise ValueError(f"--out {args.out}: the picture is {picture.shape[1]:,} x {picture.shape[0]:,} pixels, "
                         f"more than a JPEG holds ({MAX_JPEG_SIDE:,} a side); {smaller}write a .png")
    _make_parent(args.out)
    save_picture(args.out, picture)
    return args.out


def _many_images(args, generator, rng, latent):
    """--out FILE.npz or --out-dir DIR: every image, as uint8, generated batch by batch."""
    from PIL import Image

    from gpgan.files import atomic_write
    from gpgan.data import to_uint8

    n = args.n or 64
    images = None
    with contextlib.ExitStack() as stack:
        staging = stack.enter_context(staged_folder(args.out_dir)) if args.out_dir is not None else None
        bar = stack.enter_context(contextlib.closing(_progress(args, n)))
        done = 0
        for batch in _samples(args, generator, rng, latent, n):
            pixels = to_uint8(batch).transpose(0, 2, 3, 1)  # (B, H, W, C), as image files store them
            if staging is not None:
                for k, image in enumerate(pixels):
                    path = os.path.join(staging, f"{done + k:06d}.png")
                    try:
                        Image.fromarray(image.squeeze(-1) if image.shape[-1] == 1 else image).save(path)
                    except OSError as exc:  # a full disk: name the file (staged_folder: its place in out_dir)
                        if exc.filename is None:
                            exc.filename = path
                        raise
            else:
                if images is None:
                    images = _all_samples(n, pixels, "images", out_dir=True)
                images[done:done + len(pixels)] = pixels
            done += len(pixels)
            bar.update(len(pixels))
        # staged_folder now moves the files into an existing out_dir one by one (a new one is
        # renamed at once): a Ctrl-C while it does leaves some there.
        args.moving = args.out_dir is not None and os.path.isdir(args.out_dir)
    if args.out_dir is not None:
        return f"{n} PNG files into {args.out_dir}"
    _make_parent(args.out)
    atomic_write(args.out, lambda f: numpy.savez(f, images=images))
    return f"{args.out} ({n} images, uint8 NHWC)"


def _samples(args, generator, rng, latent, n):
    """The generator's output for ``n`` samples, a batch (``--batch-size``) at a time: each batch's
    latents are drawn as it comes (:func:`~gpgan.train.sampling.latent_batches`, the same numbers
    whatever the batch size), so only one batch of them is in memory."""
    for z in latent_batches(rng, n, latent, args.batch_size, args.truncation):
        labels = None if args.label is None else numpy.full(len(z), args.label)
        yield from batches(generator, z, args.device, args.batch_size, labels)


def _all_samples(n, first, what, out_dir=False):
    """An empty array for ``n`` samples like those of the batch ``first``; when they do not fit
    in memory, a ValueError naming --n (and ``out_dir``: --out-dir, which keeps one batch)."""
    try:
        return numpy.empty((n,) + first.shape[1:], dtype=first.dtype)
    except (MemoryError, ValueError):  # ValueError: more bytes than NumPy can address
        size = n * first[0].nbytes / 1e9
        instead = ", or write one PNG per image with --out-dir DIR (memory: one --batch-size)" if out_dir else ""
        raise ValueError(f"--n {n:,}: {n:,} {what} ({size:,.1f} GB) do not fit in memory; give a smaller "
                         f"--n{instead}") from None


def _truncated(args):
    """", truncation T" for captions and messages; "" without --truncation."""
    return "" if args.truncation is None else f", truncation {args.truncation:g}"


def _make_parent(path):
    make_folder(os.path.dirname(os.path.abspath(path)))


if __name__ == "__main__":
    sys.exit(main())
