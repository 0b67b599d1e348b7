"""``gpgan-train``: train a GAN from a YAML config into a run folder, resume one, or fork a new run
from one of its checkpoints.

Exit status: 0 when the run finished (or --dry-run passed), 2 for a bad command line or config, 3
when it diverged (a non-finite loss, penalty or gradient: resuming meets the same step again on the
same machine and install), 1 for other errors (missing data, a full disk), 130 when interrupted (a
checkpoint was saved; the message says how to resume).
"""
import argparse
import os
import shlex
import sys
import traceback

from gpgan.cli._args import Parser
from gpgan.cli._console import Console
from gpgan.cli._process import configure
from gpgan.train.config import VOLATILE_KEYS, ConfigError, dump_config
from gpgan.train.run import EXIT_DIVERGED

EPILOG = """\
examples:
  gpgan-train configs/quickstart.yaml
  gpgan-train configs/r1_cifar.yaml --set train.steps=200 --set data.root=~/data/cifar-10-batches-py
  gpgan-train configs/wgangp_cifar.yaml --device cuda --name first
  gpgan-train configs/r1_cifar.yaml --dry-run --set train.steps=200
  gpgan-train --resume experiments/quickstart/20240101-120000
  gpgan-train --resume experiments/quickstart/run1/checkpoints/ckpt_002000.npz --name fork

On resume the config comes from the run folder; only train.steps (to grow the run),
train.patience, train.patience_min_delta, {volatile}
may differ (via --set, --device, or a CONFIG that differs only there). metrics.jsonl is cut
back to the checkpoint's step, and the run continues exactly as the uninterrupted run would
have. Resuming from a checkpoint file starts a new run folder from it (beside the original, or
under --out), leaving the original untouched. Run `python -m gpgan.train.config` for every
config key.

Under `mpiexec -n N` (or `srun --mpi=pmi2`) the processes train one run data-parallel: each takes
train.batch_size / N of every batch, gradients are averaged (MPI on the CPU, NCCL between GPUs:
one GPU per process), rank 0 alone writes the run folder, and --resume continues it under the
same N exactly. `mpiexec -n 2 gpgan-train configs/r1_cifar.yaml --device cuda`.

Ctrl-C (or SIGTERM) saves a checkpoint and exits with status 130. Exit status: 0 finished,
1 error (missing data, a full disk), 2 bad command line or config, 3 diverged (a non-finite loss
or gradient), 130 interrupted.
""".format(volatile=", ".join(VOLATILE_KEYS[:-1]) + " and " + VOLATILE_KEYS[-1])  # says RESUMABLE_CHANGES


