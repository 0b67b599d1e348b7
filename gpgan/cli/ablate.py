"""gpgan-ablate: run a sweep of gpgan-train runs and write its report.

    gpgan-ablate SWEEP.yaml [--jobs N] [--devices 0,1,...] [--out DIR] [--report-only] [--dry-run]
    gpgan-ablate SWEEP.yaml [--only AXIS=VALUE[,VALUE...] ...] [...]
    gpgan-ablate SWEEP.yaml --out DIR --export-records RECORDS_DIR
    gpgan-ablate SWEEP.yaml --out DIR --import-records RECORDS_DIR
    gpgan-ablate SWEEP.yaml --cluster ray [--ray-address HOST:PORT] [--devices ...] --out SHARED_DIR

Exit status: 0 when every run (with --only, every selected run) finished or diverged (nothing is
left to run; a run that diverged, gpgan-train's exit 3, is reported and not retried), 1 when some
run failed or is unfinished (the report is written either way), 2 for a bad sweep file or bad
arguments. With --export-records: 0 when the records were written (also when runs were left out),
1 when there are no runs or a file could not be written, 2 for a records folder it refuses; likewise
with --import-records (1 also when a sweep is running the runs of --out).
"""

import argparse
import os
import sys

from gpgan.cli._args import Parser, whole_number
from gpgan.cli._console import Console
from gpgan.cli._process import stopped_by_signals
from gpgan.files import check_folder_path, check_writable_folder_path
from gpgan.studies import SweepError, expand_runs, load_sweep, run_state, run_sweep, write_report
from gpgan.studies.records import RecordsError, export_records, import_records
from gpgan.studies.runner import TRAINER_ENV, OutInUseError, config_mismatches, plan_runs, stale_message
from gpgan.studies.sweep import override_args, select_runs
from gpgan.train.run import RunFolder


def _devices(text):
    devices = [d.strip() for d in text.split(",") if d.strip()]
    if not devices:
        raise argparse.ArgumentTypeError("--devices needs a comma-separated list of CUDA device ids, e.g. 0,1")
    for d in devices:
        if not d.isdigit():
            raise argparse.ArgumentTypeError(f"--devices: {d!r} is not a CUDA device id (a non-negative integer)")
    return devices


EPILOG = """\
sweep file (YAML; every key's type, default and accepted values: docs/studies.md, "Sweep file keys"):
  base: ../quickstart.yaml             config to start from (relative to the sweep file)
  axes:                                dotted config key -> values; every combination is a run
    penalty.type: [none, wgan_gp, r1]
    penalty.weight: [0.1, 1, 10]
    train.seed: [0, 1, 2]
  set: {train.steps: 1000}             fixed overrides (optional)
  metrics: [eval/modes, {eval/reverse_kl: min}]   reported metrics and direction (optional)
  seed_axis: train.seed                mean/std over this axis (default train.seed)
  x_axis: penalty.weight               figures: x axis (default penalty.weight) ...
  series_axis: penalty.type            ... one line per value (default penalty.type)
  ignore: [{when: {penalty.type: none}, axes: [penalty.weight]}]   axes that do not matter there:
                                       one run instead of one per weight (optional)
  exclude: [{penalty.type: r2, penalty.weight: 10}]   combinations not to run (optional)
  adjust: [{when: {penalty.weight: 10}, set: {train.steps: 40000}}]   overrides for the runs
                                       matching `when`, after all others (optional)
  out: experiments/ablations/NAME      default output folder (optional)
  title: ...                           REPORT.md heading (optional)
  variants: {pairing: {common: {}, paper: {loss: wgan, train.critic_steps: 5}}}
                                       named bundles of overrides; the name is an axis whose
                                       values are the bundles (axes: {pairing: [common, paper]})
  notes: |                             REPORT.md's "Findings" section, as written (optional)
    ...
  reference_scores: real.json          real images against the runs' reference, written by
                                       `gpgan-eval real cifar10:test --ref cifar10:train --out
                                       real.json` (relative to the sweep file; optional): the
                                       report's "real data" row and dashed lines in its figures

output folder: runs/<config>/<run>/ (gpgan-train run folders), logs/<run>/ (trainer stdout and
stderr), results.csv, REPORT.md, figures/. Finished runs are skipped, runs with a checkpoint are
resumed, failed runs are recorded and retried on the next invocation, except runs that diverged
(gpgan-train's exit 3: a non-finite loss or gradient), which would diverge again. A larger
train.steps in the sweep file extends its runs from their last checkpoint (not those train.patience
ended); any other config change is refused.
GPGAN_TRAIN_CMD replaces the trainer command (default: python -m gpgan.cli.train).
results.csv has a row per run: its axis values, its resolved value of every config key that a
variant or an adjust rule sets (e.g. loss, penalty.type), its final and best metrics, the step of
each best value, its steps, why it ended (train.patience or train.steps) and the machine it ran on.
Exit status: 0 when every run (with --only, every selected run) finished or diverged, 1 when some
run failed or is unfinished, 2 for a bad sweep file or bad arguments.

Several machines without a shared filesystem: each runs its part of the sweep (--only AXIS=VALUE,
e.g. --only setting=r1,r2), exports what it finished (--export-records DIR), and one machine adds
the others' records to its output folder (--import-records DIR): its sweep then skips those runs,
and its report covers them all.

--cluster ray: every run is a Ray task on an existing cluster (`ray start --head` on one node,
`ray start --address HEAD:PORT` on the others; pip install -e '.[ray]' on each), with one GPU
when --devices is given or the config asks for cuda (Ray picks the GPU), else one CPU. --out must
be a folder every node sees (a shared filesystem). Skipping, resuming, failures, Ctrl-C (tasks
cancelled, each trainer saves a checkpoint) and the report are as for a local sweep.
"""


