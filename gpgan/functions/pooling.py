"""Pooling and upsampling: avg_pool2d and upsample_nearest2d, differentiable to any order.

Both are linear, and each comes with its adjoint as a function node of its own, so the pair
differentiates into itself: average pooling's gradient spreads each output gradient, scaled by
``1/(kH*kW)``, over its window (``AvgPool2dGrad``), whose gradient is average pooling again;
nearest upsampling's gradient sums each ``s x s`` block (``SumPool2d``), whose gradient is
upsampling again. Loops run over kernel offsets only.
"""
from gpgan.autograd import FunctionNode
from gpgan.backend import get_array_module
from gpgan.functions._args import check_4d, pair


__all__ = ['avg_pool2d', 'upsample_nearest2d']


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


def avg_pool2d(x, kernel_size, stride=None, padding=0):
    """Average pooling, as ``torch.nn.functional.avg_pool2d`` (count_include_pad=True, floor mode).

    Args:
        x: (N, C, H, W).
        kernel_size, stride, padding: int or (h, w) pair; ``stride`` defaults to ``kernel_size``;
            ``padding`` (zeros, counted in the mean) at most half the kernel.

    Returns:
        (N, C, Ho, Wo) with ``Ho = (H + 2*padding - kH) // stride + 1``.
    """
    fn = "avg_pool2d"
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
    return AvgPool2d(k, s, p).apply((x,))[0]


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
