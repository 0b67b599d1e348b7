"""Image grids (Pillow) and plots (matplotlib): shapes, where things are drawn, what the figures
hold, byte-stable files, and that matplotlib stays out of the way until a plot is drawn."""
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from gpgan.viz import (PALETTE, density_alpha, image_grid, line_figure, line_plot, plot_style, save_figure,
                       save_image_grid, scatter_figure, scatter_plot, scatter_samples, scatter_samples_figure)
from gpgan.viz.plot import GENERATED_COLOR, REAL_COLOR

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_image_grid_layout_and_values():
    images = np.stack([np.full((3, 4, 5), v) for v in (-1.0, 0.0, 1.0)])  # N=3, H=4, W=5
    grid = image_grid(images, nrow=2)
    assert grid.dtype == np.uint8
    assert grid.shape == (2 * (4 + 2) + 2, 2 * (5 + 2) + 2, 3)
    np.testing.assert_array_equal(grid[2:6, 2:7], 0)        # -1 -> 0
    np.testing.assert_array_equal(grid[2:6, 9:14], 128)     # 0 -> 127.5 rounded
    np.testing.assert_array_equal(grid[8:12, 2:7], 255)     # +1 -> 255, second row
    np.testing.assert_array_equal(grid[8:12, 9:14], 0)      # empty cell stays padding
    np.testing.assert_array_equal(grid[:2], 0)              # 2 px border


def test_image_grid_keeps_channel_order_and_clips():
    images = np.zeros((1, 3, 2, 2))
    images[0, 0] = 1.0     # red
    images[0, 2] = 5.0     # blue, clipped to 1
    grid = image_grid(images, nrow=8)
    assert grid.shape == (6, 6, 3)
    np.testing.assert_array_equal(grid[2, 2], [255, 128, 255])


def test_image_grid_errors():
    with pytest.raises(ValueError, match="image_grid.*\\(N, 3, H, W\\)"):
        image_grid(np.zeros((2, 3, 4)), 2)


def test_save_image_grid(tmp_path):
    path = tmp_path / "sub" / "grid.png"
    save_image_grid(path, np.random.default_rng(0).uniform(-1, 1, (10, 3, 8, 8)), nrow=5)
    with Image.open(path) as im:
        assert im.size == (5 * 10 + 2, 2 * 10 + 2) and im.mode == "RGB"


def test_grid_picture_upscales_captions_and_sets_grids_side_by_side():
    from gpgan.viz.grid import CAPTION_SIZE, grid_picture, readable_scale, upscale

    rng = np.random.default_rng(0)
    raw, ema = rng.uniform(-1, 1, (64, 3, 32, 32)), rng.uniform(-1, 1, (64, 3, 32, 32))
    one = image_grid(raw, nrow=8)
    assert one.shape[1] == 8 * 34 + 2 and readable_scale(one.shape[1]) == 2  # 274 px -> 548
    strip = CAPTION_SIZE + 8
    picture = grid_picture([("raw weights", raw), ("EMA weights", ema)], 8, caption="step 200")
    width = 2 * 548 + 8
    assert picture.shape == (2 * strip + 548, width, 3) and picture.dtype == np.uint8
    # Each grid is its own pixels, each repeated 2 x 2 (nearest neighbour), below its label.
    np.testing.assert_array_equal(picture[2 * strip:, :548], upscale(one, 2))
    np.testing.assert_array_equal(picture[2 * strip:, 556:], upscale(image_grid(ema, nrow=8), 2))
    np.testing.assert_array_equal(upscale(one, 2)[::2, ::2], one)
    # The caption and the labels are drawn: dark text on the white strips.
    for rows in (picture[:strip], picture[strip:2 * strip, :548], picture[strip:2 * strip, 556:]):
        assert (rows < 100).all(axis=2).sum() > 20
    # One grid, no caption, an explicit scale.
    assert grid_picture([(None, raw[:4])], 2, scale=3).shape == (3 * (2 * 34 + 2), 3 * (2 * 34 + 2), 3)
    with pytest.raises(ValueError, match="whole number >= 1"):
        upscale(one, 0)


