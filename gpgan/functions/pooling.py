"""Pooling and upsampling: avg_pool2d, max_pool2d and upsample_nearest2d, differentiable to any order.

Both are linear, and each comes with its adjoint as a function node of its own, so the pair
differentiates into itself: average pooling's gradient spreads each output gradient, scaled by
``1/(kH*kW)``, over its window (``AvgPool2dGrad``), whose gradient is average pooling again;
nearest upsampling's gradient sums each ``s x s`` block (``SumPool2d``), whose gradient is
upsampling again. Loops run over kernel offsets only.

Max pooling is piecewise linear: its gradient routes each output gradient to the input that won
its window (``MaxPool2dScatter``), and the gradient of that routing with respect to the output
gradient is the matching gather (``MaxPool2dGather``), and vice versa. Both keep the pooled input
as a structural operand whose gradient is ``STRUCTURAL_ZERO`` (the winners are locally constant
in it), as ReLU's mask does: differentiating a max-pool gradient with respect to the pooled input
gives zeros, as in PyTorch, not an "unused input" error.
"""
import numpy

from gpgan.autograd import STRUCTURAL_ZERO, FunctionNode, Variable, is_grad_enabled
from gpgan.backend import constant_array, get_array_module
from gpgan.functions._args import check_4d, constant, pair


__all__ = ['avg_pool2d', 'max_pool2d', 'upsample_nearest2d']


class AvgPool2d(FunctionNode):
    """Mean over each ``k`` window, zero padding counted in the divisor (count_include_pad)."""

    def __init__(self, k, s, p):
        self.k, self.s, self.p = k, s, p

    def forward(self, inputs):
        x, = inputs
        xp = get_array_module(x)
        (kH, kW), (sH, sW), (pH, pW) = self.k, self.s, self.p
        N, C, H, W = x.shape
        self.in_hw = (H, W)
        Ho, Wo = (H + 2 * pH - kH) // sH + 1, (W + 2 * pW - kW) // sW + 1
        if pH or pW:
            xpad = xp.zeros((N, C, H + 2 * pH, W + 2 * pW), dtype=x.dtype)
            xpad[:, :, pH:pH + H, pW:pW + W] = x
        else:
            xpad = x
        hs, ws = (Ho - 1) * sH + 1, (Wo - 1) * sW + 1
        y = xp.zeros((N, C, Ho, Wo), dtype=x.dtype)
        for i in range(kH):
            for j in range(kW):
                y += xpad[:, :, i:i + hs:sH, j:j + ws:sW]
        y *= x.dtype.type(1.0 / (kH * kW))
        return (y,)

    def backward(self, indexes, grad_outputs):
        return (AvgPool2dGrad(self.k, self.s, self.p, self.in_hw).apply(grad_outputs)[0],)


class AvgPool2dGrad(FunctionNode):
    """The adjoint of :class:`AvgPool2d`: each value, divided by the window size, spread over its window."""

    def __init__(self, k, s, p, in_hw):
        self.k, self.s, self.p, self.in_hw = k, s, p, in_hw

    def forward(self, inputs):
        gy, = inputs
        xp = get_array_module(gy)
        (kH, kW), (sH, sW), (pH, pW) = self.k, self.s, self.p
        N, C, Ho, Wo = gy.shape
        H, W = self.in_hw
        g = gy * gy.dtype.type(1.0 / (kH * kW))
        gxpad = xp.zeros((N, C, H + 2 * pH, W + 2 * pW), dtype=gy.dtype)
        hs, ws = (Ho - 1) * sH + 1, (Wo - 1) * sW + 1
        for i in range(kH):
            for j in range(kW):
                gxpad[:, :, i:i + hs:sH, j:j + ws:sW] += g
        if pH or pW:
            gxpad = xp.ascontiguousarray(gxpad[:, :, pH:pH + H, pW:pW + W])
        return (gxpad,)

    def backward(self, indexes, grad_outputs):
        return (AvgPool2d(self.k, self.s, self.p).apply(grad_outputs)[0],)


