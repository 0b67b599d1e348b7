"""Collecting a sweep's results from its run folders, and results.csv.

Everything here reads files only (a run folder's final.json, metrics.jsonl and config.yaml,
through :class:`gpgan.train.run.RunFolder`, OUT/logs/<name>/failure.json, and for a run without
a config.yaml the sweep's base config), so ``--report-only`` gives the same rows as the sweep that
produced the runs.
"""

import csv
import math
import os
from dataclasses import dataclass, field

from gpgan.data import is_toy
from gpgan.metrics import direction
from gpgan.schema import get_key, yaml_scalar
from gpgan.studies.runner import find_run_dir, longer_steps, read_failure
from gpgan.studies.sweep import IGNORED, RunSpec, expand_runs, format_value, run_config
from gpgan.train.run import RunFolder

__all__ = ["RunRecord", "best_point", "collect_results", "resolve_metrics", "write_results_csv", "csv_columns",
           "metric_value"]

STATUSES = ("finished", "failed", "diverged", "interrupted", "unfinished", "not run")


@dataclass
class RunRecord:
    """What a sweep knows about one run.

    ``status``: "finished", "failed" (last attempt exited non-zero; ``error`` holds the end of its
    stderr), "diverged" (last attempt stopped on a non-finite loss or gradient, gpgan-train's exit
    3: not retried), "interrupted" (last attempt stopped with exit 130 and left a checkpoint: the
    next sweep resumes it), "unfinished" (a run folder without a finished final.json and no record of
    an ended attempt: a run now running is unfinished, as each attempt clears the last one's record), "not run", or any other
    status a trainer wrote into final.json. ``final`` / ``best``: metric name -> value;
    ``best_step``: metric name -> the step of its best evaluation (the first, if tied); ``curves``:
    metric name -> [(step, value)] of every evaluation logged in metrics.jsonl; ``ended_by``: why
    a finished run ended, "train.patience" (its best metric stopped improving) or "train.steps".
    """

    spec: RunSpec
    status: str
    run_dir: str = None                          # None: no run folder
    final: dict = field(default_factory=dict)    # metric -> value
    best: dict = field(default_factory=dict)
    best_step: dict = field(default_factory=dict)
    steps: int = None
    ended_by: str = None
    wall_time_s: float = None
    eval_time_s: float = None                    # a finished run's image evaluations, where it timed them
    error: str = ""
    sample: str = None                           # samples/final.png, when there is one
    best_sample: str = None                      # the samples written at best_sample_step, when there are
    best_sample_step: int = None                 # the step of the best evaluation of the first metric
    image_samples: bool = False                  # the sample is a grid of images (not 2-D points)
    curves: dict = field(default_factory=dict)   # metric -> [(step, value)]
    machines: tuple = ()                         # the manifest's device_name, first start and resumes
    checkpoint_step: int = None                  # an unfinished run: its newest checkpoint's step
    target_steps: int = None                     # an unfinished run: train.steps of its config
    so_far: list = field(default_factory=list)   # an unfinished run: [(step, value)] of the first metric logged
    at_best: dict = field(default_factory=dict)  # metric -> its value at the first metric's best evaluation
    eval_samples: int = None                     # eval.samples of the run's config: samples per evaluation
    config: dict = field(default_factory=dict)   # key of Sweep.varied_keys -> the run's resolved value
    evaluations: list = field(default_factory=list)  # a finished run's gpgan-eval scores (eval_<step>.json)


def _aliases(name):
    """A metric may be spelled with or without its 'eval/' prefix in final.json."""
    if name.startswith("eval/"):
        return [name, name[len("eval/"):]]
    return [name, "eval/" + name]


