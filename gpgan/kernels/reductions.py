"""Sums over every axis but one (per-channel statistics, bias gradients): one dispatch for NumPy
and CuPy arrays.

NumPy float arrays take :func:`gpgan.kernels.cpu.passes.channel_sum` (a Numba or einsum pass) where
it applies; large CuPy float32 and float64 sums take :func:`chunked_channel_sums`; everything else
the array's own ``sum``.

Why CuPy needs a form of its own: its reduction kernel gives one block of threads to 32 adjacent
outputs when the kept axis is innermost in memory (channels-last, as gpgan's convolutions return
their activations), so the 64 channel sums of a (64, 64, 32, 32) activation ran in two blocks on a
GPU of 132 multiprocessors. :func:`chunked_channel_sums` first adds fixed chunks of rows into many
partial sums, which keeps every multiprocessor busy, then adds those. For a given shape the order
of the additions is fixed, so results are deterministic; they agree with a one-pass sum to the
dtype's rounding.
"""
import math

import numpy

from gpgan.backend import get_array_module
from gpgan.kernels.cpu.passes import channel_sum, row_blocks as cpu_row_blocks
from gpgan.kernels.cpu.select import KERNEL_FLOATS

__all__ = ["array_sum", "chunked_channel_sums", "column_sums", "row_blocks", "CHUNK"]

#: Rows added into one partial sum by each stage of :func:`chunked_channel_sums` (a power of
#: two), and half the fewest rows for which a CuPy sum takes that form.
CHUNK = 512


def chunked_channel_sums(x, kept):
    """``x`` summed over every axis but ``kept``: shape ``(x.shape[kept],)``, ``x``'s dtype.

    ``x`` is viewed (copied where its layout does not allow a view) as (M, C) rows with the kept
    axis last, and each stage adds chunks of ``gcd(M, CHUNK)`` rows, until a chunk would be all
    the rows; one sum over the rows remains. NumPy or CuPy; gpgan uses it on CuPy only.
    """
    xp = get_array_module(x)
    channels = x.shape[kept]
    rows = xp.ascontiguousarray(xp.moveaxis(x, kept, -1)).reshape(-1, channels)
    while True:
        m = rows.shape[0]
        chunk = math.gcd(m, CHUNK)
        if not 1 < chunk < m:
            return rows.sum(axis=0)
        rows = rows.reshape(m // chunk, chunk, channels).sum(axis=1)


def _chunked(x, kept):
    """Whether a CuPy sum over every axis but ``kept`` takes :func:`chunked_channel_sums`: float32
    or float64 (a float16 partial sum would round where CuPy's own sum accumulates in float32),
    and at least ``2 * CHUNK`` values per kept index."""
    return x.dtype in KERNEL_FLOATS and x.size >= 2 * CHUNK * x.shape[kept] > 0


def array_sum(x, axes, keepdims=False):
    """``x.sum(axis=axes, keepdims=keepdims)`` for ``axes`` a tuple of non-negative axes (module
    docstring for which form runs)."""
    kept = [a for a in range(x.ndim) if a not in axes]
    y = None
    if len(kept) == 1 and x.ndim >= 2 and x.dtype.kind == "f":
        if x.__class__ is numpy.ndarray:
            y = channel_sum(x, kept[0])
        elif get_array_module(x) is not numpy and _chunked(x, kept[0]):
            y = chunked_channel_sums(x, kept[0])
    if y is None:
        return x.sum(axis=axes, keepdims=keepdims)
    return y.reshape(tuple(x.shape[a] if a in kept else 1 for a in range(x.ndim))) if keepdims else y


def column_sums(xp, a):
    """``a.sum(axis=0)`` of (M, C) rows: NumPy's own, or :func:`chunked_channel_sums` for large
    CuPy rows."""
    if xp is numpy or not _chunked(a, 1):
        return a.sum(axis=0)
    return chunked_channel_sums(a, 1)


def row_blocks(xp, rows):
    """How many blocks batch norm's row passes sum ``rows`` rows in: for NumPy, a fixed number
    (:func:`gpgan.kernels.cpu.passes.row_blocks`), so that the sums do not depend on how many threads
    share the blocks; for CuPy one, since one reduction sums a whole column."""
    return cpu_row_blocks(rows) if xp is numpy else 1
