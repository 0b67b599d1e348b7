"""Per-sample resampling of images by fixed maps: integer translation and bilinear sampling.

Both are linear in the image ``x`` with coefficients that are constants (computed from random
numbers, never differentiated), so each node's backward is the adjoint map, another node of the
same kind, whose backward is the first again: every order of derivative comes for free.

* :func:`translate2d`: ``y[n, :, i, j] = x[n, :, i + ty[n], j + tx[n]]``, zero where that pixel
  is outside the image (DiffAugment's translation). Its adjoint is the translation by
  ``(-ty, -tx)``: a gather again, so the backward has no scatter.
* :func:`bilinear_sample`: ``y[n, :, p] = sum_k w[n, p, k] * x[n, :, index[n, p, k]]`` with the four
  taps of bilinear interpolation at given source coordinates (``grid_sample`` with
  ``align_corners=False``, in pixel units), outside pixels zero or mirrored. Its adjoint adds
  ``w * gy`` into the taps (a scatter-add, through :class:`~gpgan.functions.array.ScatterAdd`).

Everything is portable NumPy/CuPy code through the array module of ``x``.
"""
import numpy

from gpgan.autograd import FunctionNode
from gpgan.backend import get_array_module
from gpgan.functions._args import check_4d
from gpgan.functions.array import ScatterAdd

__all__ = ["translate2d", "bilinear_sample", "bilinear_taps", "PADDING_MODES"]

PADDING_MODES = ("zeros", "reflection")


class Translate2d(FunctionNode):
    """``x`` (N, C, H, W) shifted by ``shifts`` (N, 2) integer (dy, dx) pixels, zero filled."""

    def __init__(self, shifts):
        self.shifts = shifts

    def forward(self, inputs):
        x, = inputs
        xp = get_array_module(x)
        N, C, H, W = x.shape
        # Pad by one zero pixel and clamp the source index into the padding (as DiffAugment): any
        # shift, however large, reads zeros outside the image.
        padded = xp.zeros((N, C, H + 2, W + 2), dtype=x.dtype)
        padded[:, :, 1:-1, 1:-1] = x
        rows = xp.clip(xp.arange(H)[None, :] + self.shifts[:, 0:1] + 1, 0, H + 1)  # (N, H)
        cols = xp.clip(xp.arange(W)[None, :] + self.shifts[:, 1:2] + 1, 0, W + 1)  # (N, W)
        batch = xp.arange(N)[:, None, None]
        y = padded[batch, :, rows[:, :, None], cols[:, None, :]]  # (N, H, W, C): advanced axes first
        return (xp.ascontiguousarray(y.transpose(0, 3, 1, 2)),)

    def backward(self, indexes, grad_outputs):
        return (Translate2d(-self.shifts).apply(grad_outputs)[0],)


def translate2d(x, shifts):
    """Translate each image of ``x`` (N, C, H, W) by whole pixels, filling with zeros.

    Args:
        shifts: (N, 2) integer array on ``x``'s device: output pixel ``(i, j)`` of image ``n`` is
            input pixel ``(i + shifts[n, 0], j + shifts[n, 1])``, or 0 where that is outside.

    Returns:
        (N, C, H, W), differentiable to any order in ``x`` (not in ``shifts``).
    """
    check_4d("translate2d", "x", x)
    if tuple(shifts.shape) != (x.shape[0], 2) or numpy.dtype(shifts.dtype).kind not in "iu":
        raise ValueError(f"translate2d: shifts must be an integer array of shape ({x.shape[0]}, 2), got "
                         f"{shifts.dtype} {tuple(shifts.shape)}")
    return Translate2d(shifts).apply((x,))[0]