def test_saving_a_picture_on_a_full_disk_leaves_the_old_file_and_no_partial_one(tmp_path, monkeypatch):
    import errno

    from PIL import Image as PILImage

    path = tmp_path / "grid.png"
    save_image_grid(path, np.zeros((4, 3, 8, 8)), nrow=2)
    before = path.read_bytes()

    def full_disk(self, fp, *args, **kwargs):
        fp.write(b"\x89PNG partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(PILImage.Image, "save", full_disk)
    with pytest.raises(OSError) as info:
        save_image_grid(path, np.ones((4, 3, 8, 8)), nrow=2, caption="step 1", scale=None)
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(path)
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["grid.png"]


# ----------------------------------------------------------------------------------------------
# helpers: data coordinates -> pixels of the saved PNG

def saved_pixels(figure, path):
    """Save ``figure`` and return its RGB pixels; the figure is drawn, so transforms are final."""
    save_figure(figure, path)
    with Image.open(path) as img:
        assert img.size == (round(figure.bbox.width), round(figure.bbox.height))
        return np.asarray(img.convert("RGB")).astype(np.int64)


def pixel_at(pixels, transform, xy):
    """The pixel under data point ``xy`` (display y grows upwards, image rows downwards)."""
    x, y = transform.transform([xy])[0]
    return pixels[int(pixels.shape[0] - y), int(x)]


def blend(color, alpha, under):
    return np.array([alpha * c + (1 - alpha) * u for c, u in zip(color, under)])


# ----------------------------------------------------------------------------------------------
# scatter plots

def test_scatter_samples_real_shows_under_translucent_generated(tmp_path):
    # coordinates off the grid lines, whose grey would tint the blends below
    real = np.array([[0.3, 0.3], [-0.7, 0.7]])
    generated = np.array([[0.3, 0.3], [0.7, -0.7], [9.0, 9.0], [np.nan, 0.0]])  # 2 out of view
    figure = scatter_samples_figure(real, generated, limits=((-2, 2), (-2, 2)),
                                    title="step 500: 25/25 modes", subtitle="quickstart")
    pixels = saved_pixels(figure, tmp_path / "s.png")
    ax = figure.axes[0]
    assert not {0.3, 0.7, -0.7} & {*ax.get_xticks(), *ax.get_yticks()}
    alpha = density_alpha(len(generated))
    assert 0 < alpha < 1
    # real alone: opaque grey; generated alone: blue over white; both: blue over the grey.
    np.testing.assert_allclose(pixel_at(pixels, ax.transData, (-0.7, 0.7)), REAL_COLOR, atol=3)
    np.testing.assert_allclose(pixel_at(pixels, ax.transData, (0.7, -0.7)), blend(GENERATED_COLOR, alpha, (255,) * 3),
                               atol=3)
    np.testing.assert_allclose(pixel_at(pixels, ax.transData, (0.3, 0.3)), blend(GENERATED_COLOR, alpha, REAL_COLOR),
                               atol=3)
    np.testing.assert_allclose(pixel_at(pixels, ax.transData, (0.7, 0.7)), (255, 255, 255), atol=1)  # empty
    assert figure.get_suptitle() == "step 500: 25/25 modes" and ax.get_title() == "quickstart"
    assert [t.get_text() for t in figure.legends[0].get_texts()] == ["real", "generated (2 outside the plot)"]
    assert ax.get_aspect() == 1.0


def test_scatter_samples_default_view_fits_the_real_points(tmp_path):
    real = np.array([[0.0, 10.0], [4.0, 12.0]])
    figure = scatter_samples_figure(real, np.array([[100.0, 100.0]]), title="collapsed")
    ax = figure.axes[0]
    assert ax.get_xlim() == pytest.approx((-1.0, 5.0)) and ax.get_ylim() == pytest.approx((9.5, 12.5))
    assert ax.get_title() == "collapsed" and figure.get_suptitle() == ""
    path = scatter_samples(tmp_path / "sub" / "points.png", real, real + 0.1)
    with Image.open(path) as img:
        assert img.format == "PNG" and img.size == (560, 560)


def test_density_alpha_falls_with_the_number_of_points():
    alphas = [density_alpha(n) for n in (1, 100, 2500, 10 ** 6)]
    assert alphas == sorted(alphas, reverse=True)
    assert alphas[0] == 0.8 and alphas[2] == pytest.approx(12 / 50) and alphas[3] == 0.08


def test_scatter_plot_draws_points_where_they_belong_later_sets_on_top(tmp_path):
    red, blue = (220, 0, 0), (0, 0, 255)
    sets = [(np.array([[0.0, 0.0], [0.5, 0.5]]), red, "red"), (np.array([[0.5, 0.5]]), blue, "blue"),
            (np.zeros((0, 2)), (0, 200, 0), "")]
    figure = scatter_figure(sets, limits=((-1, 1), (-1, 1)), title="title", xlabel="theta", ylabel="psi")
    pixels = saved_pixels(figure, tmp_path / "scatter.png")
    ax = figure.axes[0]
    np.testing.assert_allclose(pixel_at(pixels, ax.transData, (0, 0)), red, atol=2)
    np.testing.assert_allclose(pixel_at(pixels, ax.transData, (0.5, 0.5)), blue, atol=2)
    assert [t.get_text() for t in figure.legends[0].get_texts()] == ["red", "blue"]  # "" stays out
    assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_title()) == ("theta", "psi", "title")
    # the file-writing form keeps the old call signature and the requested pixel size
    scatter_plot(tmp_path / "old.png", sets, limits=((-1, 1), (-1, 1)), title="t", size=(500, 400))
    with Image.open(tmp_path / "old.png") as img:
        assert img.size == (500, 400)


