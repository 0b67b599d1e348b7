"""Image grids: many (3, H, W) images in [-1, 1] tiled into one uint8 picture."""
import os

import numpy
from PIL import Image

from gpgan.backend import to_device
from gpgan.data.loader import to_uint8

PADDING = 2


def _host(images):
    data = getattr(images, "data", images)  # a Variable's array
    return numpy.asarray(to_device(data, "cpu"))


def image_grid(images, nrow=8, padding=PADDING, pad_value=0):
    """Tile ``images`` into one picture.

    Args:
        images: (N, C, H, W) floats in [-1, 1] (NumPy or CuPy array, or Variable); C is 3 or 1
            (grey images are repeated to RGB). Values outside [-1, 1] are clipped.
        nrow: images per row of the grid.
        padding: pixels between images and around the border (2 by default).
        pad_value: the padding's grey level (0..255).

    Returns:
        uint8 array (rows * (H + padding) + padding, nrow' * (W + padding) + padding, 3), where
        ``nrow' = min(nrow, N)`` and ``rows = ceil(N / nrow')``.
    """
    images = _host(images)
    if images.ndim != 4 or images.shape[1] not in (1, 3):
        raise ValueError(f"image_grid: images must be (N, 3, H, W) or (N, 1, H, W), got shape {images.shape}")
    if images.shape[1] == 1:
        images = numpy.repeat(images, 3, axis=1)
    n, _, h, w = images.shape
    if n == 0:
        raise ValueError("image_grid: no images given")
    ncol = max(1, min(int(nrow), n))
    rows = -(-n // ncol)
    pixels = to_uint8(images)
    # Pad the batch to a full grid, then pad every image on its bottom/right; one reshape tiles them.
    cells = numpy.full((rows * ncol, h + padding, w + padding, 3), pad_value, dtype=numpy.uint8)
    cells[:n, :h, :w] = pixels.transpose(0, 2, 3, 1)
    grid = cells.reshape(rows, ncol, h + padding, w + padding, 3).transpose(0, 2, 1, 3, 4)
    grid = grid.reshape(rows * (h + padding), ncol * (w + padding), 3)
    out = numpy.full((grid.shape[0] + padding, grid.shape[1] + padding, 3), pad_value, dtype=numpy.uint8)
    out[padding:, padding:] = grid
    return out


def save_image_grid(path, images, nrow=8):
    """Write :func:`image_grid` of ``images`` to ``path`` (format from the extension, e.g. PNG)."""
    directory = os.path.dirname(os.fspath(path))
    if directory:
        os.makedirs(directory, exist_ok=True)
    Image.fromarray(image_grid(images, nrow)).save(path)
