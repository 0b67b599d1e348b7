"""matplotlib set-up shared by every plot: a fixed style and font, an Agg canvas, stable PNG bytes.

matplotlib is imported inside these functions, never at module level, so ``import gpgan.viz``
stays cheap (the trainer imports it only when it draws). Figures are plain
``matplotlib.figure.Figure`` objects with their own ``FigureCanvasAgg``: no pyplot, no global
backend is selected, and the style below is applied with ``rc_context`` around building and
saving only, so a user's matplotlib settings are neither read nor changed.
"""
import contextlib
import os

from gpgan.files import atomic_write

DPI = 100

# tab10 as 0..255 RGB: the colour of series k is PALETTE[k % 10].
PALETTE = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189),
           (140, 86, 75), (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207)]

STYLE = {
    # DejaVu Sans ships with matplotlib (and is found before a system copy of the same name),
    # so the pixels do not depend on the fonts installed on the machine.
    "font.family": "DejaVu Sans",
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "legend.fontsize": 9,
    "legend.framealpha": 0.9,
    "text.parse_math": False,      # titles and labels hold metric names and sweep values, not TeX
    "axes.grid": True,
    "axes.axisbelow": True,
    "grid.color": "0.9",
    "grid.linewidth": 0.8,
    "figure.facecolor": "white",
    "savefig.facecolor": "white",
}


@contextlib.contextmanager
def plot_style():
    """Apply :data:`STYLE` for the duration of the block (restoring the caller's rcParams after).

    Both building and saving a figure run inside it: matplotlib creates tick labels when it
    draws, and they take their font from the rcParams in force then.
    """
    import matplotlib

    with matplotlib.rc_context(STYLE):
        yield


def new_figure(size):
    """An empty ``Figure`` of ``size = (width, height)`` pixels at :data:`DPI`, on an Agg canvas,
    with matplotlib's constrained layout (labels, titles and outside legends never overlap)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    width, height = size
    if not (width > 0 and height > 0):
        raise ValueError(f"figure size must be two positive pixel counts (width, height), got {size!r}")
    figure = Figure(figsize=(width / DPI, height / DPI), dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def save_figure(figure, path):
    """Write ``figure`` to ``path`` atomically (format from the extension; PNG by default),
    creating its folder: a failed write (a full disk) leaves no partial picture.

    PNGs carry no software version or timestamp, so the same figure gives the same bytes on every
    call with the same matplotlib version (sweep reports are rebuilt byte for byte).
    """
    path = os.fspath(path)
    extension = os.path.splitext(path)[1].lower()
    options = {"format": extension[1:] or "png"}
    if options["format"] == "png":
        options["metadata"] = {"Software": None}
    with plot_style():
        atomic_write(path, lambda f: figure.savefig(f, dpi=figure.dpi, **options))
    return path


def rgb(color):
    """A 0..255 ``(r, g, b)`` colour as matplotlib's 0..1 floats; a clear error for anything else."""
    try:
        values = tuple(float(c) for c in color)
    except (TypeError, ValueError):
        values = ()
    if len(values) != 3 or not all(0 <= c <= 255 for c in values):
        raise ValueError(f"colour must be an (r, g, b) tuple of numbers in 0..255, got {color!r}")
    return tuple(c / 255.0 for c in values)
