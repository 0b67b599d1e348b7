"""Resampling of images: interpolate (nearest, bilinear, area) and adaptive_avg_pool2d, as torch.

Each of them maps every (H, W) plane through fixed matrices, ``y = A @ x @ B.T`` with ``A``
(Ho, H) and ``B`` (Wo, W): bilinear rows hold two weights, nearest rows a single one, area rows
the mean of a window. So one node, :class:`Resample2d`, does them all with two matrix products,
and its gradient is the same node with the transposed matrices (``gx = A.T @ gy @ B``), which
differentiates back into the first: every order comes for free.

The matrices follow torch's index arithmetic (``aten/src/ATen/native/UpSample.h``), computed in
the input's floating dtype as torch does, so results agree with ``torch.nn.functional.interpolate``
to rounding.
"""
import functools
import math
import numbers

import numpy

from gpgan.autograd import FunctionNode
from gpgan import kernels
from gpgan.backend import constant_array, get_array_module
from gpgan.functions._args import check_4d, is_int, pair


__all__ = ['interpolate', 'adaptive_avg_pool2d']

MODES = ("nearest", "bilinear", "area")


class Resample2d(FunctionNode):
    """``x`` (N, C, H, W) -> ``A @ x @ B.T`` (N, C, Ho, Wo); ``A`` or ``B`` None is the identity.

    The matrices are host (NumPy) arrays, moved to ``x``'s device and dtype once (they are
    small). The axis whose pass is cheaper runs first.
    """

    def __init__(self, rows, cols):
        self.rows, self.cols = rows, cols

    def forward(self, inputs):
        x, = inputs
        xp = get_array_module(x)
        N, C, H, W = x.shape
        a = None if self.rows is None else constant_array(xp, self.rows, x.dtype)
        b = None if self.cols is None else constant_array(xp, self.cols, x.dtype)
        Ho = H if a is None else a.shape[0]
        Wo = W if b is None else b.shape[0]
        # Multiply-adds of each order: along W first costs H*W*Wo + Ho*H*Wo per plane.
        w_first = H * W * Wo + Ho * H * Wo <= Ho * H * W + Ho * W * Wo
        y = x
        for axis in ((3, 2) if w_first else (2, 3)):
            if axis == 3 and b is not None:
                y = kernels.matmul(y.reshape(-1, y.shape[3]), b.T).reshape(N, C, y.shape[2], Wo)  # one GEMM
            elif axis == 2 and a is not None:
                y = kernels.matmul(a, y.reshape(N * C, y.shape[2], y.shape[3])).reshape(N, C, Ho, y.shape[3])
        if y is x:
            y = x.copy()
        return (xp.ascontiguousarray(y),)

    def backward(self, indexes, grad_outputs):
        rows = None if self.rows is None else self.rows.T
        cols = None if self.cols is None else self.cols.T
        return (Resample2d(rows, cols).apply(grad_outputs)[0],)


# -- one row of weights per output index, torch's arithmetic ------------------------------------
def _frozen(m):
    m.flags.writeable = False  # cached and shared between calls
    return m


def _scale(dt, in_size, out_size, scale):
    """torch's ``compute_scales_value``: ``1 / scale_factor`` when one was given, else in/out,
    both in the computing dtype ``dt``."""
    return dt(in_size) / dt(out_size) if scale is None else dt(scale)


@functools.lru_cache(maxsize=64)
def _bilinear_matrix(in_size, out_size, align_corners, scale, dtype):
    """(out_size, in_size): torch's ``upsample_bilinear2d`` weights along one axis."""
    dt = numpy.dtype(dtype).type
    dst = numpy.arange(out_size).astype(dt)
    if align_corners:
        src = dst * (dt(in_size - 1) / dt(out_size - 1) if out_size > 1 else dt(0))
    else:
        src = (dst + dt(0.5)) * _scale(dt, in_size, out_size, scale) - dt(0.5)
        src = numpy.maximum(src, dt(0))  # linear modes clamp negative coordinates to 0
    i0 = numpy.minimum(numpy.floor(src).astype(numpy.int64), in_size - 1)
    i1 = numpy.minimum(i0 + 1, in_size - 1)
    w1 = numpy.clip(src - i0.astype(dt), dt(0), dt(1))
    m = numpy.zeros((out_size, in_size), dtype=dt)
    rows = numpy.arange(out_size)
    numpy.add.at(m, (rows, i0), dt(1) - w1)
    numpy.add.at(m, (rows, i1), w1)  # i1 == i0 at the last input: both weights on one pixel
    return _frozen(m)


@functools.lru_cache(maxsize=64)
def _nearest_matrix(in_size, out_size, scale, dtype):
    """(out_size, in_size): torch's ``nearest`` mode, source ``floor(dst * scale)`` in float32
    whatever the dtype (torch's ``nearest_neighbor_compute_source_index`` uses floorf)."""
    f32 = numpy.float32
    src = numpy.floor(numpy.arange(out_size).astype(f32) * _scale(f32, in_size, out_size, scale))
    m = numpy.zeros((out_size, in_size), dtype=dtype)
    m[numpy.arange(out_size), numpy.minimum(src.astype(numpy.int64), in_size - 1)] = 1
    return _frozen(m)


