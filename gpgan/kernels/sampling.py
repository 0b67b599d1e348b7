"""Bilinear sampling's three passes as Numba kernels: the taps, the gather and its adjoint.

Each function returns None, computing nothing, where the Numba kernels do not take the arrays (not
a float NumPy array, smaller than :data:`gpgan.kernels.cpu.passes.COMPILED_MIN_BYTES`, kernels
off); the caller, :mod:`gpgan.functions.sampling`, then runs its NumPy / CuPy form, which gives
the same values bit for bit. Shapes and conventions are that module's: ``index`` and ``weight``
(4, N, P), tap ``k = 2 * r + c`` at row ``floor(sy) + r`` and column ``floor(sx) + c``.
"""
import numpy

from gpgan.kernels.cpu.passes import kernels_for

__all__ = ["bilinear_taps", "bilinear_gather", "bilinear_scatter"]


def bilinear_taps(xp, sx, sy, in_hw, padding, image):
    """``(index, weight)`` for source coordinates ``sx``, ``sy`` (N, P) of ``image`` (N, C, *in_hw,
    the array to be sampled, whose size decides whether the kernels run), or None."""
    kernels = kernels_for(xp, image)
    if kernels is None or sx.dtype != sy.dtype or sx.dtype != image.dtype:
        return None
    N, P = sx.shape
    index = numpy.empty((4, N, P), numpy.int64)
    weight = numpy.empty((4, N, P), sx.dtype)
    contiguous = numpy.ascontiguousarray
    kernels.bilinear_taps(contiguous(sx), contiguous(sy), int(in_hw[0]), int(in_hw[1]), padding == "reflection",
                          sx.dtype.type(1), index, weight)
    return index, weight


def bilinear_gather(xp, x, index, weight, out_hw):
    """The bilinear sample of ``x`` (N, C, Hi, Wi) through the taps: (N, C, *out_hw), or None."""
    kernels = kernels_for(xp, x)
    if kernels is None or weight.dtype != x.dtype or index.dtype != numpy.int64:
        return None
    N, C = x.shape[:2]
    out = numpy.empty((N, C) + tuple(out_hw), x.dtype)
    contiguous = numpy.ascontiguousarray
    kernels.bilinear_gather(contiguous(x).reshape(N, C, -1), contiguous(index), contiguous(weight),
                            out.reshape(N, C, -1))
    return out


def bilinear_scatter(xp, gy, index, weight, in_hw):
    """The gather's adjoint for ``gy`` (N, C, Ho, Wo): (N, C, *in_hw) in ``gy``'s dtype, or None."""
    kernels = kernels_for(xp, gy)
    if kernels is None or weight.dtype != gy.dtype or index.dtype != numpy.int64:
        return None
    N, C = gy.shape[:2]
    out = numpy.zeros((N, C, int(in_hw[0]) * int(in_hw[1])), numpy.float64)
    contiguous = numpy.ascontiguousarray
    kernels.bilinear_scatter(contiguous(gy).reshape(N, C, -1), contiguous(index), contiguous(weight), out)
    return out.astype(gy.dtype, copy=False).reshape((N, C) + tuple(in_hw))