def build_parser():
    p = Parser(
        prog="gpgan-ablate", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run every combination of a sweep file's axes as a gpgan-train run (skipping\n"
                    "finished runs, resuming unfinished ones) and write results.csv, REPORT.md and\n"
                    "figures/ into the output folder.")
    p.add_argument("sweep", help="sweep YAML file (base:, axes:, optional set:, metrics:, ...)")
    p.add_argument("--jobs", "-j", type=whole_number(1), default=None,
                   help="runs at a time (default: number of --devices, else 1; with --cluster ray: every "
                        "run, queued by Ray)")
    p.add_argument("--devices", type=_devices, default=None,
                   help="CUDA device ids, one per worker, e.g. 0,1 (each run gets CUDA_VISIBLE_DEVICES=<id> "
                        "and --device cuda); default: the config's device")
    p.add_argument("--out", default=None,
                   help="output folder (default: the sweep's out:, else experiments/ablations/<sweep stem>)")
    p.add_argument("--report-dir", default=None,
                   help="write results.csv, REPORT.md and figures/ here instead of the output folder "
                        "(e.g. a folder to commit, without the run folders' checkpoints)")
    p.add_argument("--cluster", choices=["local", "ray"], default="local",
                   help="where runs go: worker processes here (default), or Ray tasks on an existing Ray "
                        "cluster (--out must be on a filesystem every node sees)")
    p.add_argument("--ray-address", metavar="HOST:PORT", default=None,
                   help="the Ray cluster's head (default: $RAY_ADDRESS, else 'auto': a Ray cluster already "
                        "running on this machine, started with `ray start --head`; none is started)")
    p.add_argument("--report-only", action="store_true", help="rebuild the report from the runs on disk; run nothing")
    p.add_argument("--dry-run", action="store_true",
                   help="list the runs and what would be done with each, and check each run to start as "
                        "gpgan-train --dry-run does; run nothing")
    p.add_argument("--only", metavar="AXIS=VALUE[,VALUE...]", action="append", default=None,
                   help="run only the runs with these values of the axis (repeat for several axes: runs that "
                        "match all), e.g. --only setting=r1,r2 --only train.seed=0; the report still covers "
                        "every run on disk")
    p.add_argument("--export-records", metavar="DIR", default=None,
                   help="copy what the report reads of each finished, failed or diverged run (no checkpoints) "
                        "into DIR, replacing it whole; `--out DIR --report-only` then rebuilds the same report "
                        "anywhere. Runs nothing")
    p.add_argument("--import-records", metavar="DIR", default=None,
                   help="add the finished (and diverged) runs of records written by --export-records, e.g. on "
                        "another machine that ran some runs (--only), to --out where those runs have no folder "
                        "yet: the sweep then skips them and its report includes them. Runs nothing")
    return p


CONSOLE = Console("gpgan-ablate")


def _where(action, run_dir, steps):
    """Where a run to resume or extend stands, for the dry run's plan: " (from step 400 of
    1,000)" or " (from step 1,000 to 3,000 steps)"."""
    run = RunFolder(run_dir) if action in ("resume", "extend") else None
    latest = run.latest_checkpoint() if run is not None else None
    if latest is None:
        return ""
    if action == "extend":
        return f" (from step {latest[0]:,} to {steps:,} steps)"
    try:
        return f" (from step {latest[0]:,} of {run.read_config(validate=False)['train']['steps']:,})"
    except (OSError, ValueError, KeyError, TypeError):  # another trainer's folder, a damaged config
        return f" (from step {latest[0]:,})"


