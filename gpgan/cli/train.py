"""``gpgan-train``: train a GAN from a YAML config into a run folder, or resume one.

Exit status: 0 when the run finished, 2 for a bad command line or config, 1 for other errors
(missing data, non-finite losses), 130 when interrupted (a checkpoint was saved; the message
says how to resume).
"""
import argparse
import os
import shlex
import sys

from gpgan.train.config import (
    RESUMABLE_CHANGES,
    ConfigError,
    apply_overrides,
    diff_configs,
    get_key,
    load_config,
    validate_config,
)

EPILOG = """\
examples:
  gpgan-train configs/quickstart.yaml
  gpgan-train configs/r1_cifar.yaml --set train.steps=200 --set data.root=~/data/cifar-10-batches-py
  gpgan-train configs/wgangp_cifar.yaml --device cuda --name first
  gpgan-train --resume experiments/quickstart/20240101-120000

On resume the config comes from the run folder; only train.steps (to grow the run),
train.stop_after and device may differ (via --set, --device, or a CONFIG that differs only
there). metrics.jsonl is cut back to the checkpoint's step, and the run continues exactly as the
uninterrupted run would have. Run `python -m gpgan.train.config` for every config key.

Ctrl-C (or SIGTERM) saves a checkpoint and exits with status 130. Exit status: 0 finished,
1 error (missing data, non-finite loss), 2 bad command line or config, 130 interrupted.
"""


def build_parser():
    p = argparse.ArgumentParser(
        prog="gpgan-train",
        description="Train a gradient-penalty GAN from a YAML config. Writes a run folder "
                    "<out>/<config name>/<name or timestamp>/ with config.yaml, manifest.json, "
                    "metrics.jsonl, TensorBoard events, samples/ and checkpoints/.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", nargs="?", metavar="CONFIG",
                   help="YAML config file (may extend another with `base: other.yaml`); optional "
                        "with --resume")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                   help="override a config key, e.g. --set train.steps=200 --set optim.critic.betas=0,0.9; "
                        "values are typed by the schema; repeatable")
    p.add_argument("--device", choices=["cpu", "cuda"],
                   help="shorthand for --set device=...; cuda needs CuPy (default: the config's, cpu)")
    p.add_argument("--out", default="experiments", metavar="DIR",
                   help="base folder of run folders (default: ./experiments)")
    p.add_argument("--name", metavar="NAME",
                   help="run folder name (default: a timestamp); refused if that run exists")
    p.add_argument("--resume", metavar="RUN_DIR",
                   help="continue the run in RUN_DIR from its latest checkpoint")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def _error(message, status=1):
    print(f"gpgan-train: error: {message}", file=sys.stderr)
    return status