def _pool_arguments(fn, x, kernel_size, stride, padding):
    """Checked ``(k, s, p)`` pairs of a pooling of ``x`` (N, C, H, W); ``stride`` None is ``k``."""
    check_4d(fn, "x", x)
    k = pair(fn, "kernel_size", kernel_size, 1)
    s = k if stride is None else pair(fn, "stride", stride, 1)
    p = pair(fn, "padding", padding, 0)
    if p[0] > k[0] // 2 or p[1] > k[1] // 2:
        raise ValueError(f"{fn}: padding {padding!r} must be at most half of kernel_size {kernel_size!r}")
    H, W = x.shape[2:]
    if H + 2 * p[0] < k[0] or W + 2 * p[1] < k[1]:
        raise ValueError(f"{fn}: kernel_size {kernel_size!r} is larger than the padded input "
                         f"({H + 2 * p[0]}, {W + 2 * p[1]}) of x with shape {tuple(x.shape)}")
    return k, s, p


def avg_pool2d(x, kernel_size, stride=None, padding=0, count_include_pad=True):
    """Average pooling, as ``torch.nn.functional.avg_pool2d`` (floor mode).

    Args:
        x: (N, C, H, W).
        kernel_size, stride, padding: int or (h, w) pair; ``stride`` defaults to ``kernel_size``;
            ``padding`` (zeros) at most half the kernel.
        count_include_pad: divide by the kernel size (True), or by the number of input values
            in each window, leaving the padded zeros out of the mean (False; TensorFlow's
            average pooling, used by the FID Inception network).

    Returns:
        (N, C, Ho, Wo) with ``Ho = (H + 2*padding - kH) // stride + 1``.
    """
    k, s, p = _pool_arguments("avg_pool2d", x, kernel_size, stride, padding)
    H, W = x.shape[2:]
    y = AvgPool2d(k, s, p).apply((x,))[0]
    return y if count_include_pad else _exclude_padding(y, k, s, p, (H, W))


class UpsampleNearest2d(FunctionNode):
    """Each pixel repeated into an ``sH x sW`` block."""

    def __init__(self, scale):
        self.scale = scale

    def forward(self, inputs):
        x, = inputs
        xp = get_array_module(x)
        N, C, H, W = x.shape
        sH, sW = self.scale
        y = xp.broadcast_to(x.reshape(N, C, H, 1, W, 1), (N, C, H, sH, W, sW))
        return (y.reshape(N, C, H * sH, W * sW),)  # reshape of a broadcast view copies: contiguous

    def backward(self, indexes, grad_outputs):
        return (SumPool2d(self.scale).apply(grad_outputs)[0],)


