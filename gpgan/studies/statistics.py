"""Statistics over a sweep's runs: runs grouped by setting, mean and spread over seeds, curves
over training and how they moved at the end. Pure functions of
:class:`~gpgan.studies.results.RunRecord` lists; :mod:`gpgan.studies.report` formats what they
return."""
import math
from dataclasses import dataclass

__all__ = ["SettingStats", "TREND_FRACTION", "curve_stats", "curve_tails", "end_trend", "mean_std", "run_trends",
           "summarize"]

#: the share of a curve's last evaluations :func:`end_trend` averages (at least one)
TREND_FRACTION = 0.1


def mean_std(values):
    """(mean, sample standard deviation (ddof=1; None for fewer than 2 values), count) over the
    values that are not None or NaN. An infinite value (e.g. the reverse KL of a run with no
    high-quality sample) makes the mean infinite and the deviation None."""
    vals = [v for v in values if v is not None and not math.isnan(v)]
    n = len(vals)
    if n == 0:
        return None, None, 0
    if any(math.isinf(v) for v in vals):
        signs = {v > 0 for v in vals if math.isinf(v)}
        return (math.nan if len(signs) == 2 else math.copysign(math.inf, 1 if True in signs else -1)), None, n
    mean = math.fsum(vals) / n
    if n < 2:
        return mean, None, n
    var = math.fsum((v - mean) ** 2 for v in vals) / (n - 1)
    return mean, math.sqrt(var), n


@dataclass
class SettingStats:
    """Runs sharing the non-seed axis values, and their statistics over seeds."""

    values: dict            # setting axis -> value (IGNORED where an ignore rule dropped it)
    records: list           # [RunRecord]
    final: dict             # metric -> (mean, std, n)
    best: dict
    wall: tuple
    curves: dict            # metric -> curve_stats over the finished seeds, or None
    trend: dict             # metric -> run_trends of the finished seeds, (end, change) or None
    at_best: dict           # metric -> (mean, std, n) at each run's best evaluation of the first metric

    @property
    def finished(self):
        return [r for r in self.records if r.status == "finished"]


def summarize(sweep, records, metrics):
    """Group runs by setting (sweep order) and take mean/std over the finished seeds."""
    groups = {}
    for rec in records:
        groups.setdefault(rec.spec.setting, []).append(rec)
    stats = []
    for recs in groups.values():
        done = [r for r in recs if r.status == "finished"]
        values = {k: recs[0].spec.values[k] for k in sweep.setting_axes}
        curves = {m: curve_stats(recs, m) for m, _ in metrics}
        stats.append(SettingStats(
            values=values, records=recs,
            final={m: mean_std([r.final.get(m) for r in done]) for m, _ in metrics},
            best={m: mean_std([r.best.get(m) for r in done]) for m, _ in metrics},
            wall=mean_std([r.wall_time_s for r in done]),
            curves=curves,
            trend={m: run_trends(done, m) for m, _ in metrics},
            at_best={m: mean_std([r.at_best.get(m) for r in done]) for m, _ in metrics},
        ))
    return stats


def run_trends(records, metric):
    """How ``metric`` moved at the end of each run: ``(end, change)``, the means over ``records``
    of each run's own :func:`end_trend` (over its own last evaluations, so a seed that ran longer
    is judged at its end, not where a shorter one stopped); None when no run has one."""
    trends = []
    for r in records:
        curve = r.curves.get(metric) or []
        trend = end_trend(([step for step, _ in curve], [v for _, v in curve], None)) if curve else None
        if trend is not None:
            trends.append(trend)
    if not trends:
        return None
    return math.fsum(t[0] for t in trends) / len(trends), math.fsum(t[1] for t in trends) / len(trends)


def curve_stats(records, metric):
    """``(steps, mean, std or None)`` of ``metric`` over the finished runs ``records``, at the
    steps every one of them evaluated (std needs two runs); None when there is no such step."""
    curves = [dict(r.curves.get(metric, [])) for r in records if r.status == "finished"]
    curves = [c for c in curves if c]
    if not curves:
        return None
    steps = sorted(set.intersection(*(set(c) for c in curves)))
    if not steps:
        return None
    stats = [mean_std([c[step] for c in curves]) for step in steps]
    mean = [math.nan if m is None else m for m, _, _ in stats]
    std = None if len(curves) < 2 else [math.nan if d is None else d for _, d, _ in stats]
    return steps, mean, std


def end_trend(curve, fraction=TREND_FRACTION):
    """How a metric moved at the end of training: ``(end, change)`` of ``curve``, a
    ``curve_stats`` result (None: no curve). ``end`` is the mean of the seed-mean curve over its
    last k evaluations, k = ``fraction`` of them rounded (at least 1); ``change`` is ``end`` minus
    the same mean over the k evaluations before. None with fewer than 2k evaluations or a
    non-finite mean (e.g. a reverse KL of inf)."""
    if curve is None:
        return None
    mean = curve[1]
    k = max(1, round(fraction * len(mean)))
    if len(mean) < 2 * k:
        return None
    end, before = math.fsum(mean[-k:]) / k, math.fsum(mean[-2 * k:-k]) / k
    if not (math.isfinite(end) and math.isfinite(before)):
        return None
    return end, end - before


def curve_tails(records, metric, last_common):
    """``[(steps, values)]``: each finished run's evaluations of ``metric`` after ``last_common``
    (the last step every seed evaluated; a seed that ran longer than another), from that step on
    (from the run's own value there, so the tail starts beside the mean curve's end, not on it);
    runs without later evaluations are left out."""
    tails = []
    for r in records:
        points = [(step, v) for step, v in r.curves.get(metric, []) if step >= last_common] \
            if r.status == "finished" else []
        if len(points) > 1:
            tails.append(([step for step, _ in points], [v for _, v in points]))
    return tails
