"""Image grids: many (3, H, W) images in [-1, 1] tiled into one uint8 picture, upscaled to a
readable size and captioned (which step, EMA or raw weights); several grids side by side."""
import math
import os

import numpy
from PIL import Image, ImageDraw, ImageFont

from gpgan.backend import to_device
from gpgan.data.loader import to_uint8
from gpgan.files import atomic_write

PADDING = 2
#: a saved grid is upscaled (nearest neighbour, by a whole factor) to at least this many pixels wide
READABLE_WIDTH = 512
#: the caption's text height in pixels and the caption strip's background and text colours
CAPTION_SIZE = 16
CAPTION_BACKGROUND = (255, 255, 255)
CAPTION_TEXT = (0, 0, 0)


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


def upscale(picture, factor):
    """``picture`` (H, W, 3) uint8 with every pixel repeated ``factor`` times each way (nearest
    neighbour: no new colours): (H * factor, W * factor, 3)."""
    factor = int(factor)
    if factor < 1:
        raise ValueError(f"upscale: factor must be a whole number >= 1, got {factor}")
    if factor == 1:
        return picture
    # The result allocated whole, then filled: a factor too large for memory fails at once
    # (MemoryError), not after an intermediate that repeats one axis only has filled memory.
    h, w, c = picture.shape
    out = numpy.empty((h, factor, w, factor, c), dtype=picture.dtype)
    out[...] = picture[:, None, :, None, :]
    return out.reshape(h * factor, w * factor, c)


def readable_scale(width, target=READABLE_WIDTH):
    """The whole factor that makes a picture ``width`` pixels wide at least ``target`` wide
    (1 when it already is)."""
    return max(1, math.ceil(target / max(1, int(width))))


def _font():
    try:
        return ImageFont.load_default(size=CAPTION_SIZE)  # Pillow >= 10.1 with FreeType
    except (TypeError, OSError, ImportError):
        return ImageFont.load_default()


def captioned(picture, caption):
    """``picture`` (H, W, 3) uint8 under a strip holding ``caption`` (one line of text, left
    aligned, cut to the picture's width): (H + strip, W, 3)."""
    font = _font()
    strip_height = CAPTION_SIZE + 8
    strip = Image.new("RGB", (picture.shape[1], strip_height), CAPTION_BACKGROUND)
    ImageDraw.Draw(strip).text((4, 4), caption, fill=CAPTION_TEXT, font=font)
    return numpy.concatenate([numpy.asarray(strip, dtype=numpy.uint8), picture], axis=0)


def side_by_side(pictures, gap=8, fill=CAPTION_BACKGROUND):
    """``pictures`` ((H_k, W_k, 3) uint8) left to right, ``gap`` pixels apart, top-aligned; the
    shorter ones are filled below with ``fill``."""
    height = max(p.shape[0] for p in pictures)
    columns = []
    for k, p in enumerate(pictures):
        if k:
            columns.append(numpy.full((height, gap, 3), fill, dtype=numpy.uint8))
        below = numpy.full((height - p.shape[0], p.shape[1], 3), fill, dtype=numpy.uint8)
        columns.append(numpy.concatenate([p, below], axis=0))
    return numpy.concatenate(columns, axis=1)


def grid_picture(panels, nrow=8, caption=None, scale=None):
    """One picture of one or more grids side by side, each captioned, upscaled to be readable.

    Args:
        panels: ``[(label, images)]``: images as for :func:`image_grid`; ``label`` (str or None)
            is written above its grid, e.g. ``"EMA weights"``.
        nrow: images per row of each grid.
        caption: a line written above everything (e.g. ``"step 200"``); None: none.
        scale: the whole upscaling factor; None: :func:`readable_scale` of one grid's width.

    Returns:
        uint8 array (H, W, 3).
    """
    grids = [image_grid(images, nrow) for _, images in panels]
    factor = readable_scale(grids[0].shape[1]) if scale is None else int(scale)
    pictures = []
    for (label, _), grid in zip(panels, grids):
        grid = upscale(grid, factor)
        pictures.append(captioned(grid, label) if label else grid)
    picture = pictures[0] if len(pictures) == 1 else side_by_side(pictures)
    return captioned(picture, caption) if caption else picture


def save_picture(path, picture):
    """Write an (H, W, 3) uint8 ``picture`` to ``path`` atomically (format from the extension,
    e.g. PNG), creating its folder: a failed write (a full disk) leaves no partial file."""
    path = os.fspath(path)
    extension = os.path.splitext(path)[1].lower()
    fmt = Image.registered_extensions().get(extension)
    if fmt is None:
        raise ValueError(f"{path}: no image format for the extension {extension!r} (use .png or .jpg)")
    image = Image.fromarray(picture)
    atomic_write(path, lambda f: image.save(f, format=fmt))
    return path


def save_image_grid(path, images, nrow=8, label=None, caption=None, scale=1):
    """Write a grid of ``images`` to ``path`` (format from the extension, e.g. PNG), atomically.

    ``label``/``caption``: text above the grid (see :func:`grid_picture`); ``scale``: the whole
    upscaling factor, 1 by default (the grid's own pixels), None for a readable width."""
    if label is None and caption is None and scale == 1:
        return save_picture(path, image_grid(images, nrow))
    return save_picture(path, grid_picture([(label, images)], nrow, caption=caption, scale=scale))