class SumPool2d(FunctionNode):
    """Sum over non-overlapping ``sH x sW`` blocks: the adjoint of :class:`UpsampleNearest2d`."""

    def __init__(self, scale):
        self.scale = scale

    def forward(self, inputs):
        gy, = inputs
        N, C, Hs, Ws = gy.shape
        sH, sW = self.scale
        return (gy.reshape(N, C, Hs // sH, sH, Ws // sW, sW).sum(axis=(3, 5)),)

    def backward(self, indexes, grad_outputs):
        return (UpsampleNearest2d(self.scale).apply(grad_outputs)[0],)


def upsample_nearest2d(x, scale_factor=2):
    """Nearest-neighbour upsampling by an integer factor (torch's ``interpolate(mode='nearest')``).

    Args:
        x: (N, C, H, W).
        scale_factor: int or (sH, sW) pair of ints >= 1.

    Returns:
        (N, C, H*sH, W*sW), each input pixel repeated into an ``sH x sW`` block.
    """
    fn = "upsample_nearest2d"
    check_4d(fn, "x", x)
    s = pair(fn, "scale_factor", scale_factor, 1)
    if s == (1, 1):
        return x
    return UpsampleNearest2d(s).apply((x,))[0]



# -- average pooling that leaves padded zeros out of the mean ------------------------------------
def _window_counts(size, k, s, p, out):
    """How many of each of the ``out`` windows' ``k`` positions along one axis lie inside the input."""
    start = numpy.arange(out) * s - p
    return numpy.minimum(start + k, size) - numpy.maximum(start, 0)


def _exclude_padding(y, k, s, p, in_hw):
    """Turn the padding-counting mean ``y`` (N, C, Ho, Wo) into the mean over real inputs only:
    the window sums divided by the count map, i.e. ``y`` times the constant ``kH*kW / count``."""
    if p == (0, 0):
        return y
    Ho, Wo = y.shape[2:]
    counts = numpy.outer(_window_counts(in_hw[0], k[0], s[0], p[0], Ho),
                         _window_counts(in_hw[1], k[1], s[1], p[1], Wo))
    factor = constant_array(get_array_module(y.data), (k[0] * k[1]) / counts, y.dtype)
    return y * constant(factor.reshape(1, 1, Ho, Wo))



# -- max pooling -----------------------------------------------------------------------------------
def _windows(xpad, k, s, out_hw):
    """Yield ``(t, view)`` for each kernel offset ``t`` (row-major): the strided view
    (N, C, Ho, Wo) of the padded input that this offset reads in every window."""
    (kH, kW), (sH, sW), (Ho, Wo) = k, s, out_hw
    hs, ws = (Ho - 1) * sH + 1, (Wo - 1) * sW + 1
    for i in range(kH):
        for j in range(kW):
            yield i * kW + j, xpad[:, :, i:i + hs:sH, j:j + ws:sW]


def _padded(xp, x, p, value):
    if p == (0, 0):
        return x
    N, C, H, W = x.shape
    out = xp.full((N, C, H + 2 * p[0], W + 2 * p[1]), value, dtype=x.dtype)
    out[:, :, p[0]:p[0] + H, p[1]:p[1] + W] = x
    return out


def _separable_max(xp, xpad, k, s, out_hw):
    """Window maxima as a maximum along W, then along H: ``kW + kH - 2`` passes, not ``kH*kW - 1``.
    ``maximum`` propagates NaN, as torch does."""
    (kH, kW), (sH, sW), (Ho, Wo) = k, s, out_hw
    hs, ws = (Ho - 1) * sH + 1, (Wo - 1) * sW + 1
    rows = xpad[:, :, :, 0:ws:sW].copy()
    for j in range(1, kW):
        xp.maximum(rows, xpad[:, :, :, j:j + ws:sW], out=rows)
    y = rows[:, :, 0:hs:sH].copy()
    for i in range(1, kH):
        xp.maximum(y, rows[:, :, i:i + hs:sH], out=y)
    return y


class MaxPool2d(FunctionNode):
    """Maximum over each window (``-inf`` padding). When the result will be differentiated, it
    keeps the winning offset of every window (uint8 up to 256 offsets) and the input."""

    def __init__(self, k, s, p, keep_argmax):
        self.k, self.s, self.p, self.keep_argmax = k, s, p, keep_argmax
        self.argmax = None

    def forward(self, inputs):
        x, = inputs
        xp = get_array_module(x)
        (kH, kW), (sH, sW), (pH, pW) = self.k, self.s, self.p
        H, W = x.shape[2:]
        out_hw = ((H + 2 * pH - kH) // sH + 1, (W + 2 * pW - kW) // sW + 1)
        xpad = _padded(xp, x, self.p, -numpy.inf)
        y = _separable_max(xp, xpad, self.k, self.s, out_hw)
        if not self.keep_argmax:
            return (y,)
        self.retain_inputs((0,))
        # The winner of each window is the first offset holding its maximum (torch's tie rule):
        # visiting offsets last to first, each match overwrites the later ones.
        argmax = xp.zeros(y.shape, dtype=xp.uint8 if kH * kW <= 256 else xp.int32)
        windows = list(_windows(xpad, self.k, self.s, out_hw))
        offset = argmax.dtype.type  # a scalar of argmax's own dtype: copyto needs no cast
        for t, view in reversed(windows):
            xp.copyto(argmax, offset(t), where=view == y)
        if xp.isnan(y).any():  # torch sends the gradient of a NaN window to its last NaN
            for t, view in windows:
                xp.copyto(argmax, offset(t), where=xp.isnan(view))
        self.argmax = argmax
        return (y,)

    def backward(self, indexes, grad_outputs):
        if self.argmax is None:
            raise RuntimeError("max_pool2d: the winning positions were not kept (recording was off "
                               "when the forward ran) or were freed by an earlier backward")
        x, = self.get_retained_inputs()
        scatter = MaxPool2dScatter(self.k, self.s, self.p, self.argmax)
        return (scatter.apply((grad_outputs[0], x))[0],)

    def release(self):
        super().release()
        self.argmax = None


class _MaxPoolRouting(FunctionNode):
    """Base of the two linear maps fixed by max pooling's winners, ``(g, x) -> routed g``.

    The pooled input ``x`` is a structural operand: the winners are locally constant in it, so
    its gradient is STRUCTURAL_ZERO (connected, zero, never materialized). The gradient with
    respect to ``g`` is the other map.
    """

    structural_inputs = 1  # x only ever gets STRUCTURAL_ZERO

    def __init__(self, k, s, p, argmax):
        self.k, self.s, self.p, self.argmax = k, s, p, argmax

    def backward(self, indexes, grad_outputs):
        x, = self.get_retained_inputs()
        return tuple(self._adjoint().apply((grad_outputs[0], x))[0] if i == 0 else STRUCTURAL_ZERO
                     for i in indexes)


class MaxPool2dScatter(_MaxPoolRouting):
    """``(gy, x) -> gx``: each window's gradient added at the position of its maximum."""

    def forward(self, inputs):
        gy, x = inputs
        self.retain_inputs((1,))
        xp = get_array_module(gy)
        N, C, H, W = x.shape
        pH, pW = self.p
        gxpad = xp.zeros((N, C, H + 2 * pH, W + 2 * pW), dtype=gy.dtype)
        zero = gy.dtype.type(0)
        for t, view in _windows(gxpad, self.k, self.s, gy.shape[2:]):
            view += xp.where(self.argmax == t, gy, zero)  # overlapping windows add up
        if pH or pW:
            gxpad = xp.ascontiguousarray(gxpad[:, :, pH:pH + H, pW:pW + W])
        return (gxpad,)

    def _adjoint(self):
        return MaxPool2dGather(self.k, self.s, self.p, self.argmax)


class MaxPool2dGather(_MaxPoolRouting):
    """``(g, x) -> (N, C, Ho, Wo)``: ``g`` read at each window's maximum (the adjoint of the scatter)."""

    def forward(self, inputs):
        g, _ = inputs
        self.retain_inputs((1,))
        xp = get_array_module(g)
        out = xp.zeros(self.argmax.shape, dtype=g.dtype)
        for t, view in _windows(_padded(xp, g, self.p, 0), self.k, self.s, out.shape[2:]):
            xp.copyto(out, view, where=self.argmax == t)
        return (out,)

    def _adjoint(self):
        return MaxPool2dScatter(self.k, self.s, self.p, self.argmax)


def max_pool2d(x, kernel_size, stride=None, padding=0):
    """Max pooling, as ``torch.nn.functional.max_pool2d`` (dilation 1, floor mode).

    Args:
        x: (N, C, H, W).
        kernel_size, stride, padding: int or (h, w) pair; ``stride`` defaults to ``kernel_size``;
            ``padding`` (``-inf``, never the maximum) at most half the kernel.

    Returns:
        (N, C, Ho, Wo) with ``Ho = (H + 2*padding - kH) // stride + 1``. The gradient goes to the
        first maximum of each window (a NaN counts as the maximum), as in torch.
    """
    k, s, p = _pool_arguments("max_pool2d", x, kernel_size, stride, padding)
    # Winners are only worth recording when the result will be differentiated.
    keep_argmax = is_grad_enabled() and isinstance(x, Variable) and x.requires_grad
    return MaxPool2d(k, s, p, keep_argmax).apply((x,))[0]
