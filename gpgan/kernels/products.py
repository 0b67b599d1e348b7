"""Matrix products of arrays, each on the library that takes it: oneDNN for large 2-D float32
NumPy products where it is enabled, else NumPy's matmul (OpenBLAS) on the CPU, and cuBLAS called
directly on CUDA (:mod:`gpgan.kernels.cuda.cublas`), so that a step with products can be captured
as a CUDA graph."""
import numpy

from gpgan.backend.array_module import get_array_module
from gpgan.backend.mechanisms import off
from gpgan.kernels.cpu.passes import kernels_for
from gpgan.kernels.cpu.select import onednn_products

__all__ = ["matmul", "fused_affine", "outer"]


def matmul(a, b):
    """``a @ b`` of two arrays on one device, NumPy's matmul rules (batched, broadcast)."""
    if get_array_module(a, b) is numpy:
        c = fused_affine(a, b)  # oneDNN, where it takes the product
        return numpy.matmul(_blas_operand(a), _blas_operand(b)) if c is None else c
    from gpgan.kernels.cuda.cublas import matmul as cublas_matmul

    return cublas_matmul(a, b)


def _blas_operand(x):
    """``x`` as NumPy's matmul can hand it to BLAS: a broadcast operand (a zero stride, as the
    gradient of a sum is) made contiguous; NumPy runs its own, much slower loop for one."""
    return numpy.ascontiguousarray(x) if 0 in x.strides and x.size > 1 and not off.blas_operand else x


def fused_affine(a, b, bias=None, negative_slope=None, addend=None):
    """``a @ b + bias``, rectified when ``negative_slope`` is given (``x`` where ``x > 0``, else
    ``negative_slope * x``), then plus ``addend``, in one library call, for 2-D float32 NumPy
    products large enough for oneDNN (:func:`gpgan.kernels.cpu.onednn.matmul`); None for everything
    else (the caller adds the bias, rectifies and adds). ``a`` (M, K), ``b`` (K, N), ``bias`` (N,)
    or None, ``addend`` (M, N) C-contiguous or None -> a new (M, N) array. The one test of which
    products oneDNN takes: :func:`matmul` asks it too."""
    if ((off.fused_linear and (bias is not None or negative_slope is not None))
            or (off.fused_addend and addend is not None)):
        return None  # a mechanism turned off for a benchmark (gpgan.backend.mechanisms)
    dnn = onednn_products(a, b)
    return None if dnn is None else dnn.matmul(a, b, bias, negative_slope, addend)


def outer(a, b):
    """``a * b`` for ``a`` (M, 1) and ``b`` (1, N) arrays of one dtype, as one compiled pass split
    over the threads where the Numba kernels take the (M, N) output; None otherwise (the caller
    multiplies: the same products)."""
    if a.__class__ is numpy.ndarray and b.__class__ is numpy.ndarray and a.dtype == b.dtype and not off.numba_passes:
        out = numpy.empty((a.shape[0], b.shape[1]), a.dtype)
        kernels = kernels_for(numpy, out)
        if kernels is not None:
            kernels.outer(a[:, 0], b[0], out)
            return out
    return None
