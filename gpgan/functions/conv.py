"""2-D convolution and transposed convolution (torch semantics), differentiable to any order.

Three linear operations close the family under differentiation:

* ``Conv2d(x, W) -> y``: im2col of the padded input (a strided view, copied once) times the
  weight, one GEMM.
* ``ConvTranspose2d(x, W) -> y``: the adjoint of ``Conv2d`` in its input (scatter or gather form,
  below; no atomics either way, so it is deterministic on CuPy too).
* ``Conv2dGradWeight(x, gy) -> gW``: the weight gradient of ``Conv2d``: the im2col of ``x``
  contracted with ``gy`` over batch and pixels, one GEMM.

Their backwards are each other: ``Conv2d``'s input gradient is ``ConvTranspose2d`` with the same
weight and its weight gradient is ``Conv2dGradWeight``; ``ConvTranspose2d``'s input gradient is
``Conv2d`` and its weight gradient ``Conv2dGradWeight(gy, x)``; ``Conv2dGradWeight``'s gradients
are ``ConvTranspose2d(gy, ggW)`` for ``x`` and ``Conv2d(x, ggW)`` for ``gy``. Each backward
computes only the gradients asked for (an R1 penalty's image gradient computes no weight gradient).

Kernels (NumPy or CuPy by the same code). Activations may be NCHW or channels-last in memory; the
kernels return channels-last (see "layouts" below), and NumPy's large copies and col2im adds are
split over the cores (:func:`gpgan.kernels.over_batch`). Where an accelerator takes them
(:mod:`gpgan.kernels.convolution`), col2im and padded im2col run as compiled single passes (Numba,
with the same results bit for bit; one group) and whole convolutions on oneDNN (float32, any
groups; to float32 rounding), each asked once at the top of the kernel below that it replaces,
which runs when it declines. A convolution is im2col (a copy of a strided view of the padded
channels-last input, so it moves runs of contiguous channels) and one GEMM. A transposed
convolution has two kernels, and the one that moves less data runs: the scatter form (one GEMM to
``kH*kW*Cout`` values per input pixel, then col2im adds; used when ``Cin > Cout``) and the gather
form (the sub-pixel decomposition: each of the ``sH*sW`` output phases is a stride-1 correlation of
the input with the kernel taps that reach it, one window copy and one GEMM each, no adds). With
stride 1 a convolution equals a transposed convolution with the flipped kernel, so a convolution
with few output channels (an image-producing layer) and its weight gradient run on the data-lighter
side too. A depthwise convolution (one input and one output channel per group) runs directly: a
multiply-add per kernel tap over strided views of the channels-last input, no columns (its im2col
would copy kH*kW values per pixel and channel for a product with one column).
"""
from gpgan.autograd import FunctionNode
from gpgan import kernels
from gpgan.backend import get_array_module
from gpgan.functions._args import check_4d, check_int, pair
from gpgan.functions.array import getitem
from gpgan.functions.reduction import sum as _sum


__all__ = ['conv2d', 'conv_transpose2d', 'conv2d_grad_weight']


# -- output sizes -----------------------------------------------------------------------------
def _conv_out_size(size, k, s, p, d):
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def _convt_out_size(size, k, s, p, d, op):
    return (size - 1) * s - 2 * p + d * (k - 1) + 1 + op


# -- layouts ------------------------------------------------------------------------------------
# An activation is an (N, C, H, W) array whose memory may be NCHW or channels-last (NHWC strides,
# as torch's ``channels_last``), or any other order. Every kernel below reads any layout and returns
# channels-last (the scatter form with a few output channels excepted, see there): a GEMM's output
# rows are pixels and its columns channels, which is that layout already, so no transposing copy
# follows a convolution, and the next one's im2col reads contiguous runs of channels. NumPy's and
# CuPy's elementwise functions keep the layout of their operands.
def _nhwc(x):
    """The (N, H, W, C) view of an (N, C, H, W) array; contiguous when ``x`` is channels-last."""
    return x.transpose(0, 2, 3, 1)


def _nchw(y):
    """The (N, C, H, W) view of an (N, H, W, C) array."""
    return y.transpose(0, 3, 1, 2)


# -- raw array kernels (NumPy or CuPy by the same code) -----------------------------------------
def _as_strided(xp, x, shape, strides):
    if xp.__name__ == "numpy":
        return xp.lib.stride_tricks.as_strided(x, shape, strides, writeable=False)
    return xp.lib.stride_tricks.as_strided(x, shape, strides)