def _check_new_runs(sweep, plan, on_cuda):
    """Check each run the sweep would start as ``gpgan-train --dry-run`` checks a config (the
    schema, then what only building it finds: model options, the data, the device, the Inception
    weights and the metrics' reference), naming every run that would fail. Returns the exit
    status: 0, 2 where some run's config is refused, else 1 (as gpgan-train's)."""
    from gpgan.train.config import ConfigError
    from gpgan.train.launch import plan_run

    status = 0
    for spec, action, _, _ in plan:
        if action not in ("start", "restart"):
            continue  # resumed and extended runs were checked against their own configs above
        overrides = override_args(spec) + (["device=cuda"] if on_cuda else [])
        try:
            plan_run(str(sweep.base), overrides)  # (a run folder's path is computed, nothing is written)
        except ConfigError as exc:
            status = 2
            CONSOLE.error(f"run {spec.name}: {CONSOLE.text(exc)}")
        except (OSError, RuntimeError, ValueError, TypeError) as exc:
            status = status or 1
            CONSOLE.error(f"run {spec.name}: {CONSOLE.text(exc)}")
    if status == 0 and any(action in ("start", "restart") for _, action, _, _ in plan):
        CONSOLE.say("the runs to start pass gpgan-train's --dry-run checks")
    return status


def _no_runs(sweep, out):
    """Whether no run of ``sweep`` has a folder under ``out`` (e.g. a fresh clone: run folders
    are not in git)."""
    return all(run_state(out, spec.name)[0] == "absent" for spec in expand_runs(sweep))


def _export(sweep, out, dest):
    if _no_runs(sweep, out):
        return CONSOLE.error(f"no run of this sweep under {os.path.join(out, 'runs')}; nothing written ({dest} is "
                             "left as it is). Pass the --out the sweep was run with.")
    try:
        kept, left_out = export_records(sweep, out, dest)
    except RecordsError as exc:
        return CONSOLE.error(exc, 2)
    except OSError as exc:
        return CONSOLE.error(f"the records could not be written ({dest} is left as it was): {CONSOLE.text(exc)}")
    print(f"records: {len(kept)} runs in {dest}" + (f" ({len(left_out)} left out: still to run or to finish)" if left_out else ""))
    return 0


def _import(sweep, out, source):
    try:
        imported, passed_over = import_records(sweep, source, out)
    except RecordsError as exc:
        return CONSOLE.error(exc, 2)
    except OutInUseError as exc:
        return CONSOLE.error(exc)
    except OSError as exc:
        return CONSOLE.error(f"the records could not be imported (the run being copied was left out): "
                             f"{CONSOLE.text(exc)}")
    print(f"imported {len(imported)} run(s) into {out}" + (f": {', '.join(imported)}" if imported else ""))
    for name, why in passed_over:
        print(f"  not imported: {name}: {why}")
    return 0


