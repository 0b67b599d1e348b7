"""Batch normalization's passes over pixel rows as Numba kernels, and the per-column dot
product of the portable form.

``x2`` and ``gy2`` are (M, C) pixel rows (an activation channels-last in memory, see
:mod:`gpgan.functions.normalization`). Each kernel function returns None, computing nothing, where
the Numba kernels do not take the rows (not a float NumPy array, smaller than
:data:`gpgan.kernels.cpu.passes.COMPILED_MIN_BYTES`, kernels off); the caller then runs its
NumPy / CuPy form. The kernels sum in float64 over fixed blocks of rows
(:func:`gpgan.kernels.cpu.passes.row_blocks`), so their results do not depend on the thread count
and agree with the portable form to the dtype's rounding.
"""
import numpy

from gpgan.backend.mechanisms import off
from gpgan.kernels.cpu.passes import add_in_block_order, block_partials, kernels_for
from gpgan.kernels.reductions import column_sums

__all__ = ["batch_norm_rows", "batch_norm_rows_gradients", "column_dots"]


def batch_norm_rows(xp, x2, w, b, eps):
    """Batch norm of the rows ``x2`` (M, C): ``(y2, mean, var, inv)`` with ``y2`` (M, C) and the
    statistics (C,) in ``x2``'s dtype, or None. ``w`` and ``b`` are the per-channel weight and bias
    (any shape of C elements) or None.

    Two passes: the moments about a sample of each channel, summed in float64 over fixed blocks of
    rows, then ``y = (x - mean) * scale + shift``.
    """
    kernels = kernels_for(xp, x2)
    if kernels is None or off.numba_batch_norm:
        return None
    M, C = x2.shape
    shift = x2[0].astype(numpy.float64)
    s1, s2 = block_partials(M, C, 2)
    kernels.channel_moments(x2, shift, s1, s2)
    s1, s2 = add_in_block_order(s1), add_in_block_order(s2)
    mean = shift + s1 / M
    var = numpy.maximum(s2 - s1 * s1 / M, 0.0) / M
    inv = 1 / numpy.sqrt(var + eps)
    dtype = x2.dtype
    scale = inv if w is None else inv * w.reshape(C)
    mu, scale = mean.astype(dtype), scale.astype(dtype)
    shift_out = numpy.zeros(C, dtype) if b is None else numpy.ascontiguousarray(b.reshape(C), dtype)
    y2 = numpy.empty_like(x2)
    kernels.channel_affine(x2, mu, scale, shift_out, y2)
    return (y2,) + tuple(v.astype(dtype) for v in (mean, var, inv))


def batch_norm_rows_gradients(xp, x2, gy2, mean, inv, w):
    """Batch norm's gradients on rows: ``(gx2, gw, gb)`` for input rows ``x2`` and output gradient
    rows ``gy2`` (M, C), the forward's ``mean`` and ``inv`` (C elements each) and weight ``w`` or
    None; ``gw = sum(gy * xhat)`` and ``gb = sum(gy)`` per channel in ``x2``'s dtype. Or None.

    Two passes: the sums of gy and gy * (x - mean) in float64 over fixed blocks of rows, then
    ``gx = (gy - mean(gy)) * coef - (x - mean) * k``.
    """
    kernels = kernels_for(xp, x2)
    if kernels is None or off.numba_batch_norm:
        return None
    M, C = x2.shape
    dtype = x2.dtype
    mu = mean.reshape(C)
    inv = inv.reshape(C).astype(numpy.float64)
    s_g, s_gx = block_partials(M, C, 2)
    kernels.channel_gradient_sums(x2, gy2, mu.astype(numpy.float64), s_g, s_gx)
    g_sum, gxc_sum = add_in_block_order(s_g), add_in_block_order(s_gx)
    gx_sum = gxc_sum * inv  # sum(gy * xhat)
    coef = inv if w is None else inv * w.reshape(C)
    k = coef * inv * gx_sum / M
    gy_mean, coef, k = (v.astype(dtype) for v in (g_sum / M, coef, k))
    gx2 = numpy.empty_like(x2)
    kernels.channel_input_gradient(x2, gy2, mu, gy_mean, coef, k, gx2)
    return gx2, gx_sum.astype(dtype), g_sum.astype(dtype)


def column_dots(xp, a, b):
    """``(a * b).sum(axis=0)`` of (M, C) arrays: NumPy's einsum does it in one pass; CuPy's einsum
    may call cuBLAS through CuPy, which a CUDA-graph capture cannot (see
    :mod:`gpgan.kernels.cuda.cublas`), so CuPy multiplies and sums (:func:`column_sums`)."""
    if xp is numpy:
        return numpy.einsum("mc,mc->c", a, b)
    return column_sums(xp, a * b)
