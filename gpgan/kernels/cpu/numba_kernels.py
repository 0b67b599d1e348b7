"""Numba kernels on the CPU (optional; switched by :mod:`gpgan.kernels.switches`): the convolutions' data movement,
the ReLU family's forward and gradient as one pass each, and batch norm's passes over pixel rows.

The convolution kernels work on a range of batch items ``[a, b)`` so that
:func:`gpgan.backend.parallel_range` can split the work over the cores (the kernels release the
GIL). The elementwise kernels (over whole 1-D arrays, as
:func:`gpgan.kernels.cpu.passes.compiled_elementwise` hands them) and batch norm's split their loops
over Numba's own threads. Each output element is written by one iteration, in a fixed order, and
sums run over fixed blocks: results do not depend on the thread count. Each kernel computes the same
terms in the same order as the NumPy code it replaces (in :mod:`gpgan.functions.conv`: sums from
zero, taps in (row, column) order; in ``activation.py`` and ``math.py``: the same products and
comparisons), so
the two agree bit for bit; no fast-math (no reassociation).
The sums are the exception (batch norm's kernels and ``channel_sums``): they add in float64, where
NumPy sums float32 pairwise, so they agree with the NumPy passes to the dtype's rounding.

Imported only through :func:`gpgan.kernels.cpu.select.cpu_kernels`, which this module's import
error or compile error turns off.
"""
import threading

import numba
import numpy

__all__ = ["use_threads", "window_columns", "col2im_channels_last", "col2im_planes", "add", "outer", "relu",
           "leaky_relu", "rectified_gradient",
           "channel_moments", "channel_sums", "channel_gradient_sums", "channel_affine", "channel_input_gradient",
           "bilinear_taps", "bilinear_gather", "bilinear_scatter"]

_jit = numba.njit(nogil=True, cache=True)
# Kernels that split their loop over Numba's threads (``prange``). With the OpenMP layer they run on
# the same libgomp thread team as oneDNN's calls (one team, warm between calls, where a second pool
# would spin against it); a thread-safe layer is required because sweeps run trainers in threads.
_parallel_jit = numba.njit(nogil=True, cache=True, parallel=True)
if numba.config.THREADING_LAYER == "default":
    numba.config.THREADING_LAYER = "threadsafe"


_applied = threading.local()  # the count this thread last gave Numba


def use_threads(n):
    """Run the parallel kernels on ``n`` threads (at most Numba's pool size). Numba's count is
    per calling thread, so callers set it before each call; a no-op when this thread last set
    ``n`` here (one attribute read, where asking Numba for its count is a call into its runtime
    on each of a step's kernel calls). Code that calls ``numba.set_num_threads`` itself goes through
    :func:`gpgan.set_num_threads` to change the kernels' count."""
    n = min(n, numba.config.NUMBA_NUM_THREADS)
    if getattr(_applied, "count", None) == n:
        return
    if numba.get_num_threads() != n:
        numba.set_num_threads(n)
    _applied.count = n


@_jit
def window_columns(x, col, a, b, off_h, off_w, s_h, s_w, step_h, step_w):
    """Windows of ``x`` (N, H, W, C), zero outside it, into ``col`` (N, Ho, Wo, tH, tW, C).

    ``col[n, h, w, i, j] = x[n, off_h + h*s_h + i*step_h, off_w + w*s_w + j*step_w]`` where that
    index is inside ``x`` and 0 elsewhere: im2col and its zero padding in one pass.
    """
    H, W, C = x.shape[1], x.shape[2], x.shape[3]
    Ho, Wo, tH, tW = col.shape[1], col.shape[2], col.shape[3], col.shape[4]
    for n in range(a, b):
        for h in range(Ho):
            for w in range(Wo):
                for i in range(tH):
                    ih = off_h + h * s_h + i * step_h
                    for j in range(tW):
                        iw = off_w + w * s_w + j * step_w
                        dst = col[n, h, w, i, j]
                        if ih < 0 or ih >= H or iw < 0 or iw >= W:
                            for c in range(C):
                                dst[c] = 0
                        else:
                            src = x[n, ih, iw]
                            for c in range(C):
                                dst[c] = src[c]