def test_scatter_plot_fits_every_finite_point_by_default():
    figure = scatter_figure([(np.array([[0.0, 0.0], [10.0, 20.0], [np.inf, 0.0]]), (0, 0, 0), "a")])
    ax = figure.axes[0]
    assert ax.get_xlim() == pytest.approx((-0.5, 10.5)) and ax.get_ylim() == pytest.approx((-1.0, 21.0))


@pytest.mark.parametrize("call, message", [
    (lambda: scatter_samples_figure(np.zeros((3, 3)), np.zeros((3, 2))), r"real must be an \(N, 2\) array.*\(3, 3\)"),
    (lambda: scatter_samples_figure(np.zeros((3, 2)), np.zeros(5)), r"generated must be an \(N, 2\) array.*\(5,\)"),
    (lambda: scatter_samples_figure(np.zeros((3, 2)), np.zeros((3, 2)), limits=((1, 0), (0, 1))), "min < max"),
    (lambda: scatter_samples_figure(np.zeros((3, 2)), np.zeros((3, 2)), limits=(0, 1)), r"\(\(xmin, xmax\)"),
    (lambda: scatter_figure([(np.zeros((2, 2)), "red", "a")]), r"colour must be an \(r, g, b\).*'red'"),
    (lambda: scatter_figure([(np.zeros((2, 2)), (0, 0, 300), "a")]), "0..255"),
])
def test_scatter_bad_input_is_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# ----------------------------------------------------------------------------------------------
# line plots

def error_bar_segments(ax):
    """[(x, y_low, y_high)] of every error bar drawn on ``ax``, per errorbar call."""
    out = []
    for container in ax.containers:
        _, _, (bars,) = container.lines
        out.append([(s[0][0], min(s[0][1], s[1][1]), max(s[0][1], s[1][1])) for s in bars.get_segments()])
    return out


def test_line_figure_error_bars_and_breaks_at_non_finite_values():
    figure = line_figure([("a", [1, 2, 3, 4], [1.0, 2.0, math.inf, 3.0], [0.5, math.nan, 0.1, 0.25]),
                          ("b", [1, 2, 3, 4], [2.0, 1.0, 1.5, 2.5], None)], "x", "y", title="t")
    ax = figure.axes[0]
    # one errorbar call, for series a, with bars only where both value and std are finite
    assert error_bar_segments(ax) == [[(1.0, 0.5, 1.5), (4.0, 2.75, 3.25)]]
    line_a = next(line for line in ax.get_lines() if line.get_label() == "a")
    ydata = np.asarray(line_a.get_ydata(), dtype=float)
    np.testing.assert_array_equal(np.isnan(ydata), [False, False, True, False])  # the line breaks at inf
    assert [t.get_text() for t in figure.legends[0].get_texts()] == ["a", "b"]
    assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_title()) == ("x", "y", "t")


