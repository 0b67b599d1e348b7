"""Pillow-only visualisation: image grids, scatter plots and line plots (no matplotlib)."""
from gpgan.viz.grid import image_grid, save_image_grid
from gpgan.viz.plot import PALETTE, line_plot, nice_ticks, scatter_plot

__all__ = ["image_grid", "save_image_grid", "scatter_plot", "line_plot", "nice_ticks", "PALETTE"]
