"""Scatter and line plots drawn with matplotlib (set-up, style and saving in gpgan.viz.figure).

Each plot comes as a pair: ``*_figure`` builds and returns the ``matplotlib.figure.Figure`` (its
artists can be inspected), and the other function writes that figure to a file. Point and value
arrays may be NumPy or CuPy arrays or Variables; they are copied to the host first.
"""
import math
import textwrap

import numpy

from gpgan.backend import to_device
from gpgan.viz.figure import DPI, PALETTE, new_figure, plot_style, rgb, save_figure

REAL_COLOR = (150, 150, 150)
GENERATED_COLOR = PALETTE[0]
SCATTER_SIZE = (560, 560)     # pixels (as scatter_plot)
LINE_SIZE = (640, 440)
MAX_MARKERS = 60              # a line with more points than this is drawn without markers
SERIES_STYLES = ("line", "points", "level")
DODGE_PT = 4                  # horizontal shift between series with error bars, in points
MARK_SPACING_PT = 16          # between the labelled marks of non-finite values of several series
BAND = 0.12                   # share of the plot height kept at the top (+inf) or bottom (-inf, nan) for marks


def _host(x):
    data = getattr(x, "data", x)  # a Variable's array
    return numpy.asarray(to_device(data, "cpu") if hasattr(data, "shape") else data, dtype=numpy.float64)


def _points(points, what):
    points = _host(points)
    if points.size == 0:
        return points.reshape(0, 2)
    if points.ndim != 2 or points.shape[1] != 2:
        raise ValueError(f"{what} must be an (N, 2) array of 2-D points, got shape {points.shape}")
    return points


def _fit_limits(point_arrays, margin):
    """((xmin, xmax), (ymin, ymax)) around the finite points, widened by ``margin`` times the
    range on each side (by 10% of the value, or 1, along an axis where all points agree)."""
    every = numpy.concatenate([p for p in point_arrays] + [numpy.zeros((0, 2))])
    every = every[numpy.isfinite(every).all(axis=1)]
    if len(every) == 0:
        every = numpy.zeros((1, 2))
    limits = []
    for lo, hi in zip(every.min(axis=0), every.max(axis=0)):
        pad = (hi - lo) * margin if hi > lo else (abs(lo) * 0.1 or 1.0)
        limits.append((float(lo - pad), float(hi + pad)))
    return tuple(limits)


def _check_limits(limits):
    try:
        (x0, x1), (y0, y1) = limits
        x0, x1, y0, y1 = (float(v) for v in (x0, x1, y0, y1))
    except (TypeError, ValueError):
        raise ValueError(f"limits must be ((xmin, xmax), (ymin, ymax)), got {limits!r}") from None
    if not all(math.isfinite(v) for v in (x0, x1, y0, y1)) or x0 >= x1 or y0 >= y1:
        raise ValueError(f"limits must be finite with min < max on both axes, got {limits!r}")
    return (x0, x1), (y0, y1)


def _marker_area(radius_px):
    """matplotlib's scatter size (points squared) of a disc ``radius_px`` pixels wide at DPI."""
    return (2 * radius_px * 72 / DPI) ** 2


def density_alpha(count):
    """Opacity of generated points: about 1/4 for a few thousand points, more for fewer, so that
    the many overlapping points of a mode look dark and a sparse stray stays visible."""
    return float(min(0.8, max(0.08, 12.0 / math.sqrt(max(count, 1)))))


def _draw_points(ax, points, limits, color, label, area, alpha, zorder):
    """Scatter the finite ``points``; the legend label counts those out of view (or not finite)."""
    finite = numpy.isfinite(points).all(axis=1)
    (x0, x1), (y0, y1) = limits
    shown = finite & (points[:, 0] >= x0) & (points[:, 0] <= x1) & (points[:, 1] >= y0) & (points[:, 1] <= y1)
    hidden = int(len(points) - shown.sum())
    if label and hidden:
        label = f"{label} ({hidden} outside the plot)"
    ax.scatter(points[finite, 0], points[finite, 1], s=area, color=rgb(color), alpha=alpha, linewidths=0,
               zorder=zorder, label=label or "_nolegend_")