def test_non_finite_values_are_marked_at_the_edge_where_they_can_be_seen(tmp_path):
    figure = line_figure([("a", [0.1, 1, 10], [3.0, math.inf, 4.0], [0.5, 0.5, 0.5]),
                          ("b", [0.1, 1, 10], [-math.inf, 2.0, math.nan], None)],
                         "penalty.weight", "reverse KL", logx=True)
    pixels = saved_pixels(figure, tmp_path / "marks.png")
    ax = figure.axes[0]
    assert ax.get_xscale() == "log"
    marks = [line for line in ax.get_lines() if line.get_marker() in ("^", "v", "X")]
    assert sorted(line.get_marker() for line in marks) == ["X", "^", "v"]
    assert sorted(t.get_text() for t in ax.texts) == ["-inf", "inf", "nan"]
    a_color, b_color = PALETTE[0], PALETTE[1]
    for line in marks:
        (x,), (height,) = line.get_xdata(), line.get_ydata()
        assert (x, line.get_marker()) in [(1, "^"), (0.1, "v"), (10, "X")]
        assert height > 0.8 if line.get_marker() == "^" else height < 0.2  # top band / bottom band
        # the mark is drawn, visibly, in its series' colour inside the figure
        np.testing.assert_allclose(pixel_at(pixels, line.get_transform(), (x, height)),
                                   a_color if line.get_marker() == "^" else b_color, atol=3)
    # every finite value and bar stays between the bands, and no y tick sits in a band
    lo, hi = ax.get_ylim()
    band = 0.12 * (hi - lo)
    assert lo + band <= 2.0 and 4.5 <= hi - band  # b's 2.0 and a's 4 + 0.5
    assert all(lo + band <= t <= hi - band for t in ax.get_yticks())


def test_series_with_equal_values_stand_apart_and_levels_are_bands(tmp_path):
    figure = line_figure([("a", [1, 2], [1.0, 2.0], [0.5, 0.5]), ("b", [1, 2], [1.0, 2.0], [0.5, 0.5]),
                          ("none", [1, 2], [1.5, 1.5], [0.2, 0.2], "level")], "x", "y")
    figure.canvas.draw()
    ax = figure.axes[0]
    bar_x = [[c.lines[2][0].get_transform().transform([(s[0][0], s[0][1])])[0][0]
              for s in c.lines[2][0].get_segments()] for c in ax.containers]
    assert len(bar_x) == 2  # the level draws no bars
    assert bar_x[1][0] - bar_x[0][0] > 3 and bar_x[1][1] - bar_x[0][1] > 3  # pixels apart at each x
    level = next(line for line in ax.get_lines() if line.get_label() == "none")
    assert level.get_linestyle() == "--"
    from matplotlib.collections import PolyCollection

    (band,) = [c for c in ax.collections if isinstance(c, PolyCollection)]  # the level's std band
    ys = band.get_paths()[0].vertices[:, 1]
    assert ys.min() == pytest.approx(1.3) and ys.max() == pytest.approx(1.7)


def test_line_plot_categorical_ticks_and_bad_input(tmp_path):
    figure = line_figure([("", [0, 1, 2], [1.0, 2.0, 3.0], None, "points")], "penalty.type", "modes",
                         xticks=[(0, "none"), (1, "r1"), (2, "wgan_gp")])
    ax = figure.axes[0]
    figure.canvas.draw()
    assert [t.get_text() for t in ax.get_xticklabels()] == ["none", "r1", "wgan_gp"]
    assert list(ax.get_xticks()) == [0, 1, 2]
    assert ax.get_lines()[0].get_linestyle() == "None" and not figure.legends  # no labels, no legend
    with pytest.raises(ValueError, match="logx needs positive xs"):
        line_plot(tmp_path / "bad.png", [("a", [0, 1], [1, 2], None)], "x", "y", logx=True)
    with pytest.raises(ValueError, match="2 xs but 3 ys"):
        line_figure([("a", [0, 1], [1, 2, 3], None)], "x", "y")
    with pytest.raises(ValueError, match="style 'dotted'; accepted: line, points, level"):
        line_figure([("a", [0, 1], [1, 2], None, "dotted")], "x", "y")