def _padded_nhwc(xp, x, pads):
    """``x`` (N, C, H, W) as a contiguous zero-padded channels-last array.

    ``pads`` is ``((top, bottom), (left, right))``. Without padding a channels-last ``x`` is
    returned as it is (a view, no copy). With padding only the border is zeroed, and the interior
    is one copy (of contiguous runs of channels when ``x`` is channels-last).
    """
    xh = _nhwc(x)
    (top, bottom), (left, right) = pads
    if not (top or bottom or left or right):
        return xp.ascontiguousarray(xh)
    N, H, W, C = xh.shape
    out = xp.empty((N, top + H + bottom, left + W + right, C), dtype=x.dtype)

    def fill(a, b):
        o = out[a:b]
        o[:, :top] = 0
        o[:, top + H:] = 0
        o[:, top:top + H, :left] = 0
        o[:, top:top + H, left + W:] = 0
        o[:, top:top + H, left:left + W] = xh[a:b]

    kernels.over_batch(xp, fill, N, out.nbytes)
    return out


def _windows(xp, xpad, origin, out_hw, taps, tap_step, s, groups):
    """Copy of the windows of ``xpad`` (N, Hp, Wp, C) as columns ``(G, N*Ho*Wo, tH*tW*Cg)``.

    Output pixel (h, w) reads ``xpad[origin + (h*s + a*tap_step)]`` for taps (a, b) < taps, per
    axis; the copy moves runs of contiguous channels (``tW*Cg`` of them when ``tap_step == 1``).
    """
    N, Hp, Wp, C = xpad.shape
    (Ho, Wo), (tH, tW), Cg = out_hw, taps, C // groups
    # as_strided does no bounds check: make sure every window lies inside the padded input.
    for axis, size in ((0, Hp), (1, Wp)):
        last = origin[axis] + (out_hw[axis] - 1) * s[axis] + (taps[axis] - 1) * tap_step[axis]
        if origin[axis] < 0 or last >= size:
            raise AssertionError("im2col window exceeds the padded input")
    sN, sH, sW, sC = xpad.strides
    shape = (groups, N, Ho, Wo, tH, tW, Cg)
    view = _as_strided(xp, xpad[:, origin[0]:, origin[1]:], shape,
                       (Cg * sC, sN, s[0] * sH, s[1] * sW, tap_step[0] * sH, tap_step[1] * sW, sC))
    col = xp.empty(shape, dtype=xpad.dtype)

    def copy(a, b):
        col[:, a:b] = view[:, a:b]

    kernels.over_batch(xp, copy, N, col.nbytes)
    return col.reshape(groups, N * Ho * Wo, tH * tW * Cg)


class _PaddedWindows:
    """Windows of ``x`` (N, C, H, W) zero-padded by ``pads`` ``((top, bottom), (left, right))``.

    Where :func:`gpgan.kernels.window_columns` takes it, each window copy reads ``x`` itself and
    writes the zeros of the padding as it goes; otherwise the padded channels-last copy is made
    once, on the first request, and every window copy reads it.
    """

    def __init__(self, xp, x, pads):
        self.xp, self.x, self.pads = xp, x, pads
        self._xpad = None

    def columns(self, origin, out_hw, taps, tap_step, s, groups):
        """As :func:`_windows` on the padded input: ``(G, N*Ho*Wo, tH*tW*Cg)``."""
        xp, x = self.xp, self.x
        col = kernels.window_columns(xp, x, self.pads, origin, out_hw, taps, tap_step, s, groups)
        if col is not None:
            return col
        if self._xpad is None:
            self._xpad = _padded_nhwc(xp, x, self.pads)
        return _windows(xp, self._xpad, origin, out_hw, taps, tap_step, s, groups)


def _im2col(xp, x, ksize, out_hw, s, p, d, groups):
    """Columns ``(G, N*Ho*Wo, kH*kW*Cg)`` of ``x`` (N, C, H, W) for a convolution.

    The windows are read from the channels-last padded input. A 1x1 convolution with stride 1
    is that padded input itself (no copy at all without padding, for a channels-last input).
    """
    N, C, H, W = x.shape
    Ho, Wo = out_hw
    pads = ((p[0], p[0]), (p[1], p[1]))
    if tuple(ksize) == (1, 1) and s == (1, 1) and groups == 1 and (Ho, Wo) == (H + 2 * p[0], W + 2 * p[1]):
        return _padded_nhwc(xp, x, pads).reshape(1, N * Ho * Wo, C)
    return _PaddedWindows(xp, x, pads).columns((0, 0), out_hw, ksize, d, s, groups)


def _gemm(xp, a, b):
    """``a @ b`` for stacks of matrices; one plain 2-D product when there is one group (BLAS).

    Operands may be transposed views of contiguous matrices: BLAS reads them as they are.
    """
    if a.shape[0] == 1:
        return kernels.matmul(a[0], b[0])[None]
    return kernels.matmul(a, b)