def _number(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def metric_value(mapping, name):
    """The number ``mapping`` holds for metric ``name`` (spelled with or without 'eval/'), or None
    (absent, not a number, or ``mapping`` not a dict)."""
    return _lookup(mapping, name)


def _lookup(mapping, name):
    if not isinstance(mapping, dict):
        return None
    for key in _aliases(name):
        if key in mapping:
            return _number(mapping[key])
    return None


def _read_final(run_dir):
    return RunFolder(run_dir).read_final() if run_dir is not None else None


def _curve(rows, name):
    """(step, value) of every record that holds metric ``name``."""
    points = []
    for row in rows:
        v = _lookup(row, name)
        if v is not None and isinstance(row.get("step"), int):
            points.append((row["step"], v))
    return points


def best_point(curve, direction):
    """``(step, value)`` of the best finite value of ``curve`` (``[(step, value)]``) by
    ``direction`` ("min" or "max"; the first step if tied), or None when it has no finite value."""
    finite = [v for _, v in curve if math.isfinite(v)]
    if not finite:
        return None
    best = max(finite) if direction == "max" else min(finite)
    return next(step for step, v in curve if v == best), best


def resolve_metrics(sweep, out_dir):
    """The sweep's ``metrics``, or when none are listed every numeric 'eval/' metric found in a
    finished run's final.json (sorted by name), or failing that every numeric final metric."""
    if sweep.metrics:
        return list(sweep.metrics)
    names = set()
    for spec in expand_runs(sweep):
        final = _read_final(find_run_dir(out_dir, spec.name)) or {}
        if final.get("status") != "finished":
            continue
        for key, value in (final.get("final") or {}).items():
            if _number(value) is not None:
                names.add(key)
    chosen = sorted(n for n in names if n.startswith("eval/")) or sorted(names)
    return [(n, direction(n)) for n in chosen]


def _read_progress(rec, run, sweep_steps=None, metrics=()):
    """Where an unfinished run stands: its newest checkpoint's step, the steps it is to run
    (``sweep_steps`` where the sweep extends it, else its config's; left None where the folder
    does not say) and the evaluations of the first of ``metrics`` logged so far."""
    checkpoints = run.checkpoints()
    if checkpoints:
        rec.checkpoint_step = checkpoints[-1][0]
    if metrics:
        try:
            rec.so_far = _curve(run.read_metrics(), metrics[0][0])
        except (OSError, ValueError):  # no metrics.jsonl yet, or a damaged one: nothing to show
            rec.so_far = []
    if sweep_steps is not None:
        rec.target_steps = sweep_steps
        return
    try:
        rec.target_steps = run.read_config()["train"]["steps"]
    except (OSError, ValueError, KeyError, TypeError):  # another trainer's folder, a damaged config
        pass


def _resolved_values(sweep, spec, run_dir, keys):
    """key -> value of each of ``keys`` in the config run ``spec`` trained with: its folder's
    config.yaml, else (no folder yet, or another trainer's without one) the config the sweep asks
    for (:func:`~gpgan.studies.sweep.run_config`); keys neither has are left out."""
    config = None
    if run_dir is not None:
        try:
            config = RunFolder(run_dir).read_config()
        except (OSError, ValueError):  # no config.yaml (another trainer's folder), a damaged one
            pass
    if config is None:
        try:
            config = run_config(sweep, spec)
        except (OSError, ValueError):  # a base config edited into one the trainer refuses
            return {}
    values = {}
    for key in keys:
        try:
            values[key] = get_key(config, key)
        except (KeyError, TypeError):
            pass
    return values


def _machines(manifest):
    """The distinct ``device_name`` of a run's first start and its resumes, in that order."""
    names = []
    for entry in [manifest] + list(manifest.get("resumes") or []):
        name = entry.get("device_name") if isinstance(entry, dict) else None
        if isinstance(name, str) and name not in names:
            names.append(name)
    return tuple(names)


def _eval_seconds(rows):
    """The seconds a run's image evaluations took (``time_eval_features`` and ``time_eval_scores``
    of its records), or None where it did not time them (toy data, or gpgan before them)."""
    times = [row[k] for row in rows for k in ("time_eval_features", "time_eval_scores")
             if isinstance(row.get(k), (int, float)) and not isinstance(row.get(k), bool)]
    return math.fsum(times) if times else None


def collect_results(sweep, out_dir, metrics=None):
    """One record per run of the sweep, in sweep order."""
    out_dir = os.fspath(out_dir)
    metrics = resolve_metrics(sweep, out_dir) if metrics is None else metrics
    records = []
    for spec in expand_runs(sweep):
        run_dir = find_run_dir(out_dir, spec.name)
        final = _read_final(run_dir)
        failure = read_failure(out_dir, spec.name)
        rec = RunRecord(spec=spec, status="not run", run_dir=run_dir)
        # One read of the run's config: the keys variants set, and for a finished run its data
        # (whether its samples are images).
        keys = sweep.varied_keys + ["eval.samples"] + (
            ["data.name"] if final is not None and final.get("status") == "finished" else [])
        resolved = _resolved_values(sweep, spec, run_dir, keys)
        rec.config = {k: v for k, v in resolved.items() if k in sweep.varied_keys}
        samples = resolved.get("eval.samples")
        rec.eval_samples = samples if isinstance(samples, int) and not isinstance(samples, bool) else None
        if final is not None and final.get("status") == "finished":
            rec.status = "finished"
            rec.ended_by = "train.patience" if final.get("stop") else "train.steps"
        elif failure is not None:
            rec.status, rec.error = failure
        elif final is not None and isinstance(final.get("status"), str):
            rec.status = final["status"]
        elif run_dir is not None:
            rec.status = "unfinished"
        if final is not None:
            steps = final.get("steps")
            rec.steps = steps if isinstance(steps, int) and not isinstance(steps, bool) else None
            rec.wall_time_s = _number(final.get("wall_time_s"))
        folder = None if run_dir is None else RunFolder(run_dir)
        if folder is not None:
            rec.machines = _machines(folder.read_manifest())
            sweep_steps = longer_steps(sweep, spec, run_dir) if rec.status != "failed" else None
            if sweep_steps is not None and rec.status == "finished":
                rec.status, rec.ended_by = "unfinished", None  # the sweep asks more steps: not final
            if rec.status != "finished":
                _read_progress(rec, folder, sweep_steps, metrics)
        if folder is not None and rec.status == "finished":
            try:
                rows = folder.read_metrics()
            except ValueError as exc:  # a damaged metrics.jsonl: the final values still count
                rows, rec.error = [], str(exc)
            rec.eval_time_s = _eval_seconds(rows)
            for name, metric_direction in metrics:
                rec.curves[name] = _curve(rows, name)
                last = _lookup((final or {}).get("final"), name)
                if last is None and rec.curves[name]:
                    last = rec.curves[name][-1][1]
                point = best_point(rec.curves[name], metric_direction)
                best = point[1] if point is not None else _lookup((final or {}).get("best"), name)
                if last is not None:
                    rec.final[name] = last
                if best is not None:
                    rec.best[name] = best
                    rec.best_step[name] = point[0] if point is not None else None
            lead_step = rec.best_step.get(metrics[0][0]) if metrics else None  # the first metric's best
            _values_at_best(rec, metrics, lead_step)
            sample = folder.sample_path()
            rec.sample = sample if os.path.isfile(sample) else None
            _find_best_sample(rec, folder, lead_step)
            rec.evaluations = folder.read_evaluations()
            data_name = resolved.get("data.name")
            rec.image_samples = isinstance(data_name, str) and not is_toy(data_name)
        records.append(rec)
    return records


def _values_at_best(rec, metrics, step):
    """Each metric's value at ``step``, the run's best evaluation of the first metric (the
    evaluation whose weights best.npz holds when that metric is train.best_metric), where it was
    evaluated then."""
    if step is None:
        return
    for name, _ in metrics:
        value = dict(rec.curves.get(name, [])).get(step)
        if value is not None:
            rec.at_best[name] = value


def _find_best_sample(rec, folder, step):
    """The samples a finished run wrote at ``step``, its best evaluation of the first metric:
    final.png when that was the last step, else samples/step_N.png if the sample interval hit it."""
    if step is None:
        return
    rec.best_sample_step = step
    if step == rec.steps:
        rec.best_sample = rec.sample
    else:
        path = folder.sample_path(step)
        rec.best_sample = path if os.path.isfile(path) else None


def _samples_column(sweep):
    """Whether results.csv has a column of its own for eval.samples (not when an axis or a variant
    already gives it one)."""
    return "eval.samples" not in list(sweep.axes) + sweep.varied_keys


def csv_columns(sweep, metrics):
    """results.csv's header: the run, its status, its axis values, its values of the keys variants
    and adjust rules set (:attr:`~gpgan.studies.sweep.Sweep.varied_keys`), the metrics, then the
    samples each evaluation scored (eval.samples), steps, how the run ended, wall time, the machine
    it ran on, folder, error."""
    return (["run", "status"] + list(sweep.axes) + sweep.varied_keys + [f"final/{m}" for m, _ in metrics]
            + [f"best/{m}" for m, _ in metrics] + [f"best_step/{m}" for m, _ in metrics]
            + ["eval.samples"] * _samples_column(sweep)
            + ["steps", "ended_by", "wall_time_s", "machine", "run_dir", "error"])


def _cell(value):
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _config_cell(config, key):
    """A resolved config value as results.csv shows it: as axis values are (``null``, ``true``,
    ``0.1``, ``[0.0,0.9]``), a mapping as YAML flow text; empty when the run's config lacks it."""
    if key not in config:
        return ""
    value = config[key]
    return yaml_scalar(value) if isinstance(value, dict) else format_value(value)


def write_results_csv(path, sweep, records, metrics, out_dir):
    """results.csv: one row per run (axes, the resolved values of the keys variants and adjust
    rules set, final and best metrics, samples per evaluation, steps, wall time, the machines it
    ran on (its manifest's device names: the first start's, then any other a resume ran on; "; "
    between them), status, run folder relative to the sweep's ``out_dir``, and the error of a
    failed or interrupted run). The run folders are named
    relative to ``out_dir``, not to the folder results.csv is in, so that a report kept apart from
    its runs (``--report-dir``, e.g. committed) has the same results.csv wherever it lives, and the
    same from the runs' records (a ``runs`` folder that is a link elsewhere is still named ``runs``)."""
    base = os.path.abspath(out_dir)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(csv_columns(sweep, metrics))
        for rec in records:
            axes = ["" if rec.spec.values[k] is IGNORED else format_value(rec.spec.values[k]) for k in sweep.axes]
            run_dir = ""
            if rec.run_dir is not None:
                run_dir = os.path.relpath(os.path.abspath(rec.run_dir), base).replace(os.sep, "/")
            writer.writerow(
                [rec.spec.name, rec.status] + axes + [_config_cell(rec.config, k) for k in sweep.varied_keys]
                + [_cell(rec.final.get(m)) for m, _ in metrics]
                + [_cell(rec.best.get(m)) for m, _ in metrics] + [_cell(rec.best_step.get(m)) for m, _ in metrics]
                + [_cell(rec.eval_samples)] * _samples_column(sweep)
                + [_cell(rec.steps), rec.ended_by or "", _cell(rec.wall_time_s), "; ".join(rec.machines), run_dir,
                   rec.error]
            )