# ----------------------------------------------------------------------------------------------
# files, fonts and matplotlib's global state

def test_same_figure_same_bytes_without_version_or_time(tmp_path):
    series = [("a", [1, 10, 100], [0.1, math.inf, 0.4], [0.05, 0.1, 0.1]), ("b", [1, 10, 100], [0.3, 0.2, 0.7], None)]
    first = line_plot(tmp_path / "one.png", series, "steps", "value", title="t", logx=True)
    second = line_plot(tmp_path / "two.png", series, "steps", "value", title="t", logx=True)
    with open(first, "rb") as a, open(second, "rb") as b:
        assert a.read() == b.read()
    with Image.open(first) as img:
        assert img.format == "PNG" and "Software" not in img.info and img.size == (640, 440)
    points = np.random.default_rng(0).normal(size=(500, 2))
    scatter_samples(tmp_path / "s1.png", points, points + 0.1, title="a")
    scatter_samples(tmp_path / "s2.png", points, points + 0.1, title="a")
    assert (tmp_path / "s1.png").read_bytes() == (tmp_path / "s2.png").read_bytes()


def test_text_uses_matplotlibs_bundled_dejavu_sans():
    import matplotlib
    from matplotlib.font_manager import FontProperties, findfont

    with plot_style():
        font = findfont(FontProperties())
    assert os.path.basename(font) == "DejaVuSans.ttf"
    assert os.path.commonpath([font, matplotlib.get_data_path()]) == matplotlib.get_data_path()


def test_matplotlib_is_imported_only_to_draw_and_leaves_pyplot_and_rcparams_alone(tmp_path):
    script = f"""
import sys
import gpgan.viz
assert "matplotlib" not in sys.modules, "importing gpgan.viz imported matplotlib"
import matplotlib
matplotlib.rcParams["font.size"] = 23.0
matplotlib.rcParams["axes.grid"] = False
gpgan.viz.scatter_plot({str(tmp_path / 'p.png')!r}, [([[0.0, 1.0]], (0, 0, 0), "a")])
gpgan.viz.line_plot({str(tmp_path / 'l.png')!r}, [("a", [0, 1], [1, 2], None)], "x", "y")
assert "matplotlib.pyplot" not in sys.modules, "drawing imported pyplot"
assert matplotlib.rcParams["font.size"] == 23.0 and matplotlib.rcParams["axes.grid"] is False
print("ok")
"""
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_curves_figure_keeps_colours_per_label_and_leaves_out_non_finite_means():
    from gpgan.viz import curves_figure

    groups = [("r1", [("w=0.1", [1, 2, 3], [1.0, 2.0, float("inf")], [0.1, 0.2, 0.3]),
                      ("w=1", [1, 2, 3], [2.0, 3.0, 4.0], None)]),
              ("r2", [("w=1", [1, 2, 3], [3.0, 1.0, 2.0], [0.5, 0.5, 0.5])])]
    figure = curves_figure(groups, "generator step", "eval/modes")
    first, second = figure.axes[0], figure.axes[1]
    assert first.get_title() == "r1" and second.get_title() == "r2"
    lines = [line for line in first.get_lines() if len(line.get_xdata())]
    assert list(lines[0].get_xdata()) == [1, 2] and list(lines[0].get_ydata()) == [1.0, 2.0]  # inf left out
    colour_w1 = [line.get_color() for line in lines if line.get_label() == "w=1"][0]
    assert [line.get_color() for line in second.get_lines() if line.get_label() == "w=1"] == [colour_w1]
    assert len(first.collections) == 1 and len(second.collections) == 1  # bands only where a std is given
    assert first.get_yscale() == "linear"  # means from 1 to 4
    with pytest.raises(ValueError, match="no groups"):
        curves_figure([], "x", "y")