def _scatter_frame(size, limits, title, subtitle, xlabel, ylabel):
    figure = new_figure(size)
    ax = figure.add_subplot()
    ax.set_xlim(*limits[0])
    ax.set_ylim(*limits[1])
    ax.set_aspect("equal", adjustable="box")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title and subtitle:
        figure.suptitle(title)
        ax.set_title(subtitle, fontsize=9, color="0.3")
    elif title or subtitle:
        ax.set_title(title or subtitle)
    return figure, ax


def _scatter_legend(figure, ax):
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return
    legend = figure.legend(handles, labels, loc="outside lower center", ncols=min(len(handles), 3),
                           markerscale=2.5, frameon=False)
    for handle in legend.legend_handles:  # legend swatches opaque even where the points are not
        handle.set_alpha(1.0)


def scatter_samples_figure(real, generated, limits=None, title=None, subtitle=None):
    """The Figure of :func:`scatter_samples` (same arguments but the path)."""
    real = _points(real, "scatter_samples: real")
    generated = _points(generated, "scatter_samples: generated")
    if limits is None:  # the data sets the view, so a diverging generator cannot shrink it
        limits = _fit_limits([real] if numpy.isfinite(real).all(axis=1).any() else [generated], 0.25)
    limits = _check_limits(limits)
    with plot_style():
        figure, ax = _scatter_frame(SCATTER_SIZE, limits, title, subtitle, "x", "y")
        _draw_points(ax, real, limits, REAL_COLOR, "real", _marker_area(2.0), 1.0, zorder=2)
        _draw_points(ax, generated, limits, GENERATED_COLOR, "generated", _marker_area(2.5),
                     density_alpha(len(generated)), zorder=3)
        _scatter_legend(figure, ax)
    return figure


def scatter_samples(path, real, generated, limits=None, title=None, subtitle=None):
    """Generated 2-D samples over real ones, written to ``path`` (PNG, 600 x 600 pixels).

    Real points are opaque grey, drawn first; generated points are translucent blue on top, so
    dense regions look dark and the real points show through. Equal aspect; a legend below
    counts the points that fall outside the plot.

    Args:
        real: (N, 2) points of the data distribution.
        generated: (M, 2) points of the generator.
        limits: ``((xmin, xmax), (ymin, ymax))``; None fits the real points with a margin of a
            quarter of their range on each side.
        title: the main line, e.g. "step 500: 25/25 modes, 83% high quality, reverse KL 0.010".
        subtitle: an optional smaller second line (e.g. the run or data set).
    Returns the path written.
    """
    return save_figure(scatter_samples_figure(real, generated, limits, title, subtitle), path)


def scatter_figure(point_sets, limits=None, title="", size=(560, 560), radius=2, xlabel="x", ylabel="y"):
    """The Figure of :func:`scatter_plot` (same arguments but the path)."""
    sets = [(_points(points, f"scatter_plot: point set {label!r}"), color, label) for points, color, label in point_sets]
    limits = _check_limits(_fit_limits([p for p, _, _ in sets], 0.05) if limits is None else limits)
    with plot_style():
        figure, ax = _scatter_frame(size, limits, title, None, xlabel, ylabel)
        for k, (points, color, label) in enumerate(sets):
            _draw_points(ax, points, limits, color, label, _marker_area(radius), 1.0, zorder=2 + k)
        _scatter_legend(figure, ax)
    return figure


def scatter_plot(path, point_sets, limits=None, title="", size=(560, 560), radius=2, xlabel="x", ylabel="y"):
    """Opaque scatter plot of several 2-D point sets written to ``path`` (PNG).

    Args:
        point_sets: list of ``(points (n, 2), (r, g, b) in 0..255, label)``; later sets are drawn
            on top. An empty label keeps a set out of the legend.
        limits: ``((xmin, xmax), (ymin, ymax))``, or None to fit every point with a 5% margin.
        title: text above the plot; ``xlabel``, ``ylabel``: axis labels.
        size: (width, height) in pixels; ``radius``: point radius in pixels.
    For generated-over-real samples use :func:`scatter_samples` (translucent generated points).
    """
    return save_figure(scatter_figure(point_sets, limits, title, size, radius, xlabel, ylabel), path)