def _warn_unlogged_metrics(sweep, records):
    """Name the sweep file's metrics that no finished run logged (a misspelt name gives empty
    columns otherwise)."""
    finished = [r for r in records if r.status == "finished"]
    if not finished:
        return
    logged = set().union(*(r.final.keys() for r in finished))
    missing = [name for name, _ in sweep.metrics if name not in logged]
    if missing:
        CONSOLE.warn(f"no finished run logged {', '.join(missing)} (metrics: in {sweep.path}); a run's "
                     "metrics.jsonl has the names it logs")


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        sweep = load_sweep(args.sweep)
    except SweepError as exc:
        return CONSOLE.error(exc, 2)
    out = args.out if args.out is not None else sweep.default_out()
    if args.ray_address is not None and args.cluster != "ray":
        return CONSOLE.error("--ray-address needs --cluster ray", 2)
    if args.cluster == "ray":
        jobs = args.jobs  # None: every run at once; Ray queues them by resources
        if args.devices:
            CONSOLE.warn("--cluster ray: one GPU per run, picked by Ray (the ids in --devices are not used)")
    else:
        jobs = args.jobs or (len(args.devices) if args.devices else 1)

    # A file where --out or --report-dir must be a folder, or a folder this process cannot write
    # in: said now (a dry run included), not after hours of runs. --report-only reads --out only
    # when the report goes elsewhere, and --export-records reads it only.
    written = ([] if args.export_records else [args.report_dir or out] if args.report_only
               else [out, args.report_dir])
    for folder in (out, args.report_dir):
        try:
            if folder is not None:
                (check_writable_folder_path if folder in written else check_folder_path)(folder)
        except OSError as exc:
            return CONSOLE.error(CONSOLE.text(exc))

    for flag, records in (("--export-records", args.export_records), ("--import-records", args.import_records)):
        if records is None:
            continue
        given = [other for other, value in (("--report-only", args.report_only), ("--dry-run", args.dry_run),
                                            ("--report-dir", args.report_dir), ("--jobs", args.jobs),
                                            ("--devices", args.devices), ("--cluster", args.cluster != "local"),
                                            ("--ray-address", args.ray_address), ("--only", args.only),
                                            ("--export-records", flag != "--export-records" and args.export_records),
                                            ("--import-records", flag != "--import-records" and args.import_records))
                 if value]
        if given:
            return CONSOLE.error(f"{flag} runs nothing and writes no report; it takes --out alone, "
                                 f"not {', '.join(given)}", 2)
        return _export(sweep, out, records) if flag == "--export-records" else _import(sweep, out, records)
    if args.dry_run and args.report_only:  # the dry run would have listed runs that --report-only does not run
        return CONSOLE.error("--dry-run lists the runs the sweep would run; --report-only runs none: give one of "
                             "them", 2)
    if args.only and args.report_only:
        return CONSOLE.error("--only selects the runs to run; --report-only runs none (the report covers every run "
                             "on disk)", 2)
    specs = expand_runs(sweep)
    if args.only:
        try:
            specs = select_runs(sweep, specs, args.only)
        except SweepError as exc:
            return CONSOLE.error(exc, 2)
    if args.dry_run:
        stale = config_mismatches(sweep, out, specs, allow_longer=True)
        if stale:
            return CONSOLE.error(stale_message(out, stale), 2)
        plan = plan_runs(sweep, out, specs)
        for spec, action, run_dir, steps in plan:
            print(f"{action:8s} {spec.name}{_where(action, run_dir, steps)}")
        print(f"{len(plan)} runs in {out}")
        elsewhere = ("--cluster ray" if args.cluster == "ray" else f"${TRAINER_ENV}" if os.environ.get(TRAINER_ENV)
                     else None)
        if elsewhere:  # another machine or install trains them: this one's data and devices say nothing
            CONSOLE.say(f"the runs to start are checked where they train ({elsewhere}), not here")
            return 0
        try:
            return _check_new_runs(sweep, plan, bool(args.devices))
        except KeyboardInterrupt:
            CONSOLE.say("interrupted; nothing was run or written", after_progress=True)
            return 130

    if not args.report_only:
        try:
            # SIGINT (even where it came in ignored: nohup gpgan-ablate ... &) and SIGTERM stop the
            # sweep as Ctrl-C does: its trainers checkpoint.
            with stopped_by_signals():
                summary = run_sweep(sweep, out, jobs=jobs, devices=args.devices, cluster=args.cluster,
                                    ray_address=args.ray_address, runs=specs)
        except SweepError as exc:  # run folders made with another config, an unreachable cluster
            return CONSOLE.error(exc, 2)
        except OutInUseError as exc:  # another sweep runs this --out
            return CONSOLE.error(exc)
        except OSError as exc:  # --out cannot be made or written (a file in the way, a full disk)
            return CONSOLE.error(CONSOLE.text(exc))
        except KeyboardInterrupt:
            CONSOLE.say("interrupted; the running trainers were stopped (with a checkpoint where they could). "
                        "Run the same command again to continue the sweep.", after_progress=True)
            return 130
        print(summary.line())
    else:
        if _no_runs(sweep, out):
            # Rebuilding would replace a committed report with an empty one; leave it as it is.
            return CONSOLE.error(f"no run of this sweep under {os.path.join(out, 'runs')}; nothing written (the report "
                                 f"in {args.report_dir or out} is left as it is). Run the sweep without --report-only "
                                 "first, or pass the --out it was run with.")
        stale = config_mismatches(sweep, out, allow_longer=True)  # runs to extend are the sweep's own
        if stale:
            CONSOLE.warn(stale_message(out, stale))
    try:
        records = write_report(sweep, out, args.report_dir)
    except OSError as exc:
        return CONSOLE.error(f"the report could not be written: {CONSOLE.text(exc)}")
    _warn_unlogged_metrics(sweep, records)
    failed = [r for r in records if r.status == "failed"]
    diverged = [r for r in records if r.status == "diverged"]
    incomplete = [r for r in records if r.status not in ("finished", "failed", "diverged")]
    finished = len(records) - len(failed) - len(diverged) - len(incomplete)
    print(f"report: {os.path.join(args.report_dir or out, 'REPORT.md')} ({finished} finished, {len(failed)} failed, "
          + (f"{len(diverged)} diverged, " if diverged else "") + f"{len(incomplete)} not finished)")
    for rec in failed + diverged:
        last = rec.error.splitlines()[-1] if rec.error else ""
        print(f"  {rec.status}: {rec.spec.name}: {last}", file=sys.stderr)
    selected = {spec.name for spec in specs}  # the exit status speaks of the runs --only selected
    return 1 if any(r.spec.name in selected for r in failed + incomplete) else 0


if __name__ == "__main__":
    sys.exit(main())