@_jit
def _tap_source(o, p, k, d, s, size):
    """The input index whose kernel tap ``k`` lands on output index ``o`` along one axis of a
    transposed convolution (``o = h*s - p + k*d``), or -1 when no input of ``size`` does."""
    t = o + p - k * d
    if t < 0 or t % s != 0 or t // s >= size:
        return -1
    return t // s


@_jit
def col2im_channels_last(cols, y, a, b, s_h, s_w, p_h, p_w, d_h, d_w):
    """Transposed-convolution col2im: ``cols`` (N, H, W, kH, kW, C) -> ``y`` (N, Ho, Wo, C).

    Input pixel (h, w)'s tap (i, j) lands on output ``(h*s - p + i*d)`` per axis; each output
    pixel is the sum of the taps landing on it, taken in (i, j) order from zero. Each ``cols``
    value is read once and each ``y`` value written once (the NumPy form zeroes ``y`` and makes
    kH*kW strided read-modify-write passes over it).
    """
    H, W, kH, kW, C = cols.shape[1], cols.shape[2], cols.shape[3], cols.shape[4], cols.shape[5]
    Ho, Wo = y.shape[1], y.shape[2]
    for n in range(a, b):
        for oh in range(Ho):
            for ow in range(Wo):
                out = y[n, oh, ow]
                for c in range(C):
                    out[c] = 0
                for i in range(kH):
                    ih = _tap_source(oh, p_h, i, d_h, s_h, H)
                    if ih < 0:
                        continue
                    for j in range(kW):
                        iw = _tap_source(ow, p_w, j, d_w, s_w, W)
                        if iw < 0:
                            continue
                        src = cols[n, ih, iw, i, j]
                        for c in range(C):
                            out[c] += src[c]