def test_a_one_panel_curves_figure_keeps_its_title_and_legend_inside():
    """One narrow panel with a sweep's long title and labels: the figure is widened, the title
    wrapped, the legend folded into rows, and every text lies within the figure once drawn."""
    from gpgan.viz import curves_figure
    from gpgan.viz.plot import CURVE_MIN_WIDTH_PX

    title = "eval/high_quality, pairing=wgan_gp_paper, data.name=grid25, during training"
    groups = [("wgan_gp", [("penalty.weight=0.1", [1, 2], [0.1, 0.2], None),
                           ("penalty.weight=10", [1, 2], [0.0, 0.1], None)])]
    figure = curves_figure(groups, "generator step", "eval/high_quality", title=title)
    width, height = figure.get_size_inches() * figure.dpi
    assert width == pytest.approx(CURVE_MIN_WIDTH_PX)
    assert "\n" in figure._suptitle.get_text()
    assert figure._suptitle.get_text().replace("\n", " ") == title
    renderer = figure.canvas.get_renderer()
    figure.draw(renderer)
    texts = [figure._suptitle] + list(figure.legends[0].get_texts())
    for text in texts:
        box = text.get_window_extent(renderer)
        assert box.x0 >= 0 and box.x1 <= width + 0.5, (text.get_text(), box)


def test_curves_over_two_decades_get_a_log_axis_and_bands_stop_at_its_bottom():
    from gpgan.viz import curves_figure

    steps = [1000, 2000, 3000, 4000]
    falling = [1.2, 0.05, 0.008, 0.005]  # a reverse KL as runs converge
    groups = [("r1", [("w=1", steps, falling, [0.3, 0.1, 0.004, 0.002])]),
              ("lp", [("w=1", steps, [0.9, 0.5, 0.2, 0.1], [0.1, 0.1, 0.1, 0.1])])]
    figure = curves_figure(groups, "generator step", "eval/reverse_kl")
    first, second = figure.axes[0], figure.axes[1]
    assert first.get_yscale() == "log" and second.get_yscale() == "log"  # one scale for every panel
    bottom = first.get_ylim()[0]
    assert bottom == pytest.approx(0.005 / 2)
    band = first.collections[0].get_paths()[0].vertices[:, 1]
    assert band.min() == pytest.approx(bottom)  # 0.05 - 0.1 < 0 is drawn to the bottom, not lost
    # A mean of zero or below keeps the axis linear (a log axis cannot show it).
    flat = curves_figure([("none", [("-", steps, [0.0, 0.5, 1.0, 2.0], None)])], "step", "y")
    assert flat.axes[0].get_yscale() == "linear"


def test_reference_lines_are_dashed_grey_in_every_panel_inside_the_y_range_and_in_the_legend():
    from gpgan.viz import curves_figure, line_figure
    from gpgan.viz.figure import rgb
    from gpgan.viz.plot import REAL_COLOR

    groups = [("none", [("setting=r1", [1, 2, 3], [40.0, 30.0, 25.0], None)]),
              ("diffaugment", [("setting=r1", [1, 2, 3], [35.0, 28.0, 20.0], [1.0, 1.0, 1.0])])]
    figure = curves_figure(groups, "generator step", "eval/fid", references=[("real data", 5.0)])
    for ax in figure.axes[:2]:
        dashed = [line for line in ax.get_lines() if line.get_label() == "real data" and len(line.get_xdata())]
        assert len(dashed) == 1 and dashed[0].get_linestyle() == "--"
        assert list(dashed[0].get_ydata()) == [5.0, 5.0] and dashed[0].get_color() == rgb(REAL_COLOR)
        assert ax.get_ylim()[0] < 5.0 < ax.get_ylim()[1]  # far below the curves, still shown
    assert [t.get_text() for t in figure.legends[0].get_texts()] == ["setting=r1", "real data"]

    series = [("", [0.0, 1.0], [30.0, 20.0], [2.0, 1.0], "points")]
    figure = line_figure(series, "setting", "eval/fid", references=[("real data", 4.0)])
    ax = figure.axes[0]
    assert [line.get_ydata()[0] for line in ax.get_lines() if line.get_label() == "real data"] == [4.0]
    assert ax.get_ylim()[0] < 4.0 and ax.get_ylim()[1] > 31.0
    assert [t.get_text() for t in figure.legends[0].get_texts()] == ["real data"]
    # Two decades with the reference: a log axis, the reference inside it.
    figure = line_figure([("", [0.0, 1.0], [30.0, 20.0], None)], "setting", "eval/kid", references=[("real", 0.1)])
    assert figure.axes[0].get_yscale() == "log" and figure.axes[0].get_ylim()[0] < 0.1
    with pytest.raises(ValueError, match="reference line 'real' needs a finite y"):
        line_figure(series, "setting", "eval/fid", references=[("real", float("nan"))])


