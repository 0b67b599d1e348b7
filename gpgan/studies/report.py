"""The sweep report: results.csv, REPORT.md and figures/ in the sweep's output folder.

The report is a pure function of the run folders (no clock, no absolute paths), so rebuilding it
with ``--report-only`` reproduces REPORT.md byte for byte.
"""
import glob
import math
import os

from gpgan.files import make_folder
from gpgan.metrics.images import DC_K, PR_K
from gpgan.studies.figures import IMAGE_TILE, TILE, metric_figure, sample_tiles, slug
from gpgan.studies.results import best_point, collect_results, metric_value, resolve_metrics, write_results_csv
from gpgan.studies.statistics import TREND_FRACTION, curve_tails, summarize
from gpgan.studies.sweep import IGNORED, expand_runs, format_value, run_config
from gpgan.viz import curves_plot

__all__ = ["write_report"]

ARROW = {"max": "↑", "min": "↓"}


# ----------------------------------------------------------------------------------------------
# formatting

def _num(v):
    if v is None:
        return "n/a"
    if math.isnan(v):
        return "nan"
    return f"{v:.4g}"


def _cell(stat):
    mean, std, n = stat
    if n == 0:
        return "n/a"
    return _num(mean) if std is None else f"{_num(mean)} ± {std:.2g}"


def _val(v):
    return "(any)" if v is IGNORED else format_value(v).replace("|", "\\|")


def _describe(values):
    return ", ".join(f"{k}={_val(v)}" for k, v in values.items())


def _table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _panel_axes(sweep):
    return [k for k in sweep.setting_axes if k not in (sweep.x_axis, sweep.series_axis)]


def _panels(sweep, stats):
    """[(panel values dict, settings in it)] in sweep order; one panel when no other axes."""
    keys = _panel_axes(sweep)
    panels = {}
    for st in stats:
        pv = {k: st.values[k] for k in keys}
        ident = tuple(format_value(v) for v in pv.values())
        panels.setdefault(ident, (pv, []))[1].append(st)
    return list(panels.values())


def _panel_slug(sweep, pv):
    return "".join(f"__{slug(k.rsplit('.', 1)[-1])}-{slug(format_value(v))}" for k, v in pv.items())


# ----------------------------------------------------------------------------------------------
# the real-data floor (reference_scores)

REAL_LABEL = "real data"


def _real_references(sweep, metric):
    """A figure's reference lines for ``metric``: the value of the ``reference_scores`` file,
    when there is one and it holds that metric."""
    value = None if sweep.reference_scores is None else metric_value(sweep.reference_scores["scores"], metric)
    return [] if value is None else [(f"{REAL_LABEL} ({sweep.reference_scores['images']:,} images)", value)]


def _dashed_text(references):
    """A figure caption's part that names its dashed reference line ("; dashed: real data (N
    images), value"), or "" when it has none."""
    return f"; dashed: {references[0][0]}, {_num(references[0][1])}" if references else ""


def _real_row(sweep, metrics, trailing=0):
    """The real data's row of a results table: its label, its number of images as ``n``, its
    value of each metric ("n/a" where the file has none), and ``trailing`` empty cells."""
    floor = sweep.reference_scores
    label = [f"**{REAL_LABEL}**"] + [""] * (len(sweep.setting_axes) - 1)
    values = [metric_value(floor["scores"], m) for m, _ in metrics]
    cells = ["n/a" if v is None else _num(v) for v in values]
    return label + [f"{floor['images']:,} images"] + cells + [""] * trailing


def _real_line(sweep, report_dir, config):
    """What the real data's row is, with a link to its file (relative to the report folder);
    ``config``: the first run's (:func:`_first_config`), or None."""
    floor, path = sweep.reference_scores, sweep.reference_scores_path
    link = os.path.relpath(os.path.realpath(path), os.path.realpath(report_dir)).replace(os.sep, "/")
    fewer = ""
    samples = None if config is None else _evaluated_samples(config)
    if samples is not None and isinstance(floor.get("images"), int) and floor["images"] < samples:
        fewer = (f" FID from fewer images reads higher: the floor's {floor['images']:,} images overstate it "
                 f"against the runs' {samples:,} samples; precision and recall compare equal numbers on both sides, "
                 "so their neighbourhoods differ too.")
    return (f"**{REAL_LABEL}**: the real-data floor, {floor['source']} against {floor['reference']} "
            f"([{os.path.basename(path)}]({link}), written by `gpgan-eval real`): how far real images are from the "
            f"reference by the same metrics; dashed lines in the figures.{fewer}")