# ----------------------------------------------------------------------------------------------
# line plots

LOG_SPAN = 100.0   # line and curve plots: positive values spanning this factor get a log y axis


def _log_y(ax):
    """A log y axis with plain tick labels (0.01, 0.1, 1): the style renders text literally, so
    matplotlib's default 10^k labels (mathtext) would show their markup."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _thousands_x(ax):
    """Step-count x tick labels in thousands (5k, 100k, 1.5M) and at most six of them: plain
    labels of 200,000-step curves run into each other on a 300-pixel panel."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    def label(value, _):
        for scale, suffix in ((1e6, "M"), (1e3, "k")):
            if abs(value) >= scale:
                return f"{value / scale:g}{suffix}"
        return f"{value:g}"

    ax.xaxis.set_major_locator(MaxNLocator(nbins=5, integer=True))
    ax.xaxis.set_major_formatter(FuncFormatter(label))


def _finite(arrays):
    """The finite values of ``arrays``, as one flat array (empty when there are none)."""
    return numpy.concatenate([a[numpy.isfinite(a)].ravel() for a in arrays] + [numpy.zeros(0)])


def _spans_decades(arrays):
    """Whether the finite values of ``arrays`` are all positive and span at least LOG_SPAN."""
    values = _finite(arrays)
    return bool(values.size) and bool((values > 0).all()) and float(values.max() / values.min()) >= LOG_SPAN


def _log_floor(arrays):
    """Where a log axis cuts what reaches below it (error bars, bands): half the smallest finite
    value of ``arrays``; None when there is none."""
    values = _finite(arrays)
    return float(values.min()) / 2 if values.size else None


def _series(item, logx):
    """One ``(label, xs, ys, yerr[, style])`` item as validated host arrays."""
    if len(item) not in (4, 5):
        raise ValueError(f"line plot: a series is (label, xs, ys, yerr) or (label, xs, ys, yerr, style), "
                         f"got {len(item)} items")
    label, xs, ys, yerr = item[:4]
    style = item[4] if len(item) == 5 else "line"
    if style not in SERIES_STYLES:
        raise ValueError(f"line plot: series {label!r} has style {style!r}; accepted: " + ", ".join(SERIES_STYLES))
    xs, ys = _host(xs).ravel(), _host(ys).ravel()
    if xs.shape != ys.shape:
        raise ValueError(f"line plot: series {label!r} has {xs.size} xs but {ys.size} ys")
    err = None if yerr is None else numpy.broadcast_to(_host(yerr).ravel(), ys.shape)
    if logx and (xs <= 0).any():
        raise ValueError(f"line plot: logx needs positive xs, series {label!r} has {xs.min()}")
    return str(label), xs, ys, err, style


def _shifted(ax, points):
    """The data transform moved right by ``points`` typographic points (for side-by-side series)."""
    from matplotlib.transforms import ScaledTranslation

    return ax.transData + ScaledTranslation(points / 72, 0, ax.figure.dpi_scale_trans)


def _draw_series(ax, xs, ys, err, style, color, label, dodge):
    """One series: a line (markers up to MAX_MARKERS points) with error bars, markers alone, or a
    dashed level whose error is a shaded band. ``dodge``: horizontal shift in points."""
    finite = numpy.where(numpy.isfinite(ys), ys, numpy.nan)  # NaN breaks the line: no bridged gaps
    ok = numpy.isfinite(xs) & numpy.isfinite(ys)
    has_err = err is not None
    if has_err:
        ok_err = ok & numpy.isfinite(err)
        spread = numpy.abs(numpy.where(ok_err, err, 0.0))
    label = label or "_nolegend_"
    if style == "level":
        ax.plot(xs, finite, linestyle="--", linewidth=1.8, color=color, label=label, zorder=3)
        if has_err and ok_err.any():
            ax.fill_between(xs, finite - spread, finite + spread, where=ok_err, color=color, alpha=0.15,
                            linewidth=0, zorder=1)
        return
    transform = _shifted(ax, dodge)
    marker = "o" if style == "points" or xs.size <= MAX_MARKERS else None
    ax.plot(xs, finite, linestyle="none" if style == "points" else "-", marker=marker, markersize=5,
            linewidth=1.8, color=color, label=label, zorder=3, transform=transform)
    if has_err and ok_err.any():
        ax.errorbar(xs[ok_err], ys[ok_err], yerr=spread[ok_err], fmt="none", ecolor=color, elinewidth=1.2,
                    capsize=4, zorder=2, transform=transform)