def test_line_plot_over_two_decades_gets_a_log_axis_and_keeps_inf_marks():
    from gpgan.viz import line_figure

    xs = [0.1, 1, 10]
    series = [("r1", xs, [0.005, 0.006, 0.008], [0.002, 0.01, 0.001]),  # a bar reaching below 0
              ("wgan_gp", xs, [0.006, 0.02, 1.35], [0.001, 0.01, 0.44]),
              ("dragan", xs, [0.01, float("inf"), 0.3], None)]
    figure = line_figure(series, "penalty.weight", "eval/reverse_kl", logx=True)
    ax = figure.axes[0]
    assert ax.get_yscale() == "log"
    bottom, top = ax.get_ylim()
    assert 0 < bottom < 0.005 / 2 and top > 1.35 + 0.44  # every finite value and bar top inside
    labels = [t.get_text() for t in ax.texts]
    assert "inf" in labels  # the collapsed setting is still marked in its band
    ticks = [t for t in ax.get_yticks() if bottom <= t <= top]
    assert ticks and all(t > 0 for t in ticks)
    # Values within two decades stay linear.
    assert line_figure([("a", xs, [0.2, 0.5, 1.0], None)], "x", "y").axes[0].get_yscale() == "linear"


def test_long_curves_label_steps_in_thousands_without_overlap():
    """200,000 steps on one 300-pixel panel: at most six tick labels, written 50k, 100k, ...,
    and no two of them overlap once drawn."""
    from gpgan.viz import curves_figure

    steps = list(range(1000, 200001, 1000))
    groups = [("wgan_gp", [("w=10", steps, [s / 200000 for s in steps], None)])]
    figure = curves_figure(groups, "generator step", "eval/high_quality")
    renderer = figure.canvas.get_renderer()
    figure.draw(renderer)
    ax = figure.axes[0]
    shown = [t for t in ax.get_xticklabels() if t.get_text() and t.get_visible()
             and ax.get_xlim()[0] <= t.get_position()[0] <= ax.get_xlim()[1]]
    assert 3 <= len(shown) <= 6
    assert all(t.get_text() == "0" or t.get_text().endswith("k") for t in shown), [t.get_text() for t in shown]
    assert "100k" in [t.get_text() for t in shown]
    boxes = sorted((t.get_window_extent(renderer) for t in shown), key=lambda b: b.x0)
    assert all(left.x1 < right.x0 for left, right in zip(boxes, boxes[1:]))
    formatter = ax.xaxis.get_major_formatter()  # small values keep plain labels
    assert [formatter(v, 0) for v in (0, 500, 5000, 1500000)] == ["0", "500", "5k", "1.5M"]


def test_a_panel_above_an_empty_slot_shows_its_step_ticks():
    """Seven panels in rows of four: the fourth panel has no panel below it, so it carries the
    x label and its own tick labels (sharex hides tick labels above the last row)."""
    from gpgan.viz import curves_figure

    groups = [(f"p{k}", [("w", [1000, 20000], [0.0, 1.0], None)]) for k in range(7)]
    figure = curves_figure(groups, "generator step", "y", ncols=4)
    figure.draw(figure.canvas.get_renderer())
    labelled = [ax.get_title() for ax in figure.axes if ax.get_visible()
                and any(t.get_text() and t.get_visible() for t in ax.get_xticklabels())]
    assert labelled == ["p3", "p4", "p5", "p6"]
    # Every panel reads steps in thousands (they share the first panel's x formatter).
    for ax in figure.axes[3:7]:
        texts = [t.get_text() for t in ax.get_xticklabels() if t.get_text() and t.get_visible()]
        assert texts and all(t == "0" or t.endswith("k") for t in texts), (ax.get_title(), texts)
    assert [ax.get_xlabel() for ax in figure.axes[:7]] == [""] * 3 + ["generator step"] * 4