def _group_rows(xp, x, groups):
    """``x`` (N, C, H, W) as ``(G, N*H*W, C/G)`` pixel rows per group: a view for one group of a
    channels-last ``x``, else one copy."""
    N, C, H, W = x.shape
    if groups == 1:
        return _nhwc(x).reshape(1, N * H * W, C)
    return xp.ascontiguousarray(_nhwc(x).reshape(N * H * W, groups, C // groups).transpose(1, 0, 2))


def _ungroup_rows(xp, y, nhw):
    """The inverse of :func:`_group_rows`: ``(G, N*H*W, Cg)`` -> channels-last (N, G*Cg, H, W)."""
    G, M, Cg = y.shape
    if G == 1:
        return _nchw(y.reshape(nhw + (Cg,)))
    return _nchw(xp.ascontiguousarray(y.transpose(1, 0, 2)).reshape(nhw + (G * Cg,)))


def _flipped_adjoint(w):
    """The kernel of the other direction for stride 1: ``(A, B, kH, kW) -> (B, A, kH, kW)`` flipped.

    With stride 1, ``conv2d(x, W, padding=p, dilation=d)`` equals
    ``conv_transpose2d(x, _flipped_adjoint(W), padding=d*(k-1)-p, dilation=d)`` and the other way
    round, so either can run on the kernel that moves less data (a view, no copy).
    """
    return w[:, :, ::-1, ::-1].transpose(1, 0, 2, 3)


def _adjoint_padding(k, p, d):
    return tuple(d[a] * (k[a] - 1) - p[a] for a in range(2))


def _depthwise(groups, *channels):
    """True for a depthwise convolution: one channel per group on every side given."""
    return groups > 1 and all(c == groups for c in channels)


def _tap_views(a, out_hw, ksize, s, d):
    """For each tap (i, j) in row-major order, the (N, Ho, Wo, C) strided view of the channels-last
    ``a`` (N, Hp, Wp, C) that the tap reads (a convolution) or writes (its adjoint)."""
    (Ho, Wo), (kH, kW) = out_hw, ksize
    return [a[:, i * d[0]:i * d[0] + (Ho - 1) * s[0] + 1:s[0], j * d[1]:j * d[1] + (Wo - 1) * s[1] + 1:s[1]]
            for i in range(kH) for j in range(kW)]


def _depthwise_conv2d(xp, x, w, s, p, d, out_hw):
    """Depthwise ``conv2d``: x (N, C, H, W), w (C, 1, kH, kW), groups = C -> channels-last
    (N, C, *out_hw). ``y[n, c] = sum over taps of w[c, 0, i, j] * (the tap's view of x)``, one
    multiply-add pass per tap over batch slices, in tap order."""
    N, C = x.shape[:2]
    kH, kW = w.shape[2:]
    xpad = _padded_nhwc(xp, x, ((p[0], p[0]), (p[1], p[1])))
    taps = xp.ascontiguousarray(w.reshape(C, kH * kW).T)  # (kH*kW, C): one row of weights per tap
    y = xp.empty((N,) + tuple(out_hw) + (C,), dtype=x.dtype)

    def run(a, b):
        out = y[a:b]
        for t, view in enumerate(_tap_views(xpad[a:b], out_hw, (kH, kW), s, d)):
            if t == 0:
                xp.multiply(view, taps[0], out=out)
            else:
                out += view * taps[t]

    kernels.over_batch(xp, run, N, (kH * kW + 1) * y.nbytes)
    return _nchw(y)


def _depthwise_conv_transpose2d(xp, x, w, s, p, d, out_hw):
    """Depthwise ``conv_transpose2d``: x (N, C, H, W), w (C, 1, kH, kW), groups = C -> channels-last
    (N, C, *out_hw): each tap adds ``w[c, 0, i, j] * x`` into its strided view of the padded
    output (the adjoint of :func:`_depthwise_conv2d`), in tap order; the crop is a view."""
    N, C, H, W = x.shape
    kH, kW = w.shape[2:]
    Ho, Wo = out_hw
    # Rows past the last window (output_padding) receive nothing; no window passes the end.
    Hp = max(Ho + 2 * p[0], (H - 1) * s[0] + d[0] * (kH - 1) + 1)
    Wp = max(Wo + 2 * p[1], (W - 1) * s[1] + d[1] * (kW - 1) + 1)
    taps = xp.ascontiguousarray(w.reshape(C, kH * kW).T)
    xh = _nhwc(x)
    ypad = xp.empty((N, Hp, Wp, C), dtype=x.dtype)

    def run(a, b):
        ypad[a:b] = 0
        for t, view in enumerate(_tap_views(ypad[a:b], (H, W), (kH, kW), s, d)):
            view += xh[a:b] * taps[t]

    kernels.over_batch(xp, run, N, (kH * kW + 1) * ypad.nbytes)
    return _nchw(ypad[:, p[0]:p[0] + Ho, p[1]:p[1] + Wo])


def _depthwise_grad_weight(xp, x, gy, ksize, s, p, d):
    """The weight gradient (C, 1, kH, kW) of :func:`_depthwise_conv2d` for output gradient ``gy``
    (N, C, Ho, Wo): per tap, the sum over batch and pixels of ``gy`` times the tap's view of x."""
    N, C = x.shape[:2]
    kH, kW = ksize
    xpad = _padded_nhwc(xp, x, ((p[0], p[0]), (p[1], p[1])))
    gyh = _nhwc(gy)
    gw = xp.empty((kH * kW, C), dtype=x.dtype)
    for t, view in enumerate(_tap_views(xpad, gy.shape[2:], ksize, s, d)):
        gw[t] = (view * gyh).sum(axis=(0, 1, 2))
    return xp.ascontiguousarray(gw.T).reshape(C, 1, kH, kW)


def _conv2d_forward(xp, x, w, s, p, d, groups):
    N, C = x.shape[:2]
    O, Cg, kH, kW = w.shape
    Og = O // groups
    Ho = _conv_out_size(x.shape[2], kH, s[0], p[0], d[0])
    Wo = _conv_out_size(x.shape[3], kW, s[1], p[1], d[1])
    y = kernels.conv2d(xp, x, w, s, p, d, groups, (Ho, Wo))
    if y is not None:
        return y
    if _depthwise(groups, C, O):
        return _depthwise_conv2d(xp, x, w, s, p, d, (Ho, Wo))
    q = _adjoint_padding((kH, kW), p, d)
    if s == (1, 1) and groups == 1 and 2 * O < C and min(q) >= 0:
        # Few output channels (an image-producing layer): gathering windows of the wide input
        # would copy kH*kW*C values per pixel; the scatter form writes kH*kW*O instead.
        return _conv_transpose2d_scatter(xp, x, _flipped_adjoint(w), s, q, d, 1, (Ho, Wo))
    col = _im2col(xp, x, (kH, kW), (Ho, Wo), s, p, d, groups)  # (G, M, K)
    # The weight as (G, Og, K) rows in the columns' (kH, kW, Cg) order, a cheap copy (runs of
    # kH*kW), read transposed by BLAS.
    w2 = xp.ascontiguousarray(w.reshape(groups, Og, Cg, kH, kW).transpose(0, 1, 3, 4, 2))
    return _ungroup_rows(xp, _gemm(xp, col, w2.reshape(groups, Og, kH * kW * Cg).transpose(0, 2, 1)), (N, Ho, Wo))


def _conv_transpose2d_forward(xp, x, w, s, p, d, groups, out_hw):
    """``x`` (N, Cin, H, W), ``w`` (Cin, Cog, kH, kW) -> (N, Cog*G, *out_hw).

    Two kernels compute it: the scatter form (one GEMM to ``kH*kW*Cog`` values per input pixel,
    then col2im adds) and the gather form (per output phase, a GEMM of gathered input windows,
    ``kH*kW*Cin / (sH*sW)`` values per output pixel, no adds). The one that moves less data runs.
    """
    y = kernels.conv_transpose2d(xp, x, w, s, p, d, groups, out_hw)
    if y is not None:
        return y
    Cin, Cog = w.shape[:2]
    if _depthwise(groups, Cin, Cog * groups):
        return _depthwise_conv_transpose2d(xp, x, w, s, p, d, out_hw)
    Cig = Cin // groups
    if Cig < Cog or (Cig == Cog and s == (1, 1)):
        return _conv_transpose2d_gather(xp, x, w, s, p, d, groups, out_hw)
    return _conv_transpose2d_scatter(xp, x, w, s, p, d, groups, out_hw)


def _conv_transpose2d_scatter(xp, x, w, s, p, d, groups, out_hw):
    """The scatter form: ``cols = x @ W`` for every input pixel, then col2im adds.

    Channels-last (runs of Cog contiguous values per strided add, result channels-last), or, for
    a few output channels and one group, channels-first: the GEMM then writes one (N, H, W) plane
    per (tap, channel), so the adds move runs of W values instead of Cog, and the result's memory
    is (Cog, N, Ho, Wo).
    """
    N, Cin, H, W = x.shape
    _, Cog, kH, kW = w.shape
    Cig = Cin // groups
    Ho, Wo = out_hw
    # Rows past the last window (output_padding) receive nothing; no window passes the end.
    Hp = max(Ho + 2 * p[0], (H - 1) * s[0] + d[0] * (kH - 1) + 1)
    Wp = max(Wo + 2 * p[1], (W - 1) * s[1] + d[1] * (kW - 1) + 1)
    hs, ws = (H - 1) * s[0] + 1, (W - 1) * s[1] + 1
    # (G, Cig, kH*kW*Cog): the cheap weight copy (runs of kH*kW).
    w2 = xp.ascontiguousarray(w.reshape(groups, Cig, Cog, kH, kW).transpose(0, 1, 3, 4, 2))
    w2 = w2.reshape(groups, Cig, kH * kW * Cog)
    rows = _group_rows(xp, x, groups)  # (G, N*H*W, Cig)
    if groups == 1 and Cog < _CHANNELS_FIRST_BELOW:
        cols = kernels.matmul(w2[0].T, rows[0].T).reshape(kH, kW, Cog, N, H, W)
        y = kernels.col2im_planes(xp, cols, out_hw, s, p, d)
        if y is not None:
            return y
        ypad = xp.empty((Cog, N, Hp, Wp), dtype=cols.dtype)

        def col2im_planes(a, b):
            ypad[:, a:b] = 0
            for i in range(kH):
                for j in range(kW):
                    h0, w0 = i * d[0], j * d[1]
                    ypad[:, a:b, h0:h0 + hs:s[0], w0:w0 + ws:s[1]] += cols[i, j, :, a:b]

        kernels.over_batch(xp, col2im_planes, N, cols.nbytes)
        return ypad[:, :, p[0]:p[0] + Ho, p[1]:p[1] + Wo].transpose(1, 0, 2, 3)
    cols = _gemm(xp, rows, w2).reshape(groups, N, H, W, kH, kW, Cog)
    y = kernels.col2im_channels_last(xp, cols, out_hw, s, p, d)
    if y is not None:
        return y
    ypad = xp.empty((N, Hp, Wp, groups, Cog), dtype=cols.dtype)

    def col2im(a, b):
        ypad[a:b] = 0
        for i in range(kH):
            for j in range(kW):
                h0, w0 = i * d[0], j * d[1]
                ypad[a:b, h0:h0 + hs:s[0], w0:w0 + ws:s[1]] += cols[:, a:b, :, :, i, j].transpose(1, 2, 3, 0, 4)

    kernels.over_batch(xp, col2im, N, cols.nbytes)
    # The crop is a view: the next operation reads it in place (no copy of the output).
    return _nchw(ypad[:, p[0]:p[0] + Ho, p[1]:p[1] + Wo].reshape(N, Ho, Wo, groups * Cog))


# Below this many output channels the scatter form works channels-first (see above).
_CHANNELS_FIRST_BELOW = 16


def _phase(n_in, n_out, k, s, p, d, r):
    """One axis of one output phase of a transposed convolution (sub-pixel decomposition).

    Output index ``o = h*s - p + i*d`` (input h, tap i); phase ``r`` holds the outputs with
    ``(o + p) % s == r``, i.e. ``o = s*m + r - p``, which receive exactly the taps ``i`` with
    ``i*d % s == r``, from inputs ``h = m - (i*d - r) // s``. Returns the taps in decreasing order
    (their input offsets then increase by a constant step), the first and count of ``m``, the
    offset ``m - h`` of the first tap, and that step.
    """
    taps = [i for i in range(k - 1, -1, -1) if (i * d) % s == r]
    shifts = [(i * d - r) // s for i in taps]
    m0 = -((r - p) // s)  # the first m with o >= 0
    count = max(0, (n_out - 1 + p - r) // s - m0 + 1)
    step = shifts[0] - shifts[1] if len(shifts) > 1 else 1
    return taps, m0, count, (shifts[0] if taps else 0), step


def _conv_transpose2d_gather(xp, x, w, s, p, d, groups, out_hw):
    """The gather form: each of the ``sH*sW`` output phases is a stride-1 correlation of ``x`` with
    the kernel taps that reach it; one window copy and one GEMM per phase, written into its
    strided slice of the channels-last output (phases partition the output: no adds, no zeros
    except where a phase has no taps). With stride 1 this is the convolution with the flipped
    kernel.
    """
    N, Cin, H, W = x.shape
    _, Cog, kH, kW = w.shape
    Cig = Cin // groups
    Ho, Wo = out_hw
    phases_h = [_phase(H, Ho, kH, s[0], p[0], d[0], r) for r in range(s[0])]
    phases_w = [_phase(W, Wo, kW, s[1], p[1], d[1], r) for r in range(s[1])]
    # One padded copy of x serves every phase: input index m - shift must exist for each of them.
    pads = []
    for phases, n_in in ((phases_h, H), (phases_w, W)):
        lo = max([shift - m0 for taps, m0, count, shift, _ in phases if taps and count] + [0])
        hi = max([m0 + count - 1 - (shift - step * (len(taps) - 1)) - (n_in - 1)
                  for taps, m0, count, shift, step in phases if taps and count] + [0])
        pads.append((lo, hi))
    xpad = _PaddedWindows(xp, x, pads)
    # (kH, kW, G, Cig, Cog): one cheap copy (runs of kH*kW); a phase's weight rows, in the
    # columns' (tap, tap, channel) order, are then a gather of whole (G, Cig, Cog) blocks.
    wk = xp.ascontiguousarray(w.reshape(groups, Cig, Cog, kH, kW).transpose(3, 4, 0, 1, 2))
    y = xp.empty((N, Ho, Wo, groups, Cog), dtype=x.dtype)
    for rh, (taps_h, m0h, nh, shift_h, step_h) in enumerate(phases_h):
        for rw, (taps_w, m0w, nw, shift_w, step_w) in enumerate(phases_w):
            if not (nh and nw):
                continue
            out = y[:, s[0] * m0h + rh - p[0]::s[0], s[1] * m0w + rw - p[1]::s[1]][:, :nh, :nw]
            if not (taps_h and taps_w):
                out[...] = 0
                continue
            origin = (m0h - shift_h + pads[0][0], m0w - shift_w + pads[1][0])
            col = xpad.columns(origin, (nh, nw), (len(taps_h), len(taps_w)), (step_h, step_w), (1, 1), groups)
            wp = wk[_taps_slice(taps_h), _taps_slice(taps_w)].transpose(2, 0, 1, 3, 4)  # (G, tH, tW, Cig, Cog)
            wp = wp.reshape(groups, len(taps_h) * len(taps_w) * Cig, Cog)
            res = _gemm(xp, col, wp).reshape(groups, N, nh, nw, Cog)

            def place(a, b, out=out, res=res):
                out[a:b] = res[:, a:b].transpose(1, 2, 3, 0, 4)

            kernels.over_batch(xp, place, N, res.nbytes)
    return _nchw(y.reshape(N, Ho, Wo, groups * Cog))


def _taps_slice(taps):
    """The decreasing, evenly spaced tap list of :func:`_phase` as a slice: a basic index, which
    a CUDA-graph capture allows (an index list would be copied from the host)."""
    step = taps[0] - taps[1] if len(taps) > 1 else 1
    stop = taps[-1] - step
    return slice(taps[0], None if stop < 0 else stop, -step)


def _conv2d_grad_weight(xp, x, gy, ksize, s, p, d, groups):
    """d<gy, conv2d(x, W)>/dW: (O, C/G, kH, kW)."""
    N, C, H, W = x.shape
    _, O, Ho, Wo = gy.shape
    kH, kW = ksize
    Og, Cg = O // groups, C // groups
    gw = kernels.conv2d_grad_weight(xp, x, gy, ksize, s, p, d, groups)
    if gw is not None:
        return gw
    if _depthwise(groups, C, O):
        return _depthwise_grad_weight(xp, x, gy, ksize, s, p, d)
    q = _adjoint_padding(ksize, p, d)
    if (s == (1, 1) and groups == 1 and 2 * O < C and min(q) >= 0
            and (H, W) == (_conv_out_size(Ho, kH, 1, q[0], d[0]), _conv_out_size(Wo, kW, 1, q[1], d[1]))):
        # Few output channels: the windows of gy (O channels) instead of those of x (C): with
        # stride 1 the weight gradient is the same correlation with the roles of x and gy
        # exchanged and the kernel flipped.
        return xp.ascontiguousarray(_flipped_adjoint(_conv2d_grad_weight(xp, gy, x, ksize, s, q, d, 1)))
    col = _im2col(xp, x, ksize, (Ho, Wo), s, p, d, groups)  # (G, M, K)
    # gy's pixel rows, transposed as a view: BLAS reads the (M, Og) matrix as (Og, M).
    gw = _gemm(xp, _group_rows(xp, gy, groups).transpose(0, 2, 1), col)  # (G, Og, kH*kW*Cg)
    gw = gw.reshape(groups, Og, kH, kW, Cg).transpose(0, 1, 4, 2, 3)
    return xp.ascontiguousarray(gw).reshape(O, Cg, kH, kW)


def _crop(v, hw):
    """``v[..., :h, :w]`` when ``v`` is larger (adjoint sizes differ only by unused rows)."""
    if v.shape[2:] == tuple(hw):
        return v
    return getitem(v, (slice(None), slice(None), slice(0, hw[0]), slice(0, hw[1])))


# -- function nodes -----------------------------------------------------------------------------
class _ConvBase(FunctionNode):
    """Shared by the three nodes: the convolution's geometry, and one backward loop."""

    def __init__(self, stride, padding, dilation, groups):
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups

    @property
    def geometry(self):
        return (self.stride, self.padding, self.dilation, self.groups)

    def backward(self, indexes, grad_outputs):
        a, b = self.get_retained_inputs()
        g, = grad_outputs
        return tuple(self._gradient(i, a, b, g) for i in indexes)


class _BiasedConv(_ConvBase):
    """``y = op(x, W) (+ b)``; inputs ``(x, W)`` or ``(x, W, b)``. Subclasses give ``_linear``."""

    def forward(self, inputs):
        x, w = inputs[0], inputs[1]
        self.retain_inputs((0, 1))
        xp = get_array_module(x)
        y = self._linear(xp, x, w)
        if len(inputs) == 3:
            b = inputs[2].reshape(1, -1, 1, 1)

            def add_bias(start, stop):
                y[start:stop] += b

            kernels.over_batch(xp, add_bias, y.shape[0], 2 * y.nbytes)
        return (y,)


class Conv2d(_BiasedConv):
    """``y = conv2d(x, W) (+ b)``."""

    def _linear(self, xp, x, w):
        return _conv2d_forward(xp, x, w, *self.geometry)

    def _gradient(self, i, x, w, gy):
        if i == 0:
            return ConvTranspose2d(*self.geometry, out_hw=x.shape[2:]).apply((gy, w))[0]
        if i == 1:
            return Conv2dGradWeight(*self.geometry, ksize=w.shape[2:]).apply((x, gy))[0]
        return _sum(gy, axis=(0, 2, 3))


class ConvTranspose2d(_BiasedConv):
    """``y = conv_transpose2d(x, W) (+ b)`` with output spatial size ``out_hw``."""

    def __init__(self, stride, padding, dilation, groups, out_hw):
        super().__init__(stride, padding, dilation, groups)
        self.out_hw = tuple(out_hw)

    def _linear(self, xp, x, w):
        return _conv_transpose2d_forward(xp, x, w, *self.geometry, self.out_hw)

    def _gradient(self, i, x, w, gy):
        if i == 0:
            # The adjoint of the transposed convolution is the convolution itself.
            return _crop(Conv2d(*self.geometry).apply((gy, w))[0], x.shape[2:])
        if i == 1:
            # Same pairing as conv2d's weight gradient with gy in the role of the input.
            return Conv2dGradWeight(*self.geometry, ksize=w.shape[2:]).apply((gy, x))[0]
        return _sum(gy, axis=(0, 2, 3))


class Conv2dGradWeight(_ConvBase):
    """``gW = d<gy, conv2d(x, W)>/dW`` for inputs ``(x, gy)``; bilinear in ``x`` and ``gy``.

    The convolution's output size is taken from ``gy``; ``x`` may have trailing rows no window
    reaches (they get a zero gradient).
    """

    def __init__(self, stride, padding, dilation, groups, ksize):
        super().__init__(stride, padding, dilation, groups)
        self.ksize = tuple(ksize)

    def forward(self, inputs):
        x, gy = inputs
        self.retain_inputs((0, 1))
        return (_conv2d_grad_weight(get_array_module(x), x, gy, self.ksize, *self.geometry),)

    def _gradient(self, i, x, gy, ggw):
        if i == 0:
            return ConvTranspose2d(*self.geometry, out_hw=x.shape[2:]).apply((gy, ggw))[0]
        return _crop(Conv2d(*self.geometry).apply((x, ggw))[0], gy.shape[2:])


# -- public API ---------------------------------------------------------------------------------
def _geometry(fn, stride, padding, dilation, groups):
    """The checked ``(stride, padding, dilation)`` pairs and ``groups`` every convolution takes."""
    return (pair(fn, "stride", stride, 1), pair(fn, "padding", padding, 0), pair(fn, "dilation", dilation, 1),
            check_int(fn, "groups", groups, 1))


def _check_bias(fn, bias, channels):
    if bias is not None and tuple(bias.shape) != (channels,):
        raise ValueError(f"{fn}: bias must have shape ({channels},) (one per output channel), "
                         f"got {tuple(bias.shape)}")


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-D cross-correlation, as ``torch.nn.functional.conv2d``.

    Args:
        x: (N, C, H, W).
        weight: (O, C/groups, kH, kW).
        bias: (O,) or None.
        stride, padding, dilation: int or (h, w) pair; padding is zeros on both sides.
        groups: C and O are split into ``groups`` independent convolutions.

    Returns:
        (N, O, Ho, Wo) with ``Ho = (H + 2*padding - dilation*(kH-1) - 1) // stride + 1`` (same for W).
    """
    fn = "conv2d"
    check_4d(fn, "x", x)
    check_4d(fn, "weight", weight, "(out_channels, in_channels/groups, kH, kW)")
    s, p, d, groups = _geometry(fn, stride, padding, dilation, groups)
    N, C, H, W = x.shape
    O, Cg, kH, kW = weight.shape
    if C % groups or O % groups or Cg * groups != C:
        raise ValueError(
            f"{fn}: x of shape {tuple(x.shape)} has {C} channels but weight of shape {tuple(weight.shape)} "
            f"with groups={groups} expects {Cg * groups} (weight.shape[1] * groups), and out_channels {O} "
            "must be divisible by groups")
    _check_bias(fn, bias, O)
    Ho, Wo = _conv_out_size(H, kH, s[0], p[0], d[0]), _conv_out_size(W, kW, s[1], p[1], d[1])
    if Ho < 1 or Wo < 1:
        raise ValueError(
            f"{fn}: padded input of size ({H + 2 * p[0]}, {W + 2 * p[1]}) (x shape {tuple(x.shape)}) is "
            f"smaller than the dilated kernel ({d[0] * (kH - 1) + 1}, {d[1] * (kW - 1) + 1}) "
            f"(weight shape {tuple(weight.shape)})")
    inputs = (x, weight) if bias is None else (x, weight, bias)
    return Conv2d(s, p, d, groups).apply(inputs)[0]


def conv_transpose2d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """2-D transposed convolution (the input-gradient of ``conv2d``), as torch's ``conv_transpose2d``.

    Args:
        x: (N, C_in, H, W).
        weight: (C_in, C_out/groups, kH, kW).
        bias: (C_out,) or None.
        stride, padding, output_padding, dilation: int or (h, w) pair; ``output_padding`` adds rows
            at the bottom/right and must be smaller than stride or dilation.
        groups: channel groups.

    Returns:
        (N, C_out, Ho, Wo) with ``Ho = (H-1)*stride - 2*padding + dilation*(kH-1) + output_padding + 1``.
    """
    fn = "conv_transpose2d"
    check_4d(fn, "x", x)
    check_4d(fn, "weight", weight, "(in_channels, out_channels/groups, kH, kW)")
    s, p, d, groups = _geometry(fn, stride, padding, dilation, groups)
    op = pair(fn, "output_padding", output_padding, 0)
    N, C, H, W = x.shape
    Cin, Cog, kH, kW = weight.shape
    if Cin != C or C % groups:
        raise ValueError(
            f"{fn}: x of shape {tuple(x.shape)} has {C} channels but weight of shape {tuple(weight.shape)} "
            f"expects {Cin} (weight.shape[0]), which must be divisible by groups={groups}")
    for k in range(2):
        if op[k] >= max(s[k], d[k]):
            raise ValueError(f"{fn}: output_padding {output_padding!r} must be smaller than stride "
                             f"{stride!r} or dilation {dilation!r}")
    _check_bias(fn, bias, Cog * groups)
    Ho = _convt_out_size(H, kH, s[0], p[0], d[0], op[0])
    Wo = _convt_out_size(W, kW, s[1], p[1], d[1], op[1])
    if Ho < 1 or Wo < 1:
        raise ValueError(f"{fn}: output size ({Ho}, {Wo}) is not positive for x of shape {tuple(x.shape)}, "
                         f"weight of shape {tuple(weight.shape)} and padding {padding!r}")
    inputs = (x, weight) if bias is None else (x, weight, bias)
    return ConvTranspose2d(s, p, d, groups, (Ho, Wo)).apply(inputs)[0]


def conv2d_grad_weight(x, grad_output, kernel_size, stride=1, padding=0, dilation=1, groups=1):
    """The gradient of ``sum(grad_output * conv2d(x, W))`` with respect to ``W``; differentiable.

    Args:
        x: (N, C, H, W), the convolution's input.
        grad_output: (N, O, Ho, Wo), the gradient of its output (Ho, Wo as conv2d gives them, or
            smaller: trailing rows of ``x`` that no window reaches get no gradient).
        kernel_size: int or (kH, kW).

    Returns:
        (O, C/groups, kH, kW).
    """
    fn = "conv2d_grad_weight"
    check_4d(fn, "x", x)
    check_4d(fn, "grad_output", grad_output, "(N, out_channels, Ho, Wo)")
    k = pair(fn, "kernel_size", kernel_size, 1)
    s, p, d, groups = _geometry(fn, stride, padding, dilation, groups)
    N, C, H, W = x.shape
    Ng, O, Ho, Wo = grad_output.shape
    if Ng != N or C % groups or O % groups:
        raise ValueError(f"{fn}: x of shape {tuple(x.shape)} and grad_output of shape "
                         f"{tuple(grad_output.shape)} need the same batch size and channels divisible "
                         f"by groups={groups}")
    Hc = _conv_out_size(H, k[0], s[0], p[0], d[0])
    Wc = _conv_out_size(W, k[1], s[1], p[1], d[1])
    if Ho > Hc or Wo > Wc or Ho < 1 or Wo < 1:
        raise ValueError(f"{fn}: grad_output of shape {tuple(grad_output.shape)} does not fit the conv2d "
                         f"output size ({Hc}, {Wc}) of x of shape {tuple(x.shape)}")
    return Conv2dGradWeight(s, p, d, groups, k).apply((x, grad_output))[0]