@_jit
def col2im_planes(cols, y, a, b, s_h, s_w, p_h, p_w, d_h, d_w):
    """col2im channels-first: ``cols`` (kH, kW, C, N, H, W) -> ``y`` (C, N, Ho, Wo).

    The same sums as :func:`col2im_channels_last` for a layer with few output channels, whose
    GEMM writes one (N, H, W) plane per (tap, channel). Per output row, the taps are added in
    (i, j) order, each over the run of columns it reaches (contiguous reads for stride 1).
    """
    kH, kW, C, H, W = cols.shape[0], cols.shape[1], cols.shape[2], cols.shape[4], cols.shape[5]
    Ho, Wo = y.shape[2], y.shape[3]
    for n in range(a, b):
        for c in range(C):
            for oh in range(Ho):
                row = y[c, n, oh]
                for ow in range(Wo):
                    row[ow] = 0
                for i in range(kH):
                    ih = _tap_source(oh, p_h, i, d_h, s_h, H)
                    if ih < 0:
                        continue
                    for j in range(kW):
                        src = cols[i, j, c, n, ih]
                        off = p_w - j * d_w  # input column (ow + off) / s_w
                        first = max(0, -off)
                        rest = (first + off) % s_w
                        if rest:
                            first += s_w - rest
                        last = min(Wo, W * s_w - off)
                        if s_w == 1:
                            for ow in range(first, last):
                                row[ow] += src[ow + off]
                        else:
                            for ow in range(first, last, s_w):
                                row[ow] += src[(ow + off) // s_w]


@_parallel_jit
def leaky_relu(x, slope, out):
    """``out = max(x, x * slope)`` elementwise on 1-D arrays, for ``0 <= slope <= 1``: ``x`` where
    ``x > 0``, ``x * slope`` elsewhere (the same values, -0.0 and NaN included, in one pass)."""
    for i in numba.prange(x.size):
        v = x[i]
        out[i] = v if v > 0 else v * slope


@_parallel_jit
def rectified_gradient(gy, ref, positive, negative, out):
    """``out = gy * (positive if ref > 0 else negative)`` elementwise on 1-D arrays: the gradient
    of the ReLU family in one pass, the same products as NumPy's ``gy * mask`` with the mask's two
    values (``gy * 0`` stays a product, so -0.0 and NaN come out alike)."""
    for i in numba.prange(gy.size):
        out[i] = gy[i] * (positive if ref[i] > 0 else negative)


@_parallel_jit
def add(a, b, out):
    """``out = a + b`` elementwise on 1-D arrays (one IEEE addition each, as NumPy's)."""
    for i in numba.prange(a.size):
        out[i] = a[i] + b[i]


@_parallel_jit
def outer(a, b, out):
    """``out[i, j] = a[i] * b[j]`` for 1-D ``a`` (M,) and ``b`` (N,) and ``out`` (M, N): an
    (M, 1) @ (1, N) product, one rounded product per element as NumPy's broadcast multiply, with
    the rows split over the threads."""
    for i in numba.prange(a.size):
        v = a[i]
        row = out[i]
        for j in range(b.size):
            row[j] = v * b[j]


@_parallel_jit
def relu(x, out):
    """``out = max(x, 0)`` as NumPy's ``maximum`` computes it: ``x`` where ``x >= 0`` or NaN
    (so -0.0 stays -0.0), else 0."""
    for i in numba.prange(x.size):
        v = x[i]
        out[i] = v if (v >= 0 or v != v) else 0


# -- batch norm on (M, C) pixel rows (channels-last): statistics in float64, one pass each ----------
# The sums run over fixed blocks of rows, one block per parallel iteration, each into its own row
# of the partial sums (B, C): the caller adds the B partials in block order, so the results do not
# depend on the thread count. The elementwise passes split their rows over the threads.
@_parallel_jit
def channel_moments(x, shift, s1, s2):
    """Per-block float64 sums of ``x`` (M, C): for block ``k`` (rows ``M*k//B`` to
    ``M*(k+1)//B``, ``B = s1.shape[0]``), ``s1[k] += x - shift`` and ``s2[k] += (x - shift)**2``
    (``shift`` (C,) float64, a sample of each channel, so that the variance
    ``(s2 - s1**2 / M) / M`` loses no digits to a large mean)."""
    M, C = x.shape
    B = s1.shape[0]
    for k in numba.prange(B):
        p1, p2 = s1[k], s2[k]
        for m in range(M * k // B, M * (k + 1) // B):
            row = x[m]
            for c in range(C):
                v = row[c] - shift[c]
                p1[c] += v
                p2[c] += v * v


@_parallel_jit
def channel_sums(x, s):
    """Per-block float64 sums of ``x`` (M, C) (blocks as in :func:`channel_moments`, ``B =
    s.shape[0]``): ``s[k] += x`` over block ``k``'s rows."""
    M, C = x.shape
    B = s.shape[0]
    for k in numba.prange(B):
        p = s[k]
        for m in range(M * k // B, M * (k + 1) // B):
            row = x[m]
            for c in range(C):
                p[c] += row[c]


@_parallel_jit
def channel_gradient_sums(x, gy, mean, s_g, s_gx):
    """Per-block float64 sums (blocks as in :func:`channel_moments`, ``B = s_g.shape[0]``):
    ``s_g[k] += gy`` and ``s_gx[k] += gy * (x - mean)`` (``x``, ``gy`` (M, C); ``mean`` (C,) float64)."""
    M, C = x.shape
    B = s_g.shape[0]
    for k in numba.prange(B):
        pg, pgx = s_g[k], s_gx[k]
        for m in range(M * k // B, M * (k + 1) // B):
            xr, gr = x[m], gy[m]
            for c in range(C):
                g = numpy.float64(gr[c])
                pg[c] += g
                pgx[c] += g * (xr[c] - mean[c])


@_parallel_jit
def channel_affine(x, mean, scale, shift, out):
    """``out = (x - mean) * scale + shift`` on (M, C) arrays, per channel (C,)."""
    M, C = x.shape
    for m in numba.prange(M):
        xr, o = x[m], out[m]
        for c in range(C):
            o[c] = (xr[c] - mean[c]) * scale[c] + shift[c]


@_parallel_jit
def channel_input_gradient(x, gy, mean, gy_mean, coef, k, out):
    """``out = (gy - gy_mean) * coef - (x - mean) * k`` on (M, C) arrays, per channel (C,): batch
    norm's input gradient."""
    M, C = x.shape
    for m in numba.prange(M):
        xr, gr, o = x[m], gy[m], out[m]
        for c in range(C):
            o[c] = (gr[c] - gy_mean[c]) * coef[c] - (xr[c] - mean[c]) * k[c]


# -- bilinear sampling (gpgan.functions.sampling) -------------------------------------------------
# The taps as bilinear_taps' NumPy form computes them (the same float operations in the
# coordinates' dtype: ``one`` is 1 in that dtype, so no operation widens), the gather's four
# products added in tap order, the adjoint's rounded products summed in float64 in bincount's order
# (tap-major, then output pixel): the same bits as the NumPy form. Images are split over the
# threads; every tap of an image lies in that image, so no two threads write one element.
@_jit
def _fold(i, size, reflect):
    """(pixel, read): whole pixel coordinate ``i`` folded into ``[0, size)`` as ``_fold`` in
    gpgan.functions.sampling does (zeros: outside not read; reflection: mirrored up to ``size - 1``
    pixels beyond each edge, not read further out; the pixel clipped into the image either way)."""
    last = size - 1
    if not reflect or size == 1:
        return min(max(i, 0), last), 0 <= i <= last
    return min(max(last - abs(last - abs(i)), 0), last), -last <= i <= 2 * last


@_parallel_jit
def bilinear_taps(sx, sy, height, width, reflect, one, index, weight):
    """Fill ``index`` (4, N, P) int64 and ``weight`` (4, N, P) from the source coordinates ``sx``,
    ``sy`` (N, P) (pixel units, finite) of an image of ``height`` x ``width``: tap ``k = 2 * r + c``
    reads row ``floor(sy) + r`` and column ``floor(sx) + c``."""
    N, P = sx.shape
    for n in numba.prange(N):
        for p in range(P):
            x0, y0 = numpy.floor(sx[n, p]), numpy.floor(sy[n, p])
            fx, fy = sx[n, p] - x0, sy[n, p] - y0
            col_w, row_w = (one - fx, fx), (one - fy, fy)
            for r in range(2):
                row, row_in = _fold(int(y0) + r, height, reflect)
                for c in range(2):
                    col, col_in = _fold(int(x0) + c, width, reflect)
                    k = 2 * r + c
                    index[k, n, p] = row * width + col
                    weight[k, n, p] = row_w[r] * col_w[c] if row_in and col_in else 0


@_parallel_jit
def bilinear_gather(x, index, weight, out):
    """``out[n, c, p] = sum_k x[n, c, index[k, n, p]] * weight[k, n, p]`` for ``x`` (N, C, Hi * Wi)
    and ``out`` (N, C, P), the products added in tap order."""
    N, C, P = out.shape
    for n in numba.prange(N):
        for c in range(C):
            src, dst = x[n, c], out[n, c]
            for p in range(P):
                acc = src[index[0, n, p]] * weight[0, n, p]
                for k in range(1, 4):
                    acc += src[index[k, n, p]] * weight[k, n, p]
                dst[p] = acc


@_parallel_jit
def bilinear_scatter(gy, index, weight, out):
    """The gather's adjoint: ``out[n, c, index[k, n, p]] += gy[n, c, p] * weight[k, n, p]`` for
    ``gy`` (N, C, P) and a zeroed float64 ``out`` (N, C, Hi * Wi), each product rounded in ``gy``'s
    dtype, then added in float64, tap-major."""
    N, C, P = gy.shape
    for n in numba.prange(N):
        for c in range(C):
            src, dst = gy[n, c], out[n, c]
            for k in range(4):
                for p in range(P):
                    dst[index[k, n, p]] += numpy.float64(src[p] * weight[k, n, p])


# Fail here, at import (which turns the kernels off with one warning), rather than inside a training
# step, when Numba finds no thread-safe threading layer (neither OpenMP nor TBB).
relu(numpy.zeros(1), numpy.empty(1))
