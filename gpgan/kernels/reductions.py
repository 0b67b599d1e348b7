"""Sums over every axis but one (per-channel statistics, bias gradients): one dispatch for both
array modules.

NumPy arrays go to :func:`gpgan.kernels.cpu.passes.array_sum` (Numba or einsum passes). Large CuPy
sums go to :func:`channel_sums`, small ones to the array's own ``sum``.

Why CuPy needs a form of its own: its reduction kernel gives one block of threads to 32 adjacent
outputs when the kept axis is innermost in memory (channels-last, as gpgan's convolutions return
their activations), so the 64 channel sums of a (64, 64, 32, 32) activation ran in two blocks on a
GPU of 132 multiprocessors. :func:`channel_sums` first sums fixed chunks of rows into many partial
sums, which keeps every multiprocessor busy, then sums those. For a given shape the order of the
additions is fixed, so results are deterministic; they agree with a one-pass sum to the dtype's
rounding.
"""
import math

import numpy

from gpgan.backend import get_array_module
from gpgan.kernels.cpu.passes import array_sum as cpu_array_sum

__all__ = ["array_sum", "channel_sums", "column_sums", "CHUNK"]

#: Rows added into one partial sum by each stage of :func:`channel_sums` (a power of two), and
#: half the fewest rows for which a CuPy sum takes that form.
CHUNK = 512


def channel_sums(x, kept):
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


def _takes(x, kept):
    return len(kept) == 1 and x.dtype.kind == "f" and x.size >= 2 * CHUNK * x.shape[kept[0]] > 0


def array_sum(x, axes, keepdims=False):
    """``x.sum(axis=axes, keepdims=keepdims)`` for ``axes`` a tuple of non-negative axes: NumPy's
    passes (:func:`gpgan.kernels.cpu.passes.array_sum`), or for a CuPy float array summed over
    every axis but one and at least ``2 * CHUNK`` values per kept index, :func:`channel_sums`."""
    if get_array_module(x) is numpy:
        return cpu_array_sum(x, axes, keepdims)
    kept = [a for a in range(x.ndim) if a not in axes]
    if not _takes(x, kept):
        return x.sum(axis=axes, keepdims=keepdims)
    y = channel_sums(x, kept[0])
    return y.reshape(tuple(x.shape[a] if a in kept else 1 for a in range(x.ndim))) if keepdims else y


def column_sums(xp, a):
    """``a.sum(axis=0)`` of (M, C) rows: NumPy's own, or :func:`channel_sums` for large CuPy rows."""
    if xp is numpy or not _takes(a, [1]):
        return a.sum(axis=0)
    return channel_sums(a, 1)
