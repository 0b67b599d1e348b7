"""The ReLU family's passes as single Numba kernels, and a scatter-add on either device.

Each ReLU-family function returns None, computing nothing, where the Numba kernels do not take the
arrays (see :func:`gpgan.kernels.cpu.passes.compiled_elementwise`); the caller then runs its
NumPy / CuPy form, which gives the same values bit for bit (:mod:`gpgan.functions.activation` and
:mod:`gpgan.functions.math`). Slopes are Python numbers; the kernels get them as host numbers in
the arrays' dtype, made only where a kernel runs (most of a small network's arrays take the NumPy
form).
"""

import numpy

from gpgan.kernels.cpu.passes import compiled_elementwise, kernels_for

__all__ = ["relu", "leaky_relu", "rectified_gradient", "add_at", "sums_by_index"]


def relu(xp, x):
    """``max(x, 0)`` in one compiled pass (NumPy ``maximum``'s bits: -0.0 and NaN kept), or None."""
    return compiled_elementwise(xp, "relu", (x,))


def leaky_relu(xp, x, negative_slope):
    """``x`` where ``x > 0``, else ``negative_slope * x`` for 0 <= negative_slope <= 1 (the
    caller's range) in one compiled pass, or None."""
    return compiled_elementwise(xp, "leaky_relu", (x,), x.dtype.type(negative_slope))


def _factors(gy, slope):
    """The ReLU family's two gradient factors ``(rise + slope, slope)`` as host numbers in ``gy``'s
    dtype (from the Python number, never from device arrays: reading one back would stop a
    CUDA-graph capture); the first is 1 taken as ``(1 - slope) + slope``, as the NumPy form of
    :func:`gpgan.functions.math.rectified_gradient_array` computes it."""
    rise, slope = gy.dtype.type(1 - slope), gy.dtype.type(slope)
    return rise + slope, slope


def rectified_gradient(xp, gy, ref, slope):
    """``gy * (1 where ref > 0, else slope)`` for arrays of one shape in one compiled pass, or
    None; ``slope`` a Python number (the factors as :func:`_factors` makes them)."""
    if kernels_for(xp, gy) is None:  # the cheap test first: no factors made for the NumPy form
        return None
    return compiled_elementwise(xp, "rectified_gradient", (gy, ref), *_factors(gy, slope))


def add_at(xp, target, index, values):
    """``target[index] += values`` in place, repeated indices adding up (``numpy.add.at``; CuPy's
    ``cupyx.scatter_add`` where its ``add`` has no ``at``)."""
    if hasattr(xp.add, "at"):
        xp.add.at(target, index, values)
    else:  # CuPy before ufunc.at
        import cupyx

        cupyx.scatter_add(target, index, values)


def sums_by_index(xp, index, values, size):
    """(size,) float64: ``out[i]`` the sum of ``values[k]`` over ``index[k] == i`` for 1-d arrays
    ``index`` (integers in [0, size)) and ``values`` of one length, added in the order of ``k``
    (``numpy.bincount(index, values, minlength=size)``). CuPy's bincount reads the largest index
    back from the device, which a step being captured as a CUDA graph may not do, so there it is a
    scatter-add into zeros."""
    if xp is numpy:
        return xp.bincount(index, weights=values, minlength=size)
    out = xp.zeros(size, dtype=numpy.float64)
    add_at(xp, out, index, values.astype(numpy.float64, copy=False))
    return out