# ----------------------------------------------------------------------------------------------
# figures

def _figures(sweep, out_dir, panels, metrics):
    """Write figures/*.png; returns [(panel heading, [(caption, relative path)])]."""
    fig_dir = os.path.join(out_dir, "figures")
    os.makedirs(fig_dir, exist_ok=True)
    for old in glob.glob(os.path.join(glob.escape(fig_dir), "*.png")) + glob.glob(
            os.path.join(glob.escape(fig_dir), "curves", "*.png")):
        os.remove(old)  # figures of an earlier report (e.g. of a metric no longer listed)
    x_values = sweep.axes.get(sweep.x_axis, []) if sweep.x_axis else []
    series_values = sweep.axes.get(sweep.series_axis, [None]) if sweep.series_axis else [None]
    out = []
    for pv, settings in panels:
        heading = _describe(pv) if pv else "all settings"
        suffix = _panel_slug(sweep, pv)
        items = []
        for metric, direction in metrics:
            points = []
            for st in settings:
                mean, std, n = st.final[metric]
                if n == 0:
                    continue
                s = st.values.get(sweep.series_axis) if sweep.series_axis else None
                x = st.values.get(sweep.x_axis, IGNORED) if sweep.x_axis else IGNORED
                points.append((s, x, mean, std))
            rel = f"figures/{slug(metric)}{suffix}.png"
            title = f"{metric}, {heading}" if pv else metric
            caption = f"{metric} (final, mean ± std over seeds)"
            off_scale = [", ".join(_val(v) for k, v in st.values.items() if k not in pv and v is not IGNORED)
                         + f" ({_num(st.final[metric][0])})"
                         for st in settings if st.final[metric][2] > 0 and not math.isfinite(st.final[metric][0])]
            if off_scale:  # e.g. a reverse KL of inf: marked in a band at the plot's edge, named here
                caption += "; marked at the edge (mean not finite): " + "; ".join(off_scale)
            references = _real_references(sweep, metric)
            real = _dashed_text(references)
            if metric_figure(os.path.join(out_dir, rel), points, sweep.x_axis, sweep.series_axis, x_values,
                             metric, direction, title, references):
                items.append((caption + real, rel))
            curves = _curve_groups(sweep, settings, metric)
            if curves:
                rel = f"figures/curves/{slug(metric)}{suffix}.png"
                curves_plot(os.path.join(out_dir, rel), curves, "generator step", metric, title=f"{title}, during training",
                            ncols=min(4, len(curves)), references=references)
                by = f", one panel per {sweep.series_axis}" if sweep.series_axis else ""
                tails = any(line[4] for _, lines in curves for line in lines)
                dotted = "; dotted: a seed's evaluations past the steps every seed evaluated" if tails else ""
                items.append((f"{metric} against the step (mean ± std over seeds{by}; non-finite means left out"
                              f"{dotted}{real})", rel))

        # Sample tiles: rows = series values, columns = x values (first finished seed of each).
        # The samples at each run's best evaluation come second, where some run ended past it.
        first = metrics[0][0] if metrics else None
        for kind in ("final", "best"):
            if kind == "best" and not any(r.best_sample not in (None, r.sample) for st in settings
                                          for r in st.finished):
                continue
            rel = f"figures/samples{'' if kind == 'final' else '_best'}{suffix}.png"
            what = "final samples" if kind == "final" else f"samples at each run's best {first}"
            if _sample_tile(sweep, settings, os.path.join(out_dir, rel), kind, f"{what}, {heading}" if pv else what,
                            x_values, series_values, pv):
                items.append((f"{what} per setting", rel))
        out.append((heading, items))
    return out


def _incomplete(records):
    """The runs that may still go on: neither finished nor ended badly (failed, diverged)."""
    return [r for r in records if r.status not in ("finished",) + ENDED_BADLY]