class BilinearSample(FunctionNode):
    """``x`` (N, C, H, W) -> (N, C, *out_hw) by four weighted taps per output pixel, or its adjoint.

    ``index`` (N, P, 4): flat input pixel ``row * W + col`` of each tap; ``weight`` (N, P, 4). With
    ``adjoint`` the node maps (N, C, *out_hw) back to (N, C, *in_hw), adding each output's
    gradient times its weights into its taps.
    """

    def __init__(self, index, weight, in_hw, out_hw, adjoint=False):
        self.index, self.weight = index, weight
        self.in_hw, self.out_hw = tuple(in_hw), tuple(out_hw)
        self.adjoint = adjoint

    def forward(self, inputs):
        x, = inputs
        xp = get_array_module(x)
        N, C = x.shape[:2]
        w = self.weight.astype(x.dtype, copy=False)[..., None]  # (N, P, 4, 1)
        if not self.adjoint:
            flat = x.reshape(N, C, -1)
            taps = flat[xp.arange(N)[:, None, None], :, self.index]  # (N, P, 4, C)
            y = (taps * w).sum(axis=2)  # (N, P, C)
            return (xp.ascontiguousarray(y.transpose(0, 2, 1)).reshape((N, C) + self.out_hw),)
        H, W = self.in_hw
        gy = x.reshape(N, C, -1).transpose(0, 2, 1)  # (N, P, C)
        parts = (gy[:, :, None, :] * w).reshape(-1, C)  # (N * P * 4, C)
        rows = (self.index + (xp.arange(N) * (H * W))[:, None, None]).reshape(-1)
        gx = ScatterAdd((rows,), (N * H * W, C)).forward((parts,))[0]  # repeated taps add up
        return (xp.ascontiguousarray(gx.reshape(N, H, W, C).transpose(0, 3, 1, 2)),)

    def backward(self, indexes, grad_outputs):
        return (BilinearSample(self.index, self.weight, self.in_hw, self.out_hw,
                               not self.adjoint).apply(grad_outputs)[0],)


def _fold(xp, i, size, padding):
    """Integer pixel indices ``i`` moved into ``[0, size)``: mirrored without repeating the edge
    ("reflection", as ``pad(mode='reflect')``), or clipped ("zeros"; their weight is zeroed)."""
    if padding == "zeros" or size == 1:
        return xp.clip(i, 0, size - 1)
    period = 2 * (size - 1)
    i = xp.mod(i, period)
    return xp.where(i > size - 1, period - i, i)


def bilinear_taps(xp, sx, sy, in_hw, padding="zeros"):
    """``(index, weight)`` of bilinear interpolation at source pixel coordinates ``sx``, ``sy``
    (N, P) in pixel units (pixel ``j``'s centre at ``j``), both (N, P, 4), for
    :class:`BilinearSample`. ``padding`` "zeros" gives outside taps weight 0; "reflection" mirrors
    them into the image."""
    H, W = in_hw
    x0, y0 = xp.floor(sx), xp.floor(sy)
    fx, fy = sx - x0, sy - y0
    x0, y0 = x0.astype(numpy.int64), y0.astype(numpy.int64)
    cols, rows = (x0, x0 + 1, x0, x0 + 1), (y0, y0, y0 + 1, y0 + 1)
    weights = ((1 - fy) * (1 - fx), (1 - fy) * fx, fy * (1 - fx), fy * fx)
    index, weight = [], []
    for r, c, w in zip(rows, cols, weights):
        if padding == "zeros":
            w = xp.where((r >= 0) & (r < H) & (c >= 0) & (c < W), w, 0)
        index.append(_fold(xp, r, H, padding) * W + _fold(xp, c, W, padding))
        weight.append(w)
    return xp.stack(index, axis=-1), xp.stack(weight, axis=-1)


def bilinear_sample(x, sx, sy, padding="zeros"):
    """Sample each image of ``x`` (N, C, H, W) bilinearly at its own source coordinates.

    Args:
        sx, sy: (N, Ho, Wo) source column and row of each output pixel, in pixel units (pixel
            ``j``'s centre at ``j``; ``grid_sample``'s ``align_corners=False`` grid maps to these
            by ``(g + 1) * size / 2 - 0.5``), on ``x``'s device, not differentiated.
        padding: "zeros" (outside pixels read 0) or "reflection" (mirrored without repeating the
            edge pixel, as ``pad(mode='reflect')``).

    Returns:
        (N, C, Ho, Wo), differentiable to any order in ``x``.
    """
    check_4d("bilinear_sample", "x", x)
    if padding not in PADDING_MODES:
        raise ValueError(f"bilinear_sample: padding {padding!r} is not supported; accepted: "
                         f"{', '.join(PADDING_MODES)}")
    if sx.shape != sy.shape or sx.ndim != 3 or sx.shape[0] != x.shape[0]:
        raise ValueError(f"bilinear_sample: sx and sy must both be (N, Ho, Wo) with N = {x.shape[0]}, got "
                         f"{tuple(sx.shape)} and {tuple(sy.shape)}")
    xp = get_array_module(sx)
    N, Ho, Wo = sx.shape
    index, weight = bilinear_taps(xp, sx.reshape(N, -1), sy.reshape(N, -1), x.shape[2:], padding)
    return BilinearSample(index, weight, x.shape[2:], (Ho, Wo)).apply((x,))[0]
