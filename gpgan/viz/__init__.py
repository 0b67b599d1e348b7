"""Visualisation: image grids with Pillow; scatter and line plots with matplotlib.

matplotlib is imported only when a plot is drawn, on an Agg canvas of its own (no pyplot, no
global backend), so importing this package costs nothing extra.
"""
from gpgan.viz.figure import PALETTE, STYLE, new_figure, plot_style, save_figure
from gpgan.viz.grid import grid_picture, image_grid, save_image_grid, save_picture
from gpgan.viz.plot import (curves_figure, curves_plot, density_alpha, line_figure, line_plot, scatter_figure,
                            scatter_plot, scatter_samples, scatter_samples_figure)

__all__ = ["grid_picture", "image_grid", "save_image_grid", "save_picture", "scatter_samples", "scatter_samples_figure", "scatter_plot",
           "scatter_figure", "line_plot", "line_figure", "density_alpha", "new_figure", "save_figure",
           "plot_style", "curves_figure", "curves_plot", "PALETTE", "STYLE"]