def _y_layout(prepared, logy=False, levels=()):
    """(ylim, (finite lo, finite hi), top band?, bottom band?): the finite values and their error
    bars (and the finite ``levels``: reference lines) fill the plot except for a band of BAND at
    the top when a y is +inf and at the bottom when one is -inf or nan; the marks of those values
    sit in the bands. With ``logy`` the same layout in log10 space, the error bars cut at half the
    smallest value."""
    levels = numpy.asarray(levels, dtype=float).ravel()
    levels = levels[numpy.isfinite(levels)]
    lows, highs, top, bottom = [levels], [levels], False, False
    for _, xs, ys, err, _ in prepared:
        ok = numpy.isfinite(ys)
        spread = numpy.zeros_like(ys) if err is None else numpy.where(numpy.isfinite(err), numpy.abs(err), 0.0)
        lows.append((ys - spread)[ok])
        highs.append((ys + spread)[ok])
        top |= bool((ys == numpy.inf).any())
        bottom |= bool((numpy.isnan(ys) | (ys == -numpy.inf)).any())
    lows, highs = numpy.concatenate(lows + [numpy.zeros(0)]), numpy.concatenate(highs + [numpy.zeros(0)])
    if logy:
        floor = _log_floor([p[2] for p in prepared] + [levels])
        lows, highs = numpy.log10(numpy.maximum(lows, floor)), numpy.log10(highs)
    lo, hi = (0.0, 1.0) if lows.size == 0 else (float(lows.min()), float(highs.max()))
    if hi <= lo:
        half = abs(lo) * 0.1 or 0.5
        lo, hi = lo - half, hi + half
    pad = (hi - lo) * 0.06
    lo, hi = lo - pad, hi + pad
    below, above = (BAND if bottom else 0.0), (BAND if top else 0.0)
    total = (hi - lo) / (1.0 - below - above)
    ylim, finite_range = (lo - below * total, hi + above * total), (lo, hi)
    if logy:
        ylim, finite_range = tuple(10.0 ** v for v in ylim), tuple(10.0 ** v for v in finite_range)
    return ylim, finite_range, top, bottom


def _off_scale_bands(ax, finite_range, top, bottom, logy=False):
    """Shade the bands of non-finite marks and keep y ticks out of them (their heights mean nothing)."""
    from matplotlib.patches import Rectangle
    from matplotlib.ticker import FixedLocator, LogLocator, MaxNLocator

    for used, y0 in ((top, 1.0 - BAND), (bottom, 0.0)):
        if used:
            ax.add_patch(Rectangle((0.0, y0), 1.0, BAND, transform=ax.transAxes, facecolor="0.94",
                                   edgecolor="none", zorder=0))
    if top or bottom:
        lo, hi = finite_range
        locator = LogLocator() if logy else MaxNLocator(nbins=6, steps=[1, 2, 2.5, 5, 10])
        ticks = locator.tick_values(lo, hi)
        ax.yaxis.set_major_locator(FixedLocator([t for t in ticks if lo <= t <= hi]))