def _so_far_figure(sweep, report_dir, records, metrics):
    """figures/curves/so_far_<metric>.png: the first metric's evaluations so far of every incomplete
    run that has two or more (one line per run, labelled by its name), for a sweep still under way.
    Returns (caption, relative path), or None where there is no such run."""
    lines = [(r.spec.name, [s for s, _ in r.so_far], [v for _, v in r.so_far], None)
             for r in _incomplete(records) if len(r.so_far) >= 2]
    if not metrics or not lines:
        return None
    metric = metrics[0][0]
    references = _real_references(sweep, metric)
    rel = f"figures/curves/so_far_{slug(metric)}.png"
    curves_plot(os.path.join(report_dir, rel), [("incomplete runs", lines)], "generator step", metric,
                title=f"{metric} so far", ncols=1, references=references)
    real = _dashed_text(references)
    return f"{metric} so far of the incomplete runs (they may still change; one line per run{real})", rel


def _sample_tile(sweep, settings, path, kind, title, x_values, series_values, pv):
    """One tile of each setting's samples (rows: series values, columns: x values; the first
    finished seed of each setting): ``kind`` "final" (samples/final.png) or "best" (the samples
    written at the run's best evaluation of the report's first metric, labelled with its step).
    Returns False when no run has such samples."""
    picture = "sample" if kind == "final" else "best_sample"  # the RunRecord field it shows
    cells, images = [], False
    for st in settings:
        done = [r for r in st.finished if getattr(r, picture) is not None]
        if not done:
            continue
        rec = done[0]
        s = st.values.get(sweep.series_axis) if sweep.series_axis else None
        x = st.values.get(sweep.x_axis, IGNORED) if sweep.x_axis else IGNORED
        row = next(i for i, v in enumerate(series_values) if format_value(v) == format_value(s))
        if x is IGNORED or not x_values:
            col = 0 if x_values else sum(1 for c in cells if c[0] == row)
        else:
            col = next(i for i, v in enumerate(x_values) if format_value(v) == format_value(x))
        label = ", ".join(_val(v) for k, v in st.values.items() if k not in pv and v is not IGNORED)
        if sweep.seed_axis is not None:
            label += f" (seed {format_value(rec.spec.seed)})"
        if kind == "best":
            label += f", step {rec.best_sample_step:,}"
        cells.append((row, col, label, getattr(rec, picture)))
        images = images or rec.image_samples
    if not cells:
        return False
    # Drop rows/columns with no image so the tile stays compact.
    rows = sorted({c[0] for c in cells})
    cols = sorted({c[1] for c in cells})
    cells = [(rows.index(r), cols.index(c), lab, p) for r, c, lab, p in cells]
    return sample_tiles(path, cells, title=title, tile=IMAGE_TILE if images else TILE)


#: The statuses of runs that ended without finishing (the report's Failures).
ENDED_BADLY = ("failed", "diverged")


def _trend_cell(trend):
    return "n/a" if trend is None else f"{_num(trend[0])} ({trend[1]:+.2g})"


def _curve_groups(sweep, settings, metric):
    """curves_plot's groups for one panel: one group per series value, one line per x value, with
    the tails of seeds that ran past the steps every seed evaluated."""
    groups = {}
    for st in settings:
        stats = st.curves[metric]
        if stats is None:
            continue
        s = format_value(st.values.get(sweep.series_axis)) if sweep.series_axis else "all"
        x = st.values.get(sweep.x_axis, IGNORED) if sweep.x_axis else IGNORED
        label = f"{sweep.x_axis}={_val(x)}" if sweep.x_axis else "mean"
        groups.setdefault(s, []).append((label, *stats, curve_tails(st.records, metric, stats[0][-1])))
    return list(groups.items())


# ----------------------------------------------------------------------------------------------
# REPORT.md

def _best_lines(panels, metrics, which="final"):
    """The leading setting per metric (and panel) by the mean ``which`` value, "final" or "best"."""
    lines = []
    for pv, settings in panels:
        for metric, direction in metrics:
            values = [getattr(st, which)[metric] for st in settings]
            scored = [(v[0], i, st) for i, (st, v) in enumerate(zip(settings, values))
                      if v[2] > 0 and not math.isnan(v[0])]
            if not scored:
                continue
            sign = -1 if direction == "max" else 1
            scored.sort(key=lambda t: (sign * t[0], t[1]))
            top = scored[0][0]
            # Settings whose mean equals the best one: naming only the first would crown an
            # arbitrary winner (e.g. every penalty covers all 8 modes of the ring).
            tied = [st for value, _, st in scored if value == top]
            st = tied[0]
            rest = {k: v for k, v in st.values.items() if k not in pv}
            where = f" ({_describe(pv)})" if pv else ""
            ties = ""
            if len(tied) > 1:
                others = tied[1:]
                ties = f" (tied with {len(others)} other setting{'s' if len(others) > 1 else ''}"
                if len(others) <= 3:  # name them while the line stays readable
                    ties += ": " + "; ".join(_describe({k: v for k, v in o.values.items() if k not in pv})
                                             for o in others)
                ties += ")"
            value = getattr(st, which)[metric]
            lines.append(f"- `{metric}` {ARROW[direction]}{where}: {_describe(rest) or 'the only setting'}: "
                         f"{_cell(value)} (n={value[2]}){ties}")
    return lines