@functools.lru_cache(maxsize=64)
def _area_matrix(in_size, out_size, dtype):
    """(out_size, in_size): adaptive average pooling, window ``[floor(i*in/out), ceil((i+1)*in/out))``."""
    i = numpy.arange(out_size)
    start = (i * in_size) // out_size
    end = -((-(i + 1) * in_size) // out_size)
    cols = numpy.arange(in_size)
    inside = (cols >= start[:, None]) & (cols < end[:, None])
    return _frozen((inside / (end - start)[:, None]).astype(dtype))


def _axis_matrix(mode, in_size, out_size, scale, align_corners, dtype):
    """The matrix of one axis, or None where it is the identity (the pass is skipped)."""
    if mode == "area":
        return None if in_size == out_size else _area_matrix(in_size, out_size, dtype)
    if mode == "nearest":
        m = _nearest_matrix(in_size, out_size, scale, dtype)
    else:
        m = _bilinear_matrix(in_size, out_size, bool(align_corners), scale, dtype)
    if in_size == out_size and numpy.array_equal(m, numpy.eye(in_size, dtype=m.dtype)):
        return None
    return m


# -- argument handling ------------------------------------------------------------------------
def _check_4d_float(fn, x):
    check_4d(fn, "x", x)
    if x.dtype.kind != "f":
        raise TypeError(f"{fn}: x must be floating point, got {x.dtype}; convert images with .astype(float32)")


def _size_pair(fn, name, value, allow_none=False):
    """``value`` (an int >= 1, or a pair of them; None entries too with ``allow_none``) as a pair."""
    if not allow_none:
        return pair(fn, name, value, 1)
    both = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
    if len(both) != 2 or not all(v is None or (is_int(v) and v >= 1) for v in both):
        raise ValueError(f"{fn}: {name} must be an int >= 1 or a pair of them (None keeps that input size), "
                         f"got {value!r}")
    return tuple(None if v is None else int(v) for v in both)


def interpolate(x, size=None, scale_factor=None, mode="nearest", align_corners=None):
    """Resize images, as ``torch.nn.functional.interpolate`` on 4-D input.

    Args:
        x: (N, C, H, W) floating point.
        size: output (Ho, Wo), an int or a pair; or give ``scale_factor`` instead.
        scale_factor: a number > 0 or a pair; the output is ``floor(H * scale_factor)``, and (as
            torch with ``recompute_scale_factor`` unset) source coordinates use
            ``1 / scale_factor``.
        mode: "nearest" (source ``floor(dst * scale)``), "bilinear", or "area" (adaptive
            average pooling to the output size).
        align_corners: bilinear only; False (the default, half-pixel centres: pytorch-fid's
            resize to 299x299) or True (corner pixels aligned).

    Returns:
        (N, C, Ho, Wo), differentiable to any order in ``x``.
    """
    fn = "interpolate"
    _check_4d_float(fn, x)
    if mode not in MODES:
        raise ValueError(f"{fn}: mode {mode!r} is not supported; accepted: {', '.join(map(repr, MODES))}")
    if align_corners is not None and mode != "bilinear":
        raise ValueError(f"{fn}: align_corners applies to mode 'bilinear' only, got it with mode {mode!r}")
    if (size is None) == (scale_factor is None):
        raise ValueError(f"{fn}: give exactly one of size and scale_factor, got size={size!r}, "
                         f"scale_factor={scale_factor!r}")
    in_hw = tuple(x.shape[2:])
    if size is not None:
        out_hw = _size_pair(fn, "size", size)
        scales = (None, None)  # in / out, computed in the dtype as torch does
    else:
        factors = tuple(scale_factor) if isinstance(scale_factor, (tuple, list)) else (scale_factor,) * 2
        if len(factors) != 2 or not all(isinstance(f, numbers.Real) and not isinstance(f, bool)
                                        and math.isfinite(f) and f > 0 for f in factors):
            raise ValueError(f"{fn}: scale_factor must be a number > 0 or a pair of them, got {scale_factor!r}")
        out_hw = tuple(math.floor(i * f) for i, f in zip(in_hw, factors))
        if min(out_hw) < 1:
            raise ValueError(f"{fn}: scale_factor {scale_factor!r} leaves no pixel of x with shape {tuple(x.shape)}")
        scales = tuple(1.0 / f for f in factors)
    dtype = numpy.dtype(x.dtype).str
    rows, cols = (_axis_matrix(mode, i, o, s, align_corners, dtype) for i, o, s in zip(in_hw, out_hw, scales))
    return Resample2d(rows, cols).apply((x,))[0]


def adaptive_avg_pool2d(x, output_size):
    """Adaptive average pooling, as ``torch.nn.functional.adaptive_avg_pool2d``.

    Args:
        x: (N, C, H, W) floating point.
        output_size: (Ho, Wo), an int or a pair; None in the pair keeps that input size.
            ``1`` is global average pooling.

    Returns:
        (N, C, Ho, Wo): output ``i`` averages the inputs ``floor(i*H/Ho) .. ceil((i+1)*H/Ho) - 1``.
    """
    fn = "adaptive_avg_pool2d"
    _check_4d_float(fn, x)
    pair = _size_pair(fn, "output_size", output_size, allow_none=True)
    out_hw = tuple(i if o is None else o for i, o in zip(x.shape[2:], pair))
    dtype = numpy.dtype(x.dtype).str
    rows, cols = (_axis_matrix("area", i, o, None, None, dtype) for i, o in zip(x.shape[2:], out_hw))
    return Resample2d(rows, cols).apply((x,))[0]