def _mark_non_finite(ax, xs, ys, color, shift):
    """A labelled mark in the top band (+inf: triangle) or bottom band (-inf: triangle, nan:
    cross) above each such x, moved ``shift`` points right so that the marks of several series
    at one x stand side by side."""
    from matplotlib.transforms import ScaledTranslation, blended_transform_factory

    where = blended_transform_factory(ax.transData, ax.transAxes) + \
        ScaledTranslation(shift / 72, 0, ax.figure.dpi_scale_trans)
    for x, y in zip(xs, ys):
        if math.isfinite(y) or not math.isfinite(x):
            continue
        if y == math.inf:
            height, marker, text, offset, va = 1.0 - BAND * 0.3, "^", "inf", -6, "top"
        else:
            height, marker, text, offset, va = BAND * 0.3, ("v" if y == -math.inf else "X"), \
                ("-inf" if y == -math.inf else "nan"), 6, "bottom"
        ax.plot([x], [height], marker=marker, markersize=7, color=color, linestyle="none",
                transform=where, clip_on=False, zorder=4)
        ax.annotate(text, (x, height), xycoords=where, xytext=(0, offset), textcoords="offset points",
                    ha="center", va=va, fontsize=7, color=color, zorder=4)


def _x_limits(prepared, logx, width_px, shift_pt):
    """x limits around every finite x (also those of non-finite values, whose marks stand there),
    with a 5% margin plus room for marks shifted up to ``shift_pt`` points sideways. Set by hand
    because matplotlib's autoscaling does not follow lines drawn with a shifted transform."""
    xs = numpy.concatenate([p[1] for p in prepared] + [numpy.zeros(0)])
    xs = xs[numpy.isfinite(xs)]
    if xs.size == 0:
        return (1.0, 10.0) if logx else (0.0, 1.0)
    if logx:
        xs = numpy.log10(xs)
    lo, hi = float(xs.min()), float(xs.max())
    if hi <= lo:
        half = 0.5 if logx else (abs(lo) * 0.1 or 1.0)
        lo, hi = lo - half, hi + half
    plot_px = 0.8 * width_px  # the axes' share of the figure width, about
    margin = (0.05 + shift_pt * DPI / 72 / plot_px) * (hi - lo)
    lo, hi = lo - margin, hi + margin
    return (10.0 ** lo, 10.0 ** hi) if logx else (lo, hi)


def _centred(k, count, step):
    """Offset of item ``k`` of ``count`` placed ``step`` apart around zero."""
    return (k - (count - 1) / 2) * step


def _references(references):
    """``[(label, y)]`` of reference lines, checked: each y a finite number."""
    out = []
    for label, y in references:
        if isinstance(y, bool) or not isinstance(y, (int, float)) or not math.isfinite(y):
            raise ValueError(f"plot: reference line {label!r} needs a finite y, got {y!r}")
        out.append((str(label), float(y)))
    return out


def _draw_references(ax, references):
    """Each ``(label, y)`` as a dashed grey line across the axes (grey: real data's colour)."""
    for label, y in references:
        ax.axhline(y, linestyle="--", linewidth=1.4, color=rgb(REAL_COLOR), label=label, zorder=2)


