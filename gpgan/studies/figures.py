"""Figures of a sweep report: metric-vs-x plots (matplotlib, through gpgan.viz.line_figure) and
sample tiles (Pillow: the samples are images already, pasted unscaled or shrunk, never resampled
by a plotting library).

Both are laid out per *panel*: one figure per combination of the setting axes other than the
x and series axes (e.g. one per dataset).
"""

import math
import os

from PIL import Image, ImageDraw, ImageFont

from gpgan.studies.sweep import IGNORED, format_value
from gpgan.viz import line_figure, save_figure

__all__ = ["slug", "build_metric_figure", "metric_figure", "sample_tiles", "TILE", "IMAGE_TILE"]

MAX_TICKS = 12      # x values beyond this many get matplotlib's own ticks instead of one each

TILE = 200          # samples are scaled to fit a TILE x TILE cell (scatter plots of 2-D points)
IMAGE_TILE = 560    # grids of generated images: the trainer's grids (each image at twice its size
                    # or more, raw and EMA side by side, about 1,100 px wide for CIFAR-10) keep
                    # about their data's own resolution in such a cell
LABEL_H = 18        # height of the label strip above each cell
PAD = 4


def slug(text):
    """File-name fragment: 'eval/modes' -> 'eval-modes'."""
    out = "".join(c if (c.isalnum() or c in "._+-") else "-" for c in str(text))
    return out.strip("-") or "x"


def _as_number(v):
    """``v`` as a finite float, or None. Strings count too: PyYAML reads ``1e-3`` (no dot) as one."""
    if isinstance(v, bool):
        return None
    if isinstance(v, str):
        try:
            v = float(v)
        except ValueError:
            return None
    if isinstance(v, (int, float)) and math.isfinite(v):
        return float(v)
    return None


def _is_number(v):
    return _as_number(v) is not None


def build_metric_figure(points, x_axis, series_axis, x_values, metric, direction, title, references=()):
    """The Figure of :func:`metric_figure` (same arguments but the path), or None without points."""
    if not points:
        return None
    ylabel = f"{metric} ({'higher' if direction == 'max' else 'lower'} is better)"
    series_order = []
    for s, _, _, _ in points:
        if not any(s == t for t in series_order):
            series_order.append(s)
    by_series = {format_value(s): [(x, m, _spread(d)) for t, x, m, d in points if t == s] for s in series_order}
    xs_used = [x for x in x_values if any(x == px for _, px, _, _ in points if px is not IGNORED)]
    multi_x = any(len([p for p in pts if p[0] is not IGNORED]) > 1 for pts in by_series.values())

    if x_axis is None or not multi_x:
        # One mark per series value at categorical positions, no line: the values are not ordered.
        ticks, means, spreads = [], [], []
        for i, s in enumerate(series_order):
            x, m, d = by_series[format_value(s)][0]
            name = format_value(s) if x is IGNORED or x_axis is None else f"{format_value(s)} ({x_axis}={format_value(x)})"
            ticks.append((float(i), name))
            means.append(m)
            spreads.append(d)
        series = [("", [t for t, _ in ticks], means, spreads, "points")]
        return line_figure(series, xlabel=series_axis or "setting", ylabel=ylabel, title=title, xticks=ticks,
                           references=references)

    if all(_is_number(x) for x in xs_used):
        nums = [_as_number(x) for x in xs_used]
        pos = {format_value(x): n for x, n in zip(xs_used, nums)}
        logx = all(n > 0 for n in nums) and max(nums) / min(nums) >= 10
        style = "line"
    else:  # settings without an order (e.g. penalty types): points, no lines between them
        pos = {format_value(x): float(i) for i, x in enumerate(xs_used)}
        logx = False
        style = "points"
    ticks = [(pos[format_value(x)], format_value(x)) for x in xs_used] if len(xs_used) <= MAX_TICKS else None
    series = []
    for s in series_order:
        pts = by_series[format_value(s)]
        fixed = [p for p in pts if p[0] is IGNORED]
        if fixed:  # e.g. penalty "none": one value for every weight, drawn dashed across them
            _, m, d = fixed[0]
            xs = sorted(pos.values())
            series.append((f"{format_value(s)} (any {x_axis})", xs, [m] * len(xs), [d] * len(xs), "level"))
            continue
        pts = sorted(pts, key=lambda p: pos[format_value(p[0])])
        series.append((format_value(s) if series_axis else "",
                       [pos[format_value(p[0])] for p in pts], [p[1] for p in pts], [p[2] for p in pts], style))
    return line_figure(series, xlabel=x_axis, ylabel=ylabel, title=title, logx=logx, xticks=ticks,
                       references=references)