def _assignments(settings):
    """``{dotted key: value}`` as Markdown: "`a.b=1`, `c=x`"."""
    return ", ".join(f"`{k}={format_value(v)}`" for k, v in settings.items())


def _condition(rule):
    """``{axis: [values]}`` as Markdown: "`a` in {1, 2} and `b` in {x}"."""
    return " and ".join(f"`{k}` in {{{', '.join(format_value(v) for v in vals)}}}" for k, vals in rule.items())


def _alt_text(caption):
    """A figure's alt text: its caption up to the first ';', its brackets closed."""
    head = caption.split(";")[0]
    return head + ")" * (head.count("(") - head.count(")"))


def _machines_lines(records):
    """Where the runs trained (their manifests' device names, with how many runs each) and the
    finished runs' wall time in all (per machine, where they ran on several), with the share of the
    image evaluations where the runs timed them."""
    counts = {}
    for rec in records:
        for name in rec.machines:
            counts[name] = counts.get(name, 0) + 1
    lines = []
    if counts:
        lines.append("- Machines (the runs' manifest.json): "
                     + ", ".join(f"`{name}` ({n} run{'s' if n != 1 else ''})" for name, n in counts.items()) + ".")
    finished = [r for r in records if r.status == "finished" and r.wall_time_s is not None]
    by_machine = {}
    for rec in finished:
        by_machine.setdefault("; ".join(rec.machines) or "machine not recorded", []).append(rec)
    if len(by_machine) == 1:
        lines.append(f"- Wall time of the finished runs: {_wall_time(finished)}.")
    elif by_machine:  # a GPU's hours and a CPU's are not one sum
        parts = [f"`{name}` {_wall_time(runs, count=True)}" for name, runs in by_machine.items()]
        lines.append(f"- Wall time of the finished runs, by machine: {'; '.join(parts)}.")
    return lines


def _duration_unit(seconds):
    """(seconds in the unit, unit, format) for a duration of ``seconds``: whole seconds under a
    minute, then minutes, then hours, to a tenth."""
    if seconds < 60:
        return 1, "s", ".0f"
    return (60, "min", ".1f") if seconds < 3600 else (3600, "h", ".1f")


def _duration(seconds):
    """``seconds`` in the unit their size asks, with the unit's name (:func:`_duration_unit`)."""
    scale, unit, fmt = _duration_unit(seconds)
    return f"{seconds / scale:{fmt}} {unit}"


def _duration_cell(stat):
    """A table cell of durations: the mean (± the std over seeds) in the mean's unit."""
    mean, std, n = stat
    if n == 0:
        return "n/a"
    scale, unit, fmt = _duration_unit(mean)
    spread = "" if std is None else f" ± {std / scale:{fmt}}"
    return f"{mean / scale:{fmt}}{spread} {unit}"


def _wall_time(runs, count=False):
    """The runs' wall time in all, with the share of the image evaluations where the runs timed
    them (and, with ``count``, how many runs)."""
    total = math.fsum(r.wall_time_s for r in runs)
    timed = [r for r in runs if r.eval_time_s is not None]
    evals = math.fsum(r.eval_time_s for r in timed)
    if not timed:
        said = "evaluations included"
    elif len(timed) == len(runs):
        said = f"of it, the image evaluations: {_duration(evals)}, {evals / total:.0%}"
    else:
        of = math.fsum(r.wall_time_s for r in timed)
        said = (f"evaluations included; the image evaluations of the {len(timed)} runs that timed them: "
                f"{_duration(evals)} of their {_duration(of)}")
    runs_said = f"{len(runs)} run{'s' if len(runs) != 1 else ''}; " if count else ""
    return f"{_duration(total)} in all ({runs_said}{said})"


