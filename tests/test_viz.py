"""Pillow-only image grids and plots: shapes, pixel placement, files written."""
import numpy as np
import pytest
from PIL import Image

from gpgan.viz import image_grid, line_plot, nice_ticks, save_image_grid, scatter_plot


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


def test_nice_ticks():
    assert nice_ticks(0, 1) == pytest.approx([0, 0.2, 0.4, 0.6, 0.8, 1.0])
    assert nice_ticks(-4.3, 4.3) == pytest.approx([-4, -2, 0, 2, 4])


def test_scatter_plot_draws_points_where_they_belong(tmp_path):
    path = tmp_path / "scatter.png"
    red = (220, 0, 0)
    scatter_plot(path, [(np.array([[0.0, 0.0]]), red, "one point"), (np.zeros((0, 2)), (0, 0, 255), "")],
                 limits=((-1, 1), (-1, 1)), title="title")
    pixels = np.array(Image.open(path))
    ys, xs = np.nonzero((pixels == red).all(axis=2))
    assert len(xs) > 0
    # the point sits at the centre of the plot box; the legend swatch elsewhere is also red
    h, w = pixels.shape[:2]
    box_center = ((72 + w - 20) / 2, (34 + h - 52) / 2)
    assert np.min(np.hypot(xs - box_center[0], ys - box_center[1])) < 2


def test_line_plot_writes_png(tmp_path):
    path = tmp_path / "line.png"
    line_plot(path, [("a", [1, 10, 100], [0.1, 0.5, 0.4], [0.05, 0.1, 0.1]), ("b", [1, 10, 100], [0.3, 0.2, 0.7], None)],
              "steps", "value", title="t", logx=True)
    pixels = np.array(Image.open(path))
    assert pixels.shape[2] == 3 and (pixels != 255).any()
    with pytest.raises(ValueError, match="logx"):
        line_plot(tmp_path / "bad.png", [("a", [0, 1], [1, 2], None)], "x", "y", logx=True)