def metric_figure(path, points, x_axis, series_axis, x_values, metric, direction, title, references=()):
    """Plot ``metric`` against the x axis, one line per series value, into ``path`` (PNG).

    ``points``: list of (series value, x value or IGNORED, mean, std or None) in sweep order,
    only for settings with at least one finished run; ``x_values``: the x axis's values in
    sweep order. Error bars are the std over seeds (none where std is None: a single seed).
    The x axis is logarithmic when every x is a positive number and they span at least 10x,
    linear for other numbers, and categorical (in sweep order) otherwise. A series whose x axis
    is ignored (e.g. penalty "none", whose weight does not matter) is a dashed constant line
    over every x. When no series has two x values (one weight per type, or no x axis) the plot
    has one mark per series value instead. A mean of +inf (e.g. the reverse KL of a collapsed
    run), -inf or nan is marked in a shaded band at the top or bottom edge and labelled.
    ``references``: ``[(label, value)]`` drawn as dashed grey lines across the plot (the score of
    real data, say). Returns False (and writes nothing) when there are no points.
    """
    figure = build_metric_figure(points, x_axis, series_axis, x_values, metric, direction, title, references)
    if figure is None:
        return False
    save_figure(figure, path)
    return True


def _spread(std):
    """A std as an error bar half-width: NaN (no bar) when there is none."""
    return math.nan if std is None else float(std)


def _font():
    try:
        return ImageFont.load_default(size=12)
    except TypeError:  # Pillow < 10.1 has no size argument
        return ImageFont.load_default()


def _fit(img, size):
    img = img.convert("RGB")
    scale = min(size / img.width, size / img.height, 1.0)
    if scale < 1.0:
        img = img.resize((max(1, round(img.width * scale)), max(1, round(img.height * scale))), Image.LANCZOS)
    return img


def sample_tiles(path, cells, title="", tile=TILE):
    """Tile sample images into one labelled PNG.

    ``cells``: list of (row, column, label, image path); rows and columns are 0-based grid
    positions; empty grid positions stay white. ``tile``: each image is shrunk to fit a ``tile``
    x ``tile`` cell (never enlarged). Returns False when there is nothing to tile.
    """
    cells = [c for c in cells if c[3] is not None]
    if not cells:
        return False
    if max(c for _, c, _, _ in cells) == 0:
        cells = [(c, r, label, p) for r, c, label, p in cells]  # a single column reads better as a row
    images = {}
    for r, c, label, p in cells:
        with Image.open(p) as img:
            images[r, c] = (label, _fit(img, tile))
    nrows = max(r for r, _ in images) + 1
    ncols = max(c for _, c in images) + 1
    font = _font()
    measure = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    label_w = max(measure.textlength(label, font=font) for label, _ in images.values())
    # Cells are wide enough for their labels (up to a limit), so small samples stay readable.
    cw = max(max(img.width for _, img in images.values()), min(int(label_w) + 2, 2 * tile))
    ch = max(img.height for _, img in images.values())
    cell_w, cell_h = cw + PAD, ch + LABEL_H + PAD
    title_h = LABEL_H + PAD if title else 0
    width = max(ncols * cell_w + PAD, int(measure.textlength(title, font=font)) + 2 * PAD if title else 0)
    canvas = Image.new("RGB", (width, nrows * cell_h + PAD + title_h), "white")
    draw = ImageDraw.Draw(canvas)
    if title:
        draw.text((PAD, PAD), title, fill=(0, 0, 0), font=font)
    for (r, c), (label, img) in images.items():
        x0 = PAD + c * cell_w
        y0 = PAD + title_h + r * cell_h
        # Cut the label to the cell width so neighbours never overlap.
        text = label
        while text and draw.textlength(text, font=font) > cw:
            text = text[:-1]
        draw.text((x0, y0), text, fill=(0, 0, 0), font=font)
        canvas.paste(img, (x0 + (cw - img.width) // 2, y0 + LABEL_H + (ch - img.height) // 2))
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    canvas.save(path, format="PNG")
    return True
