"""Matrix products of arrays, each on the library that takes it: oneDNN for large 2-D float32
NumPy products where it is enabled, else NumPy's matmul (OpenBLAS) on the CPU, and cuBLAS called
directly on CUDA (:mod:`gpgan.kernels.cuda.cublas`), so that a step with products can be captured
as a CUDA graph.

Which library takes a NumPy product is decided once per kind of operands (shapes, strides, dtypes,
and which of bias, rectifier and addend are fused), not at every call: a training step runs the
same few kinds of products at every step, many of them small, where the tests of the decision
would cost about what the product does. The decisions are kept in :data:`_plans` and forgotten
when the oneDNN switch changes (:meth:`gpgan.kernels.switches.OptionalLibrary.on_change`); the
benchmark-only flags of :mod:`gpgan.backend.mechanisms` are read at each call (``onednn_products``
as part of the kind), so a benchmark may turn them on and off between calls.
"""
import threading

import numpy

from gpgan.backend.array_module import get_array_module
from gpgan.backend.mechanisms import off
from gpgan.kernels.cpu.passes import kernels_for
from gpgan.kernels.cpu.select import onednn_products
from gpgan.kernels.record import note, recording
from gpgan.kernels.switches import onednn_switch

__all__ = ["matmul", "fused_affine", "outer"]

#: Operands' kind (see :func:`_plan`) -> ``(oneDNN product or None, copy a, copy b)``.
_plans = {}
#: Kinds of products kept at most (a sweep over many shapes clears them and starts again). A plan
#: may keep a oneDNN product alive that :mod:`gpgan.kernels.cpu.onednn`'s own bound has let go.
_PLANS_LIMIT = 256
_generation = [0]  # counts forgettings, so that a plan made across one is not kept
_lock = threading.Lock()


def forget_plans():
    """Forget every decision (the next product of each kind decides again)."""
    with _lock:
        _generation[0] += 1
        _plans.clear()


onednn_switch.on_change(forget_plans)


def _copied_for_blas(x):
    """True for an operand that NumPy's matmul cannot hand to BLAS as it is: a broadcast operand (a
    zero stride, as the gradient of a sum is), for which NumPy runs its own, much slower loop."""
    return 0 in x.strides and x.size > 1


def _plan(a, b, bias, negative_slope, addend):
    """``(product, copy_a, copy_b)`` for NumPy arrays ``a``, ``b`` (exactly ``numpy.ndarray``):
    the oneDNN product that takes ``a @ b`` with these fused parts
    (:func:`gpgan.kernels.cpu.onednn.product_for`) or None, and whether NumPy's matmul needs a
    contiguous copy of each operand (:func:`_copied_for_blas`). Made on the first product of its
    kind, then looked up."""
    key = (a.shape, a.strides, a.dtype, b.shape, b.strides, b.dtype,
           None if bias is None else (bias.__class__, bias.dtype, bias.shape, bias.strides),
           None if negative_slope is None else float(negative_slope),
           None if addend is None else (addend.__class__, addend.dtype, addend.shape, addend.strides),
           off.onednn_products)  # onednn_products reads it: a decision made with it off is another
    plan = _plans.get(key)
    if plan is None:
        generation = _generation[0]
        dnn = onednn_products(a, b)
        product = None if dnn is None else dnn.product_for(a, b, bias, negative_slope, addend)
        plan = (product, _copied_for_blas(a), _copied_for_blas(b))
        with _lock:
            if generation == _generation[0]:  # the switch did not change meanwhile
                if len(_plans) >= _PLANS_LIMIT:
                    _plans.clear()
                _plans[key] = plan
    return plan


def matmul(a, b):
    """``a @ b`` of two arrays on one device, NumPy's matmul rules (batched, broadcast)."""
    if a.__class__ is numpy.ndarray and b.__class__ is numpy.ndarray:
        product, copy_a, copy_b = _plan(a, b, None, None, None)
    elif get_array_module(a, b) is numpy:  # NumPy subclasses and scalars: decided at each call
        product, copy_a, copy_b = _product_of_others(a, b, None, None, None), True, True
    else:
        from gpgan.kernels.cuda.cublas import matmul as cublas_matmul

        if recording:
            note("matmul", "cublas")
        return cublas_matmul(a, b)
    if product is not None:
        c = product(a, b, None, None)
        if recording:
            note("matmul", "onednn", call=product.call_path())
        return c
    if recording:
        note("matmul", "numpy")
    return numpy.matmul(_blas_operand(a) if copy_a else a, _blas_operand(b) if copy_b else b)


def _product_of_others(a, b, bias, negative_slope, addend):
    """The oneDNN product that takes ``a @ b`` with these fused parts, or None, for operands other
    than two ``numpy.ndarray`` (NumPy subclasses, CuPy arrays): decided at each call, not planned."""
    dnn = onednn_products(a, b)
    return None if dnn is None else dnn.product_for(a, b, bias, negative_slope, addend)


def _blas_operand(x):
    """``x`` as NumPy's matmul can hand it to BLAS (see :func:`_copied_for_blas`)."""
    return numpy.ascontiguousarray(x) if _copied_for_blas(x) and not off.blas_operand else x


def fused_affine(a, b, bias=None, negative_slope=None, addend=None):
    """``a @ b + bias``, rectified when ``negative_slope`` is given (``x`` where ``x > 0``, else
    ``negative_slope * x``), then plus ``addend``, in one library call, for 2-D float32 NumPy
    products large enough for oneDNN (:func:`gpgan.kernels.cpu.onednn.matmul`); None for everything
    else (the caller adds the bias, rectifies and adds). ``a`` (M, K), ``b`` (K, N), ``bias`` (N,)
    or None, ``addend`` (M, N) C-contiguous or None -> a new (M, N) array. Which products oneDNN
    takes is decided as for :func:`matmul` (:func:`_plan`, :func:`_product_of_others`)."""
    product = c = None
    if ((off.fused_linear and (bias is not None or negative_slope is not None))
            or (off.fused_addend and addend is not None)):
        pass  # a mechanism turned off for a benchmark (gpgan.backend.mechanisms): None
    elif a.__class__ is numpy.ndarray and b.__class__ is numpy.ndarray:
        product = _plan(a, b, bias, negative_slope, addend)[0]
    else:
        product = _product_of_others(a, b, bias, negative_slope, addend)
    if product is not None:
        c = product(a, b, bias, addend)
    if recording:
        if c is None:
            note("fused_affine", "portable")
        else:
            note("fused_affine", "onednn", _fused_parts(bias, negative_slope, addend), product.call_path())
    return c


def _fused_parts(bias, negative_slope, addend):
    """The names of the parts fused into a product, as :class:`gpgan.kernels.record.Dispatch` lists them."""
    return tuple(name for name, part in (("bias", bias), ("rectifier", negative_slope), ("addend", addend))
                 if part is not None)


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
