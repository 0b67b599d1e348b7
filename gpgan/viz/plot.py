"""Scatter and line plots drawn with Pillow alone: axes, ticks, labels, legend, error bars.

Deliberately small: one plot per figure, linear axes (or a log x axis), the default bitmap font.
"""
import math
import os

import numpy
from PIL import Image, ImageDraw, ImageFont

from gpgan.backend import to_device

PALETTE = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189),
           (140, 86, 75), (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207)]
_BLACK, _GREY, _LIGHT = (0, 0, 0), (90, 90, 90), (228, 228, 228)


def _host(x):
    data = getattr(x, "data", x)
    return numpy.asarray(to_device(data, "cpu") if hasattr(data, "shape") else data, dtype=numpy.float64)


def nice_ticks(lo, hi, count=6):
    """Round tick values covering [lo, hi]: steps of 1, 2 or 5 times a power of ten."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"plot: axis limits must be finite, got {lo}, {hi}")
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / max(count - 1, 1)
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(lo / step - 1e-9)
    last = math.floor(hi / step + 1e-9)
    return [k * step for k in range(first, last + 1)]


def _log_ticks(lo, hi):
    """Powers of ten in [lo, hi] (with 2 and 5 multiples when the range spans under two decades)."""
    first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    mults = (1,) if last - first > 2 else (1, 2, 5)
    ticks = [m * 10.0 ** e for e in range(first, last + 1) for m in mults]
    return [t for t in ticks if lo * (1 - 1e-9) <= t <= hi * (1 + 1e-9)]


def _label(value):
    text = f"{value:.4g}"
    return "0" if text in ("-0", "0") else text


def _padded(lo, hi, fraction=0.05):
    if hi <= lo:
        pad = abs(lo) * 0.1 or 1.0
        return lo - pad, hi + pad
    pad = (hi - lo) * fraction
    return lo - pad, hi + pad


class _Axes:
    """A white canvas with a plot area and the data-to-pixel transform."""

    def __init__(self, size, xlim, ylim, logx=False, margins=(72, 34, 20, 52)):
        self.image = Image.new("RGB", size, (255, 255, 255))
        self.draw = ImageDraw.Draw(self.image)
        self.font = ImageFont.load_default()
        left, top, right, bottom = margins
        self.box = (left, top, size[0] - right, size[1] - bottom)
        self.xlim, self.ylim, self.logx = xlim, ylim, logx

    def _fx(self, x):
        x = numpy.asarray(x, dtype=numpy.float64)
        lo, hi = self.xlim
        if self.logx:
            x, lo, hi = numpy.log10(x), math.log10(lo), math.log10(hi)
        return self.box[0] + (x - lo) / (hi - lo) * (self.box[2] - self.box[0])

    def _fy(self, y):
        lo, hi = self.ylim
        return self.box[3] - (numpy.asarray(y, dtype=numpy.float64) - lo) / (hi - lo) * (self.box[3] - self.box[1])

    def to_pixels(self, x, y):
        return self._fx(x), self._fy(y)

    def text_size(self, text):
        left, top, right, bottom = self.draw.textbbox((0, 0), text, font=self.font)
        return right - left, bottom - top

    def frame(self, title, xlabel, ylabel):
        d, (x0, y0, x1, y1) = self.draw, self.box
        xticks = _log_ticks(*self.xlim) if self.logx else nice_ticks(*self.xlim)
        for t in xticks:
            px = float(self._fx(t))
            if x0 - 0.5 <= px <= x1 + 0.5:
                d.line([(px, y0), (px, y1)], fill=_LIGHT)
                d.line([(px, y1), (px, y1 + 4)], fill=_BLACK)
                w, _ = self.text_size(_label(t))
                d.text((px - w / 2, y1 + 7), _label(t), fill=_BLACK, font=self.font)
        for t in nice_ticks(*self.ylim):
            py = float(self._fy(t))
            if y0 - 0.5 <= py <= y1 + 0.5:
                d.line([(x0, py), (x1, py)], fill=_LIGHT)
                d.line([(x0 - 4, py), (x0, py)], fill=_BLACK)
                w, h = self.text_size(_label(t))
                d.text((x0 - 7 - w, py - h / 2 - 1), _label(t), fill=_BLACK, font=self.font)
        d.rectangle([x0, y0, x1, y1], outline=_BLACK)
        if title:
            w, _ = self.text_size(title)
            d.text(((x0 + x1) / 2 - w / 2, 10), title, fill=_BLACK, font=self.font)
        if xlabel:
            w, _ = self.text_size(xlabel)
            d.text(((x0 + x1) / 2 - w / 2, y1 + 26), xlabel, fill=_BLACK, font=self.font)
        if ylabel:  # drawn horizontally on a strip, then rotated a quarter turn
            w, h = self.text_size(ylabel)
            strip = Image.new("RGB", (w + 4, h + 6), (255, 255, 255))
            ImageDraw.Draw(strip).text((2, 1), ylabel, fill=_BLACK, font=self.font)
            strip = strip.rotate(90, expand=True)
            self.image.paste(strip, (6, int((y0 + y1) / 2 - strip.height / 2)))

    def legend(self, entries, px=None, py=None):
        """``entries``: list of (label, rgb); a framed box in the corner of the plot area that
        covers the fewest of the plotted pixel positions ``px, py`` (top-right when none)."""
        entries = [(str(label), color) for label, color in entries if label]
        if not entries:
            return
        d = self.draw
        widths = [self.text_size(label)[0] for label, _ in entries]
        row = max(self.text_size("Hg")[1], 10) + 6
        box_w, box_h = max(widths) + 34, row * len(entries) + 8
        bx0, by0, bx1, by1 = self.box
        corners = [(bx1 - 8 - box_w, by0 + 8), (bx0 + 8, by0 + 8), (bx1 - 8 - box_w, by1 - 8 - box_h),
                   (bx0 + 8, by1 - 8 - box_h)]
        x0, y0 = corners[0]
        if px is not None and len(px):
            covered = [int(((px >= cx) & (px <= cx + box_w) & (py >= cy) & (py <= cy + box_h)).sum())
                       for cx, cy in corners]
            x0, y0 = corners[covered.index(min(covered))]
        x1 = x0 + box_w
        d.rectangle([x0, y0, x1, y0 + box_h], fill=(255, 255, 255), outline=_GREY)
        for k, (label, color) in enumerate(entries):
            cy = y0 + 4 + k * row + row / 2
            d.rectangle([x0 + 6, cy - 4, x0 + 20, cy + 4], fill=tuple(color))
            d.text((x0 + 26, cy - row / 2 + 2), label, fill=_BLACK, font=self.font)

    def stamp(self, px, py, color, radius=2):
        """Filled discs at pixel positions (vectorized: one loop over the disc's offsets only)."""
        pixels = numpy.array(self.image)
        x0, y0, x1, y1 = self.box
        cx, cy = numpy.rint(px).astype(numpy.int64), numpy.rint(py).astype(numpy.int64)
        for dy in range(-radius, radius + 1):
            for dx in range(-radius, radius + 1):
                if dx * dx + dy * dy > radius * radius + radius:
                    continue
                x, y = cx + dx, cy + dy
                inside = (x > x0) & (x < x1) & (y > y0) & (y < y1)
                pixels[y[inside], x[inside]] = color
        self.image = Image.fromarray(pixels)
        self.draw = ImageDraw.Draw(self.image)

    def save(self, path):
        directory = os.path.dirname(os.fspath(path))
        if directory:
            os.makedirs(directory, exist_ok=True)
        self.image.save(path)


def scatter_plot(path, point_sets, limits=None, title="", size=(560, 560), radius=2, xlabel="x", ylabel="y"):
    """Scatter plot of 2-D point sets written to ``path`` (PNG).

    Args:
        point_sets: list of ``(points (n, 2), rgb color, label)``; later sets are drawn on top.
        limits: ``((xmin, xmax), (ymin, ymax))``, or None to fit every point with a 5% margin.
        title: text above the plot; ``xlabel``, ``ylabel``: axis labels.
    """
    sets = [(_host(p).reshape(-1, 2), tuple(int(c) for c in color), label) for p, color, label in point_sets]
    if limits is None:
        every = numpy.concatenate([p for p, _, _ in sets if len(p)] or [numpy.zeros((1, 2))])
        every = every[numpy.isfinite(every).all(axis=1)]
        if len(every) == 0:
            every = numpy.zeros((1, 2))
        limits = (_padded(every[:, 0].min(), every[:, 0].max()), _padded(every[:, 1].min(), every[:, 1].max()))
    axes = _Axes(size, tuple(map(float, limits[0])), tuple(map(float, limits[1])))
    axes.frame(title, xlabel, ylabel)
    all_px, all_py = [], []
    for points, color, _ in sets:
        finite = numpy.isfinite(points).all(axis=1)
        px, py = axes.to_pixels(points[finite, 0], points[finite, 1])
        axes.stamp(px, py, color, radius)
        all_px.append(px)
        all_py.append(py)
    axes.legend([(label, color) for _, color, label in sets], numpy.concatenate(all_px), numpy.concatenate(all_py))
    axes.save(path)


def line_plot(path, series, xlabel, ylabel, title="", logx=False, size=(640, 440)):
    """Line plot with markers and optional error bars written to ``path`` (PNG).

    Args:
        series: list of ``(label, xs, ys, yerr or None)``; ``yerr`` is a half-width per point.
        xlabel, ylabel, title: axis labels and title.
        logx: logarithmic x axis (every x must be positive).
    """
    prepared = []
    for k, (label, xs, ys, yerr) in enumerate(series):
        xs, ys = _host(xs).ravel(), _host(ys).ravel()
        if xs.shape != ys.shape:
            raise ValueError(f"line_plot: series {label!r} has {xs.size} xs but {ys.size} ys")
        err = None if yerr is None else numpy.broadcast_to(_host(yerr).ravel(), ys.shape)
        if logx and (xs <= 0).any():
            raise ValueError(f"line_plot: logx needs positive xs, series {label!r} has {xs.min()}")
        prepared.append((label, xs, ys, err, PALETTE[k % len(PALETTE)]))
    xs_all = numpy.concatenate([p[1] for p in prepared] or [numpy.zeros(1)])
    lows = [p[2] - (0 if p[3] is None else p[3]) for p in prepared]
    highs = [p[2] + (0 if p[3] is None else p[3]) for p in prepared]
    ys_all = numpy.concatenate(lows + highs or [numpy.zeros(1)])
    xs_all, ys_all = xs_all[numpy.isfinite(xs_all)], ys_all[numpy.isfinite(ys_all)]
    if xs_all.size == 0:
        xs_all = numpy.ones(1)
    if ys_all.size == 0:
        ys_all = numpy.zeros(1)
    if logx:
        lo, hi = xs_all.min(), xs_all.max()
        xlim = (lo / 1.25, hi * 1.25) if hi > lo else (lo / 2, hi * 2)
    else:
        xlim = _padded(xs_all.min(), xs_all.max())
    axes = _Axes(size, xlim, _padded(ys_all.min(), ys_all.max()), logx=logx)
    axes.frame(title, xlabel, ylabel)
    d = axes.draw
    for label, xs, ys, err, color in prepared:
        ok = numpy.isfinite(xs) & numpy.isfinite(ys)
        px, py = axes.to_pixels(xs[ok], ys[ok])
        if err is not None:
            _, top = axes.to_pixels(xs[ok], ys[ok] + err[ok])
            _, bottom = axes.to_pixels(xs[ok], ys[ok] - err[ok])
            for x, t, b in zip(px, top, bottom):  # one bar per plotted point
                d.line([(x, t), (x, b)], fill=color)
                d.line([(x - 3, t), (x + 3, t)], fill=color)
                d.line([(x - 3, b), (x + 3, b)], fill=color)
        if len(px) > 1:
            d.line(list(zip(px.tolist(), py.tolist())), fill=color, width=2)
    all_px, all_py = [numpy.zeros(0)], [numpy.zeros(0)]
    for label, xs, ys, err, color in prepared:
        ok = numpy.isfinite(xs) & numpy.isfinite(ys)
        px, py = axes.to_pixels(xs[ok], ys[ok])
        if ok.sum() <= 60:  # markers only where they stay readable
            axes.stamp(px, py, color, radius=3)
        if len(px) > 1:  # the lines between points count as covered too
            t = numpy.linspace(0, 1, 8)[None, :]
            px = (px[:-1, None] * (1 - t) + px[1:, None] * t).ravel()
            py = (py[:-1, None] * (1 - t) + py[1:, None] * t).ravel()
        all_px.append(px)
        all_py.append(py)
    axes.legend([(label, color) for label, _, _, _, color in prepared], numpy.concatenate(all_px),
                numpy.concatenate(all_py))
    axes.save(path)