def _first_config(sweep):
    """The resolved config the sweep asks of its first run, or None where the trainer refuses it
    (the runs then say why)."""
    try:
        return run_config(sweep, expand_runs(sweep)[0])
    except (OSError, ValueError):
        return None


def _evaluated_samples(config):
    """Generated samples per evaluation: train.eval_samples for 2-D data, eval.samples for images."""
    from gpgan.data import is_toy

    return config["train"]["eval_samples"] if is_toy(config["data"]["name"]) else config["eval"]["samples"]


_IMAGE_METRIC_NAMES = {"fid": "FID", "kid": "KID", "is": "Inception Score", "pr": f"precision/recall (k = {PR_K})",
                       "dc": f"density/coverage (k = {DC_K})"}
_EVALUATION_KEYS = ("eval.metrics", "eval.samples", "eval.reference", "train.eval_interval", "train.eval_samples",
                    "train.best_metric", "train.patience", "train.patience_min_delta", "train.ema.enabled",
                    "data.name", "data.split")


def _evaluation_line(sweep, config):
    """How the runs were evaluated, from ``config``, the one the sweep asks of its first run (None
    where the trainer refuses it: nothing is said): what is scored, on how many samples of which
    generator, against what, how often, and what ends a run early (keys an axis, variant or
    adjust rule sets are said to vary)."""
    from gpgan.data import is_toy
    from gpgan.train.config import best_metric

    if config is None:
        return []
    tc, ec, data = config["train"], config["eval"], config["data"]
    interval = f"every {tc['eval_interval']:,} steps and at the end" if tc["eval_interval"] else "at the end"
    if is_toy(data["name"]):
        what = f"mode metrics (modes, high-quality samples, reverse KL) of {_evaluated_samples(config):,} samples"
    elif ec["metrics"]:
        against = ec["reference"] or (f"{data['name']}:{data['split']}" if data["name"] == "cifar10"
                                      else f"the run's own data ({data['name']})")
        generator = "EMA generator" if tc["ema"]["enabled"] else "generator"
        names = ", ".join(_IMAGE_METRIC_NAMES[m] for m in ec["metrics"])
        what = f"{names} of {_evaluated_samples(config):,} samples of the {generator} (fixed noise) against {against}"
    else:
        return []
    by = f" by more than {tc['patience_min_delta']:g}" if tc["patience_min_delta"] else ""
    stop = f"; `train.patience` {tc['patience']}: a run ends after that many evaluations without a better " \
           f"{best_metric(config)}{by}" if tc["patience"] else ""
    varied = set(sweep.axes) | set(sweep.varied_keys)
    varies = [k for k in _EVALUATION_KEYS if k in varied]
    verb = "vary" if len(varies) > 1 else "varies"
    note = f" (as the first run; {', '.join(f'`{k}`' for k in varies)} {verb})" if varies else ""
    return [f"- Evaluation{note}: {what}, {interval}{stop}."]


def _drawing_libraries():
    """"matplotlib X and Pillow Y": the versions that decide the figures' bytes."""
    import matplotlib
    import PIL

    return f"matplotlib {matplotlib.__version__} and Pillow {PIL.__version__}"