def build_parser():
    p = Parser(
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
    p.add_argument("--out", metavar="DIR",
                   help="base folder of run folders (default: ./experiments; a fork: beside its run)")
    p.add_argument("--name", metavar="NAME",
                   help="run folder name, a plain name (default: a timestamp); refused if that run exists")
    p.add_argument("--resume", metavar="RUN_DIR_OR_CHECKPOINT",
                   help="continue the run in RUN_DIR from its newest readable checkpoint, or start a new "
                        "run (--name, --out) from RUN_DIR/checkpoints/ckpt_N.npz")
    p.add_argument("--dry-run", action="store_true",
                   help="print the resolved config and the run folder it would write, check the data (and for "
                        "image metrics the Inception weights and the reference) and that the folder can be made "
                        "there, and exit without training")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


class _Console(Console):
    """gpgan-train's messages: from rank 0 alone in a data-parallel run (every process meets the
    same outcome), except what one process meets alone."""

    comm = None

    def speaks(self):
        return self.comm is None or self.comm.is_root

    def error(self, message, status=1, alone=False):
        """Print ``gpgan-train: error: message`` (from every process when ``alone``, naming it)."""
        if alone and self.comm is not None and self.comm.size > 1:
            print(f"{self.prog}: rank {self.comm.rank} of {self.comm.size}: error: {message}", file=sys.stderr)
            return status
        return super().error(message, status)

    def text(self, exc):
        """:meth:`Console.text`, naming the process the exception came from when that was another one."""
        rank = getattr(exc, "rank", 0)
        message = Console.text(exc)
        return f"rank {rank}: {message}" if rank else message


_console = _Console("gpgan-train")


def _say(message):
    _console.say(message)


def _error(message, status=1):
    return _console.error(message, status)


def _resume_command(run_dir):
    """The command line that continues the run in ``run_dir``."""
    resume = f"gpgan-train --resume {shlex.quote(os.path.abspath(run_dir))}"
    comm = _console.comm
    if comm is not None and comm.size > 1:  # a data-parallel run resumes exactly under the same N
        resume = f"mpiexec -n {comm.size} {resume}"
    return resume


def _fit(launch):
    """Train; returns ``(exit status, alone)``: ``alone`` when this process stopped on its own (a
    second Ctrl-C), which in a data-parallel run must take the others down."""
    from gpgan.train.loop import NonFiniteLossError, RunWriteError, TrainingInterrupted

    for note in launch.notes:
        _say(note)
    if launch.trainer is None:
        return 0, False
    run = launch.run
    resume = _resume_command(run.path)
    comm = _console.comm
    try:
        summary = launch.trainer.fit()  # (which lets the run's lock go, however it ends)
    except TrainingInterrupted as exc:  # every process stops at the same step
        _console.say(f"{exc}.\nResume with: {resume}", after_progress=True)
        return 130, False
    except KeyboardInterrupt:
        last = run.latest_checkpoint()
        where = f"step {last[0]}" if last else "the start"
        _console.say(f"stopped without saving a checkpoint; `{resume}` continues from {where}.",
                     after_progress=True)
        return 130, True
    except NonFiniteLossError as exc:  # every process reads the same fault record
        return _error(str(exc), EXIT_DIVERGED), False
    except RunWriteError as exc:  # rank 0 alone writes: in a data-parallel run the others wait for it
        if comm is None or comm.size == 1:
            return _error(f"{exc}; free space and resume with: {resume}"), False
        return _console.error(f"{exc}; free space and resume with: {resume}", 1, alone=True), True
    final = ", ".join(f"{k}={v:.4g}" for k, v in summary["final"].items()
                      if isinstance(v, (int, float)) and not k.startswith(("lr/", "penalty/")))
    _say(f"finished {summary['steps']} steps in {summary['wall_time_s']:.1f} s: {run.path}"
         + (f"\n  {final}" if final else ""))
    return 0, False


def _dry_run(args, overrides, comm):
    from gpgan.train.launch import plan_run

    config, run, notes = plan_run(args.config, overrides, args.out or "experiments", args.name, comm=comm)
    if _console.speaks():
        sys.stdout.write(dump_config(config))
    for note in notes:
        _say(note)
    _say(f"dry run: the config is valid and the data are readable; a run would write {run.path}")
    return 0


def _launch(args, overrides, comm):
    from gpgan.train import launch

    if args.resume is None:
        return launch.start_run(args.config, overrides, args.out or "experiments", args.name, quiet=args.quiet,
                                comm=comm)
    if os.path.isfile(args.resume):
        return launch.fork_run(args.resume, args.config, overrides, out=args.out, name=args.name, quiet=args.quiet,
                               comm=comm)
    if (args.name is not None or args.out is not None) and os.path.isdir(args.resume):
        raise ConfigError("--name and --out start a new run: with --resume they need a checkpoint file "
                          "(RUN_DIR/checkpoints/ckpt_N.npz), not a run folder, which continues in place")
    return launch.resume_run(args.resume, args.config, overrides, quiet=args.quiet, comm=comm)


def _start(args, overrides, comm):
    """Check, set up (every failure here reaches every process) and train; returns ``(exit status,
    alone)`` as :func:`_fit`."""
    try:
        if args.dry_run:
            return _dry_run(args, overrides, comm), False
        launch = _launch(args, overrides, comm)
    except ConfigError as exc:
        return _error(_console.text(exc), 2), False
    except KeyboardInterrupt:  # before training started (loading data, models, a checkpoint)
        if args.resume is not None and not os.path.isfile(args.resume):
            _console.say(f"interrupted before training continued; resume again with: "
                         f"{_resume_command(args.resume)}", after_progress=True)
        else:  # a new run's folder is made all at once or not at all (RunFolder.initialize)
            _console.say("interrupted before training started; no run folder was made", after_progress=True)
        return 130, comm.size > 1
    except (OSError, RuntimeError, ValueError, TypeError) as exc:
        # Missing data, an unusable device, unknown model options, a damaged checkpoint...: say
        # what, not a traceback.
        if os.environ.get("GPGAN_DEBUG"):
            raise
        return _error(_console.text(exc)), False
    try:
        return _fit(launch)
    except (OSError, RuntimeError, ValueError, TypeError) as exc:
        # Met by this process alone (a disk error): in a data-parallel run the others wait for it.
        if comm.size == 1 and os.environ.get("GPGAN_DEBUG"):
            raise
        return _console.error(_console.text(exc), 1, alone=True), comm.size > 1
    except Exception as exc:  # a bug: a traceback, and in a data-parallel run the end of the others
        if comm.size == 1:
            raise
        traceback.print_exc()
        return _console.error(f"{type(exc).__name__}: {exc}", 1, alone=True), True


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    overrides = list(args.overrides)
    if args.device:
        overrides.append(f"device={args.device}")
    if args.resume is None and args.config is None:
        parser.error("CONFIG is required (or --resume RUN_DIR)")
    if args.dry_run and args.resume is not None:
        parser.error("--dry-run checks a new run: give CONFIG, not --resume")
    problem = configure(argv)
    if problem:
        return _error(problem)
    from gpgan.parallel import connect

    try:
        comm = connect()  # the processes of mpiexec / srun; one without them
    except RuntimeError as exc:
        return _error(str(exc))
    _console.comm = comm
    try:
        status, alone = _start(args, overrides, comm)
    finally:
        _console.comm = None
    if comm.size > 1:
        if alone:  # the others may be waiting for this process in a collective: end them too
            comm.abort(status)
        status = comm.finish(status)
    return status


if __name__ == "__main__":
    sys.exit(main())
