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
  ``w * gy`` into the taps (a scatter-add in float64: :func:`gpgan.kernels.sums_by_index`, NumPy's
  ``bincount``, and on CUDA atomic adds, in no fixed order).

Everything is portable NumPy/CuPy code through the array module of ``x``.
"""
import numpy

from gpgan import kernels
from gpgan.autograd import FunctionNode, Variable
from gpgan.backend import get_array_module
from gpgan.functions._args import check_4d

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

    ``index`` (4, N, P): flat input pixel ``row * W + col`` of each tap; ``weight`` (4, N, P). With
    ``adjoint`` the node maps (N, C, *out_hw) back to (N, C, *in_hw), adding each output's
    gradient times its weights into its taps. Pixels are moved channels-last for both, so that a
    tap is one row of a (N * H * W, C) table: the gather is one ``take`` of rows per tap, and the
    adjoint's sums one :func:`gpgan.kernels.sums_by_index` per channel (NumPy's ``bincount``, its
    fastest scatter-add; float64 sums).
    """

    def __init__(self, index, weight, in_hw, out_hw, adjoint=False):
        self.index, self.weight = index, weight
        self.in_hw, self.out_hw = tuple(in_hw), tuple(out_hw)
        self.adjoint = adjoint

    def _rows(self, xp):
        """The taps' rows in the (N * H * W, C) table: (4, N * P)."""
        _, n, p = self.index.shape
        return (self.index + (xp.arange(n) * (self.in_hw[0] * self.in_hw[1]))[:, None]).reshape(4, n * p)

    def forward(self, inputs):
        x, = inputs
        xp = get_array_module(x)
        weight = self.weight.astype(x.dtype, copy=False)
        if not self.adjoint:
            y = kernels.bilinear_gather(xp, x, self.index, weight, self.out_hw)
            return (self._gather(xp, x, weight) if y is None else y,)
        gx = kernels.bilinear_scatter(xp, x, self.index, weight, self.in_hw)
        return (self._scatter(xp, x, weight) if gx is None else gx,)

    def _gather(self, xp, x, weight):
        """The portable sample: (N, C, *out_hw)."""
        N, C = x.shape[:2]
        rows = self._rows(xp)
        w = weight.reshape(4, -1, 1)  # (4, N * P, 1)
        table = x.transpose(0, 2, 3, 1).reshape(-1, C)  # (N * H * W, C), a copy
        y = xp.take(table, rows[0], axis=0) * w[0]
        for k in range(1, 4):
            y += xp.take(table, rows[k], axis=0) * w[k]
        return xp.ascontiguousarray(y.reshape((N,) + self.out_hw + (C,)).transpose(0, 3, 1, 2))

    def _scatter(self, xp, gy, weight):
        """The portable adjoint of ``gy`` (N, C, *out_hw): (N, C, *in_hw)."""
        N, C = gy.shape[:2]
        H, W = self.in_hw
        rows, size = self._rows(xp).reshape(-1), N * H * W
        parts = gy.transpose(0, 2, 3, 1).reshape(1, -1, C) * weight.reshape(4, -1, 1)  # (4, N * P, C)
        gx = xp.stack([kernels.sums_by_index(xp, rows, parts[..., c].reshape(-1), size) for c in range(C)], axis=1)
        return xp.ascontiguousarray(gx.astype(gy.dtype, copy=False).reshape(N, H, W, C).transpose(0, 3, 1, 2))

    def backward(self, indexes, grad_outputs):
        return (BilinearSample(self.index, self.weight, self.in_hw, self.out_hw,
                               not self.adjoint).apply(grad_outputs)[0],)


def _fold(xp, i, size, padding):
    """``(j, inside)``: whole pixel coordinates ``i`` (floats) as pixels of the image and whether
    they are read. "zeros": pixels outside are not read. "reflection": as the reference's
    ``pad(mode='reflect')`` by at most ``size - 1`` pixels, then zeros: a coordinate up to
    ``size - 1`` beyond an edge is mirrored about it (the edge pixel not repeated), one further
    out is not read. ``j`` is clipped into the image either way (a pixel that is not read)."""
    last = size - 1
    if padding == "zeros" or size == 1:
        return xp.clip(i, 0, last), (i >= 0) & (i <= last)
    inside = (i >= -last) & (i <= 2 * last)
    return xp.clip(last - xp.abs(last - xp.abs(i)), 0, last), inside


def bilinear_taps(xp, sx, sy, in_hw, padding="zeros"):
    """``(index, weight)`` of bilinear interpolation at source pixel coordinates ``sx``, ``sy``
    (N, P) in pixel units (pixel ``j``'s centre at ``j``), both (4, N, P), for
    :class:`BilinearSample`; the weights in the coordinates' dtype. Taps that are not read
    (:func:`_fold`) get weight 0."""
    H, W = in_hw
    x0, y0 = xp.floor(sx), xp.floor(sy)
    fx, fy = sx - x0, sy - y0
    cols = [_fold(xp, c, W, padding) for c in (x0, x0 + 1)]
    rows = [_fold(xp, r, H, padding) for r in (y0, y0 + 1)]
    col_w, row_w = (1 - fx, fx), (1 - fy, fy)
    index, weight = [], []
    for (r, r_in), rw in zip(rows, row_w):
        for (c, c_in), cw in zip(cols, col_w):
            index.append((r * W + c).astype(numpy.int64))
            weight.append(xp.where(r_in & c_in, rw * cw, 0))
    return xp.stack(index), xp.stack(weight)


def bilinear_sample(x, sx, sy, padding="zeros"):
    """Sample each image of ``x`` (N, C, H, W) bilinearly at its own source coordinates.

    Args:
        sx, sy: (N, Ho, Wo) source column and row of each output pixel, in pixel units (pixel
            ``j``'s centre at ``j``; ``grid_sample``'s ``align_corners=False`` grid maps to these
            by ``(g + 1) * size / 2 - 0.5``), on ``x``'s device, not differentiated.
        padding: "zeros" (outside pixels read 0) or "reflection" (mirrored without repeating the
            edge pixel up to ``size - 1`` pixels beyond each edge, zeros further out: what
            ``pad(mode='reflect')`` by at most that much, then ``grid_sample``, reads).

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
    sx, sy = sx.reshape(N, -1), sy.reshape(N, -1)
    taps = kernels.bilinear_taps(xp, sx, sy, x.shape[2:], padding, x.data if isinstance(x, Variable) else x)
    index, weight = bilinear_taps(xp, sx, sy, x.shape[2:], padding) if taps is None else taps
    return BilinearSample(index, weight, x.shape[2:], (Ho, Wo)).apply((x,))[0]