def _markdown(sweep, records, stats, panels, metrics, figures, report_dir, so_far=None):
    total = len(records)
    count = {}
    for rec in records:
        count[rec.status] = count.get(rec.status, 0) + 1
    title = sweep.title or f"Ablation: {sweep.stem}"
    lines = [f"# {title}", ""]
    lines.append(f"Written by `gpgan-ablate` from the sweep file `{os.path.basename(sweep.path)}` "
                 f"(base config `{sweep.base_text}`); figures drawn with {_drawing_libraries()} (other "
                 "versions may draw other bytes).")
    lines.append("")
    order = ["finished", "failed", "diverged", "interrupted", "unfinished", "not run"]
    order += sorted(s for s in count if s not in order)
    status_text = ", ".join(f"{count[s]} {s}" for s in order if s in count)
    lines.append(f"- Runs: {total} ({status_text}); per-run values are in [results.csv](results.csv) "
                 "(its `run_dir`: the run's folder under the sweep's output folder).")
    for key, values in sweep.axes.items():
        role = " (seeds)" if key == sweep.seed_axis else ""
        lines.append(f"- Axis `{key}`{role}: " + ", ".join(f"`{format_value(v)}`" for v in values))
    if sweep.fixed:
        lines.append("- Fixed overrides: " + _assignments(sweep.fixed))
    for name, bundle in sweep.variants.items():
        for variant, settings in bundle.items():
            lines.append(f"- Variant `{name}={variant}`: {_assignments(settings) or 'no further overrides'}.")
    for when, dropped in sweep.ignore:
        lines.append(f"- Ignored: {', '.join(f'`{k}`' for k in dropped)} when {_condition(when)} "
                     "(the base config's value is used; shown as (any), one run per seed).")
    for rule in sweep.exclude:
        lines.append(f"- Excluded: {_condition(rule)}.")
    for when, settings in sweep.adjust:
        lines.append(f"- Adjusted: {_assignments(settings)} when {_condition(when)}.")
    first = _first_config(sweep)
    lines += _evaluation_line(sweep, first)
    lines += _machines_lines(records)
    seeds = f"`{sweep.seed_axis}`" if sweep.seed_axis else "runs (no seed axis)"
    lines.append(f"- Cells: mean ± sample standard deviation over {seeds}, finished runs only; "
                 "n = finished runs / runs. ↑ higher is better, ↓ lower is better.")
    lines.append("")
    if sweep.notes:
        lines += ["## Findings", "", sweep.notes.strip(), ""]

    header = list(sweep.setting_axes) + ["n"] + [f"{m} {ARROW[d]}" for m, d in metrics]
    final_rows, best_rows, at_best_rows, trend_rows = [], [], [], []
    for st in stats:
        base = [_val(st.values[k]) for k in sweep.setting_axes] + [f"{len(st.finished)}/{len(st.records)}"]
        final_rows.append(base + [_cell(st.final[m]) for m, _ in metrics] + [_duration_cell(st.wall)])
        best_rows.append(base + [_cell(st.best[m]) for m, _ in metrics])
        at_best_rows.append(base + [_cell(st.at_best[m]) for m, _ in metrics])
        trend_rows.append(base + [_trend_cell(st.trend[m]) for m, _ in metrics] + [_ended_by(st.finished)])
    real = [] if sweep.reference_scores is None else ["", _real_line(sweep, report_dir, first)]
    if sweep.reference_scores is not None:
        final_rows.append(_real_row(sweep, metrics, trailing=1))
        best_rows.append(_real_row(sweep, metrics))
        at_best_rows.append(_real_row(sweep, metrics))
    lines += ["## Final metrics", "",
              "The last evaluation of each run, then mean ± std over seeds. A run that `train.patience` ended "
              "had gone `train.patience` evaluations past its best when it stopped.", ""]
    lines += _table(header + ["wall time"], final_rows) + real + [""]
    lines += ["## Best value during training", "",
              "Each metric's best evaluation of each run (max or min by its direction; two metrics' bests can be "
              "at different evaluations), then mean ± std over seeds.",
              ""] + _table(header, best_rows) + [""]
    if len(metrics) > 1:
        lead = metrics[0][0]
        lines += [f"## At the best {lead}", "",
                  f"Every metric at the evaluation where each run's {lead} was best (one evaluation per run: the "
                  f"weights a `train.best_metric: {lead}` run keeps in best.npz), then mean ± std over seeds.",
                  ""] + _table(header, at_best_rows) + [""]

    percent = f"{TREND_FRACTION:.0%}"
    lines += ["## Still improving at the end?", "",
              f"Each cell: the mean over seeds of the metric over the last {percent} of each run's own "
              f"evaluations (at least one), and in brackets its change from the {percent} before. A run "
              "that `train.patience` ended had stopped improving by that rule (its best metric did not "
              "improve in its last `train.patience` evaluations), whatever its change. For runs that ran "
              "all their `train.steps`, a change in the metric's better direction (↑ up, ↓ down) that is "
              "large against the spread over seeds (± in the tables above; with one seed, against the "
              "changes between evaluations in the figures) means they were still improving when they "
              "stopped.",
              ""] + _table(header + ["ended by"], trend_rows) + [""]

    lines += ["## Best settings", ""]
    for which, text in (("final", "mean final value"), ("best", "mean best value during training")):
        best = _best_lines(panels, metrics, which)
        lines += [f"By {text}:", ""] + (best or ["No finished runs."]) + [""]

    lines += ["## Figures", ""]
    any_fig = False
    for heading, items in figures:
        if not items:
            continue
        any_fig = True
        if len(figures) > 1:
            lines += [f"### {heading}", ""]
        for caption, rel in items:
            lines += [f"{caption}:", "", f"![{_alt_text(caption)}]({rel})", ""]
    if not any_fig:
        lines += ["No figures: no run has finished.", ""]

    lines += _run_lines(records, metrics)
    lines += _evaluations_lines(records)
    lines += ["## Failures", ""]
    failing = [st for st in stats if any(r.status in ENDED_BADLY for r in st.records)]
    if not failing:
        lines += ["None.", ""]
    elif any(r.status == "diverged" for r in records):
        lines += ["A run that diverged met a non-finite loss or gradient (gpgan-train's exit 3): resumed, it "
                  "would meet the same step again, so the sweep does not retry it.", ""]
    for st in failing:
        bad = [r for r in st.records if r.status in ENDED_BADLY]
        what = " or ".join(status for status in ENDED_BADLY if any(r.status == status for r in bad))
        seeds = ""
        if sweep.seed_axis is not None:
            seeds = f"; {what} {sweep.seed_axis}: " + ", ".join(format_value(r.spec.seed) for r in bad)
        lines += [f"- **{_describe(st.values) or 'the only setting'}** ({len(bad)}/{len(st.records)} runs {what}{seeds}). "
                  f"Error of `{bad[0].spec.name}`:", "", "  ```"]
        lines += [f"  {line}" for line in bad[0].error.splitlines()] + ["  ```", ""]
    incomplete = _incomplete(records)
    if incomplete:
        lines += ["## Incomplete runs", ""]
        for r in incomplete:
            lines.append(f"- `{r.spec.name}`: {r.status}" + _progress_text(r, metrics))
        if so_far is not None:
            lines += ["", f"{so_far[0]}:", "", f"![{_alt_text(so_far[0])}]({so_far[1]})"]
        lines += ["", "Running the sweep again resumes interrupted and unfinished runs and starts the others.", ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def _ended_by(finished):
    """Why a setting's finished runs ended: "train.patience", "train.steps", or "train.patience
    (k of n)" when they differ; "n/a" without finished runs."""
    reasons = [r.ended_by for r in finished]
    if not reasons:
        return "n/a"
    if len(set(reasons)) == 1:
        return reasons[0]
    k = reasons.count("train.patience")
    return f"train.patience ({k} of {len(reasons)})"


def _seconds(s):
    """A duration in seconds: whole seconds with thousands separators from ten seconds on."""
    return f"{s:,.0f}" if s >= 10 else f"{s:.3g}"


def _run_lines(records, metrics):
    """The "Each run" section: every finished run's length, why it ended, the step of its best
    value of the first metric, and its wall time (in all and per step, evaluations included)."""
    done = [r for r in records if r.status == "finished"]
    if not done or not metrics:
        return []
    metric = metrics[0][0]
    rows = []
    for r in done:
        best = r.best.get(metric)
        step = r.best_step.get(metric)
        at = "n/a" if best is None else _num(best) + ("" if step is None else f" at step {step:,}")
        steps = "n/a" if r.steps is None else f"{r.steps:,}"
        wall = "n/a" if r.wall_time_s is None else _seconds(r.wall_time_s)
        per_step = "n/a" if r.wall_time_s is None or not r.steps else f"{r.wall_time_s / r.steps:.3g}"
        rows.append([f"`{r.spec.name}`", steps, r.ended_by or "n/a", at, wall, per_step])
    header = ["run", "steps", "ended by", f"best {metric}", "wall time (s)", "s per step"]
    return (["## Each run", "",
             "Every finished run: its generator steps, why it ended (`train.patience`: its best metric "
             "stopped improving; `train.steps`: it ran all its steps), its best value of the first "
             "metric and the step of that evaluation, and its wall time (evaluations and the time of "
             "other work on the machine included).", ""]
            + _table(header, rows) + [""])


def _evaluations_lines(records):
    """The "Scored afterwards" section: every gpgan-eval evaluation in a finished run's folder
    (eval_<step>[_<reference>].json), e.g. the best checkpoint against held-out images; none: no
    section."""
    rows, names = [], []
    for r in records:
        for e in r.evaluations:
            names += [k for k in e["scores"] if k not in names and not k.startswith("eval_std/")]
    # (a column for the latent truncation only where some evaluation used one: gpgan-eval --truncation)
    truncated = any("truncation" in e for r in records for e in r.evaluations)
    for r in records:
        for e in r.evaluations:
            checkpoint = e.get("checkpoint")
            rows.append([f"`{r.spec.name}`", _count(e.get("step")),
                         "n/a" if not isinstance(checkpoint, str) else f"`{os.path.basename(checkpoint)}`",
                         _text(e.get("weights")), _count(e.get("samples")), _text(e.get("reference"))]
                        + ([_truncation_cell(e.get("truncation"))] if truncated else [])
                        + [_scored(e["scores"], name) for name in names])
    if not rows:
        return []
    return (["## Scored afterwards", "",
             "Evaluations that `gpgan-eval` wrote into the finished runs' folders "
             "(eval_<step>[_<reference>].json), each "
             "against the reference it names (for example the best checkpoint against held-out images: "
             "`gpgan-eval RUN/checkpoints/best.npz --ref cifar10:test`). They are not part of the tables "
             "above, which come from the evaluations during training.", ""]
            + _table(["run", "step", "checkpoint", "weights", "samples", "reference"]
                     + (["truncation"] if truncated else []) + names, rows) + [""])


def _truncation_cell(v):
    """An evaluation's latent truncation: "none" where it had none (no entry), "n/a" where the
    entry is not a number."""
    if v is None:
        return "none"
    return _num(float(v)) if isinstance(v, (int, float)) and not isinstance(v, bool) else "n/a"


def _count(v):
    return f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else "n/a"


def _text(v):
    return _val(v) if isinstance(v, str) else "n/a"


def _scored(scores, name):
    """A score's cell, with its spread where the file holds one (KID's, the Inception Score's)."""
    value = metric_value(scores, name)
    spread = metric_value(scores, name.replace("eval/", "eval_std/", 1))
    if value is None or spread is None:
        return _num(value)
    return f"{_num(value)} ± {spread:.2g}"


def _progress_text(rec, metrics):
    """Where an incomplete run stands: its checkpoint (the step a new sweep resumes it from) and
    the first metric's evaluations so far, else the last line of its error."""
    if rec.checkpoint_step is not None:
        of = f" of {rec.target_steps:,}" if rec.target_steps is not None else ""
        text = f", checkpoint at step {rec.checkpoint_step:,}{of}"
        point = best_point(rec.so_far, metrics[0][1]) if metrics else None
        if point is not None:
            metric = metrics[0][0]
            best_step, best = point
            last_step, last = rec.so_far[-1]
            count = len(rec.so_far)
            text += (f"; {metric} so far: best {_num(best)} at step {best_step:,}, last {_num(last)} at step "
                     f"{last_step:,} ({count:,} evaluation{'s' if count != 1 else ''})")
        return text
    last = rec.error.splitlines()[-1] if rec.error else ""
    return f" ({last})" if last else ""


def write_report(sweep, out_dir, report_dir=None):
    """Collect the runs of ``sweep`` under ``out_dir`` and write results.csv, REPORT.md and
    figures/ into ``report_dir`` (default ``out_dir``; another folder keeps the report apart from
    the run folders and their checkpoints, e.g. to commit it). Returns the run records (sweep
    order)."""
    out_dir = os.fspath(out_dir)
    report_dir = out_dir if report_dir is None else os.fspath(report_dir)
    make_folder(report_dir)
    metrics = resolve_metrics(sweep, out_dir)
    records = collect_results(sweep, out_dir, metrics)
    write_results_csv(os.path.join(report_dir, "results.csv"), sweep, records, metrics, out_dir)
    stats = summarize(sweep, records, metrics)
    panels = _panels(sweep, stats)
    figures = _figures(sweep, report_dir, panels, metrics)  # (first: it clears an earlier report's figures)
    so_far = _so_far_figure(sweep, report_dir, records, metrics)
    text = _markdown(sweep, records, stats, panels, metrics, figures, report_dir, so_far)
    with open(os.path.join(report_dir, "REPORT.md"), "w", encoding="utf-8") as fh:
        fh.write(text)
    return records