def line_figure(series, xlabel, ylabel, title="", logx=False, size=LINE_SIZE, xticks=None, references=()):
    """The Figure of :func:`line_plot` (same arguments but the path)."""
    prepared = [_series(item, logx) for item in series]
    references = _references(references)
    levels = numpy.array([y for _, y in references])
    logy = _spans_decades([p[2] for p in prepared] + [levels])
    with plot_style():
        figure = new_figure(size)
        ax = figure.add_subplot()
        if logx:
            ax.set_xscale("log")
        if logy:
            _log_y(ax)
        # Series with error bars stand a little apart, so that equal values keep visible bars.
        dodged = [k for k, p in enumerate(prepared) if p[4] != "level"]
        dodge = len(dodged) > 1 and any(prepared[k][3] is not None for k in dodged)
        for k, (label, xs, ys, err, style) in enumerate(prepared):
            color = rgb(PALETTE[k % len(PALETTE)])
            shift = _centred(dodged.index(k), len(dodged), DODGE_PT) if dodge and k in dodged else 0.0
            _draw_series(ax, xs, ys, err, style, color, label, shift)
            _mark_non_finite(ax, xs, ys, color, _centred(k, len(prepared), MARK_SPACING_PT))
        ylim, finite_range, top, bottom = _y_layout(prepared, logy, levels)
        ax.set_ylim(*ylim)
        _draw_references(ax, references)  # after the limits: they are set by hand (no autoscaling)
        _off_scale_bands(ax, finite_range, top, bottom, logy)
        marked = any((~numpy.isfinite(p[2])).any() for p in prepared)
        side = max(MARK_SPACING_PT * (len(prepared) - 1) if marked else 0, DODGE_PT * (len(dodged) - 1) if dodge else 0)
        ax.set_xlim(*_x_limits(prepared, logx, size[0], side / 2))
        if xticks is not None:
            positions, labels = [float(p) for p, _ in xticks], [str(t) for _, t in xticks]
            long = sum(len(t) for t in labels) > 60 or max((len(t) for t in labels), default=0) > 16
            ax.set_xticks(positions, labels, rotation=25 if long else 0, ha="right" if long else "center")
            ax.minorticks_off()
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        if title:
            ax.set_title(title)
        labelled = sum(1 for label, *_ in prepared if label) + len(references)
        if labelled:  # below the plot: never over data or marks
            figure.legend(loc="outside lower center", ncols=min(labelled, 4), frameon=False)
    return figure


def line_plot(path, series, xlabel, ylabel, title="", logx=False, size=LINE_SIZE, xticks=None, references=()):
    """Lines with markers and error bars written to ``path`` (PNG).

    Args:
        series: list of ``(label, xs, ys, yerr)`` or ``(label, xs, ys, yerr, style)``; ``yerr``
            is a half-width per point (or one for all; None for no bars; NaN for no bar at that
            point). style "line" (default): a line, with markers up to MAX_MARKERS points, and
            error bars; "points": markers and error bars without a line; "level": a dashed line
            whose error is a shaded band (a value that does not depend on x). Series k is drawn
            in ``PALETTE[k]``; when several line/points series have error bars, they are shifted
            a few points apart so that equal values keep their bars visible.
            A y of +inf is marked by a labelled triangle at the top edge, -inf (triangle) and nan
            (cross) at the bottom edge, instead of being left out. When the finite ys are all
            positive and span at least LOG_SPAN, the y axis is logarithmic (error bars cut at
            half the smallest y).
        xlabel, ylabel, title: axis labels and title.
        logx: logarithmic x axis (every x must be positive).
        size: (width, height) in pixels.
        xticks: optional list of ``(position, label)``: the only x ticks (e.g. categories).
        references: list of ``(label, y)``: horizontal dashed grey lines across the plot (e.g.
            the score of real data), in the legend and inside the y range; y must be finite.
    Returns the path written.
    """
    return save_figure(line_figure(series, xlabel, ylabel, title, logx, size, xticks, references), path)


CURVE_PANEL_PX = (300, 230)   # one small-multiple panel of curves_figure
# Rough widths in pixels of a character of a figure's title and of a legend entry, and of a legend
# entry's line sample: enough to wrap a title and to fold a legend into the figure's width.
_TITLE_CHAR_PX, _LEGEND_CHAR_PX, _LEGEND_HANDLE_PX = 9.0, 7.0, 45
CURVE_MIN_WIDTH_PX = 480       # a figure of one or two panels still holds its title and legend