def _fit(trainer, run):
    from gpgan.train.trainer import NonFiniteLossError, TrainingInterrupted

    resume = f"gpgan-train --resume {shlex.quote(run.path)}"
    try:
        summary = trainer.fit()
    except TrainingInterrupted as exc:
        print(f"\ngpgan-train: {exc}.\nResume with: {resume}", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        last = run.latest_checkpoint()
        where = f"step {last[0]}" if last else "the start"
        print(f"\ngpgan-train: stopped without saving a checkpoint; `{resume}` continues from {where}.",
              file=sys.stderr)
        return 130
    except NonFiniteLossError as exc:
        return _error(str(exc))
    final = ", ".join(f"{k}={v:.4g}" for k, v in summary["final"].items()
                      if isinstance(v, (int, float)) and not k.startswith(("lr/", "penalty/")))
    print(f"gpgan-train: finished {summary['steps']} steps in {summary['wall_time_s']:.1f} s: {run.path}"
          + (f"\n  {final}" if final else ""), file=sys.stderr)
    return 0


def _new_run(args, overrides):
    from gpgan.train.run import RunFolder
    from gpgan.train.trainer import Trainer

    config = load_config(args.config, overrides)
    name = os.path.splitext(os.path.basename(args.config))[0]
    if args.name is not None:
        try:  # a bad command line (exit 2), found before any work
            RunFolder.check_name_free(args.out, name, args.name)
        except FileExistsError as exc:
            raise ConfigError(f"--name {args.name}: {exc}") from None
    trainer = Trainer(config, None, quiet=args.quiet)  # data and models first: fail before writing
    run = RunFolder.create(args.out, name, args.name)
    trainer.run = run
    run.write_config(config)
    run.write_manifest(config)
    print(f"gpgan-train: run folder {run.path}", file=sys.stderr)
    return _fit(trainer, run)


def resolve_resume_config(saved, config_path=None, overrides=()):
    """The config a resumed run continues with, checked against the run's own config.

    Raises:
        ConfigError: naming every changed key other than train.steps (which may only grow),
            train.stop_after and device.
    """
    if config_path is not None:
        requested = load_config(config_path, overrides)
    else:
        base = apply_overrides(saved, [("train.stop_after", None)])
        requested = validate_config(apply_overrides(base, overrides), source="the run's config.yaml + --set")
    changed = [k for k in diff_configs(saved, requested) if k not in RESUMABLE_CHANGES]
    if changed:
        details = "; ".join(f"{k}: run has {_get(saved, k)!r}, requested {_get(requested, k)!r}" for k in changed)
        raise ConfigError(f"cannot resume with a changed config ({details}). Only "
                          f"{', '.join(RESUMABLE_CHANGES)} may change on resume (train.steps only up); "
                          "start a new run for anything else")
    if requested["train"]["steps"] < saved["train"]["steps"]:
        raise ConfigError(f"train.steps may only grow on resume: the run has {saved['train']['steps']}, "
                          f"requested {requested['train']['steps']}")
    return requested


def _get(config, key):
    try:
        return get_key(config, key)
    except (KeyError, TypeError):
        return None


def _resume(args, overrides):
    from gpgan.train.run import RunFolder
    from gpgan.train.trainer import Trainer

    run = RunFolder(args.resume)
    saved = run.read_config()
    config = resolve_resume_config(saved, args.config, overrides)
    if run.is_finished() and config["train"]["steps"] == saved["train"]["steps"]:
        print(f"gpgan-train: {run.path} already finished its {saved['train']['steps']} steps; "
              "pass --set train.steps=N (larger) to continue it", file=sys.stderr)
        return 0
    trainer = Trainer(config, run, quiet=args.quiet)
    last = run.latest_checkpoint()
    step = trainer.load_checkpoint(last[1]) if last else 0
    if last is None:
        print(f"gpgan-train: {run.path} has no checkpoint; starting it over from step 0", file=sys.stderr)
    run.truncate_metrics(step)
    if run.is_finished():
        os.remove(run.final_path)
    run.write_config(config)
    run.record_resume(step, config)
    print(f"gpgan-train: resuming {run.path} from step {step}", file=sys.stderr)
    return _fit(trainer, run)


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    overrides = list(args.overrides)
    if args.device:
        overrides.append(f"device={args.device}")
    if args.resume is None and args.config is None:
        parser.error("CONFIG is required (or --resume RUN_DIR)")
    if args.resume is not None and (args.name is not None):
        parser.error("--name cannot be combined with --resume (the run folder is RUN_DIR)")
    try:
        if args.resume is not None:
            return _resume(args, overrides)
        return _new_run(args, overrides)
    except ConfigError as exc:
        return _error(str(exc), 2)
    except KeyboardInterrupt:  # before training started (loading data, building models)
        print("\ngpgan-train: interrupted before training started; nothing to resume", file=sys.stderr)
        return 130
    except (FileNotFoundError, FileExistsError, RuntimeError, ValueError, TypeError) as exc:
        # Missing data, an unusable device, unknown model options, ...: say what, not a traceback.
        if os.environ.get("GPGAN_DEBUG"):
            raise
        return _error(f"{type(exc).__name__}: {exc}")


if __name__ == "__main__":
    sys.exit(main())
