"""Ablation studies: sweep files expanded into gpgan-train runs, run N at a time, and reported.

    sweep = load_sweep("configs/ablations/penalties_toy.yaml")   # validate (SweepError)
    specs = expand_runs(sweep)                                   # one RunSpec per run
    summary = run_sweep(sweep, out_dir, jobs=2)                  # skips / resumes / records failures
    write_report(sweep, out_dir)                                 # results.csv, REPORT.md, figures/

The trainer is started as a subprocess (``python -m gpgan.cli.train``, or the command in the
``GPGAN_TRAIN_CMD`` environment variable / the ``trainer_cmd`` argument), never imported.
"""
from gpgan.studies.sweep import IGNORED, RunSpec, Sweep, SweepError, expand_runs, load_sweep, parse_sweep
from gpgan.studies.runner import TRAINER_ENV, JobResult, SweepSummary, run_state, run_sweep, trainer_command
from gpgan.studies.results import RunRecord, collect_results, write_results_csv
from gpgan.studies.report import write_report

__all__ = [
    "IGNORED", "RunSpec", "Sweep", "SweepError", "expand_runs", "load_sweep", "parse_sweep",
    "TRAINER_ENV", "JobResult", "SweepSummary", "run_state", "run_sweep", "trainer_command",
    "RunRecord", "collect_results", "write_results_csv", "write_report",
]