def curves_figure(groups, xlabel, ylabel, title="", ncols=3, references=()):
    """Small multiples of curves: one panel per group, with a line and a shaded band each.

    Args:
        groups: list of ``(panel title, lines)`` with ``lines`` a list of ``(label, xs, mean,
            std)`` or ``(label, xs, mean, std, tails)``: ``std`` None or an array (the band is
            mean +- std); ``tails`` a list of ``(xs, ys)`` drawn dotted in the line's colour (one
            seed's curve past the steps the mean covers). A label keeps one colour in every panel. Points whose mean is not finite are left out of the line (the
            caller says so). ``xs`` are counts (training steps): the x ticks fall on integers
            and read in thousands and millions (5k, 100k, 1.5M).
        xlabel, ylabel, title: shared labels and the figure's title.
        ncols: panels per row.
        references: list of ``(label, y)``: a horizontal dashed grey line in every panel (e.g.
            the score of real data), in the legend and inside the y range; y must be finite.

    The y axes are logarithmic when every finite mean is positive and they span at least
    LOG_SPAN (a reverse KL falling from 1 to 0.005: on a linear axis every converged run would
    lie on zero); a band's lower edge that falls below the panel then stops at its bottom.
    """
    if not groups:
        raise ValueError("curves_figure: no groups to draw")
    labels = []
    for _, lines in groups:
        labels += [line[0] for line in lines if line[0] not in labels]
    references = _references(references)
    levels = numpy.array([y for _, y in references])
    logy = _spans_decades([_host(line[2]) for _, lines in groups for line in lines] + [levels])
    ncols = max(1, min(int(ncols), len(groups)))
    nrows = -(-len(groups) // ncols)
    with plot_style():
        width = max(CURVE_PANEL_PX[0] * ncols, CURVE_MIN_WIDTH_PX)
        figure = new_figure((width, CURVE_PANEL_PX[1] * nrows + 60))
        axes = figure.subplots(nrows, ncols, squeeze=False, sharex=True)
        _thousands_x(axes[0, 0])  # sharex: every panel uses this one x locator and formatter
        for k, ax in enumerate(axes.ravel()):
            if k >= len(groups):
                ax.set_visible(False)
                continue
            name, lines = groups[k]
            floor = None
            if logy:
                _log_y(ax)
                floor = _log_floor([_host(line[2]) for line in lines] + [levels])
            for label, xs, mean, std, *tails in lines:
                color = rgb(PALETTE[labels.index(label) % len(PALETTE)])
                for tail_xs, tail_ys in (tails[0] if tails else ()):
                    tail_xs, tail_ys = _host(tail_xs), _host(tail_ys)
                    ok = numpy.isfinite(tail_ys)
                    ax.plot(tail_xs[ok], tail_ys[ok], color=color, linewidth=1.0, linestyle=":")
                xs, mean = _host(xs), _host(mean)
                shown = numpy.isfinite(mean)
                ax.plot(xs[shown], mean[shown], color=color, linewidth=1.4, label=label)
                if std is not None:
                    std = _host(std)
                    band = shown & numpy.isfinite(std)
                    lower = mean - std if floor is None else numpy.maximum(mean - std, floor)
                    ax.fill_between(xs[band], lower[band], (mean + std)[band], color=color, alpha=0.18,
                                    linewidth=0)
            _draw_references(ax, references)
            if floor is not None:
                ax.set_ylim(bottom=floor)
            ax.set_title(name)
            if k % ncols == 0:
                ax.set_ylabel(ylabel)
            if k // ncols == nrows - 1 or k + ncols >= len(groups):
                ax.set_xlabel(xlabel)
                ax.xaxis.set_tick_params(labelbottom=True)  # sharex hides them above the last row
        if title:  # wrapped to the figure's width: one narrow panel must not cut it off
            figure.suptitle(textwrap.fill(title, max(20, int(width / _TITLE_CHAR_PX))))
        handles = [axes.ravel()[0].plot([], [], color=rgb(PALETTE[i % len(PALETTE)]), label=lab)[0]
                   for i, lab in enumerate(labels)]
        handles += [axes.ravel()[0].plot([], [], color=rgb(REAL_COLOR), linestyle="--", label=lab)[0]
                    for lab, _ in references]
        names = labels + [lab for lab, _ in references]
        entry = _LEGEND_CHAR_PX * max((len(str(lab)) for lab in names), default=0) + _LEGEND_HANDLE_PX
        figure.legend(handles=handles, loc="outside lower center", frameon=False,
                      ncols=max(1, min(len(names), 6, int(width // entry))))
    return figure


def curves_plot(path, groups, xlabel, ylabel, title="", ncols=3, references=()):
    """:func:`curves_figure` written to ``path`` (PNG); returns the path."""
    return save_figure(curves_figure(groups, xlabel, ylabel, title, ncols, references), path)
