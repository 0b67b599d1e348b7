"""2-D convolution and transposed convolution (torch semantics), differentiable to any order.

Three linear operations close the family under differentiation:

* ``Conv2d(x, W) -> y``: im2col of the padded input (a strided view, copied once) times the
  weight, one GEMM.
* ``ConvTranspose2d(x, W) -> y``: the adjoint of ``Conv2d`` in its input: one GEMM of the
  transposed weight with ``x``, then col2im, which adds the columns back into the padded output
  with one strided add per kernel offset (no atomics, so it is deterministic on CuPy too).
* ``Conv2dGradWeight(x, gy) -> gW``: the weight gradient of ``Conv2d``: the im2col of ``x``
  contracted with ``gy`` over batch and pixels, one GEMM.

Their backwards are each other: ``Conv2d``'s input gradient is ``ConvTranspose2d`` with the same
weight and its weight gradient is ``Conv2dGradWeight``; ``ConvTranspose2d``'s input gradient is
``Conv2d`` and its weight gradient ``Conv2dGradWeight(gy, x)``; ``Conv2dGradWeight``'s gradients
are ``ConvTranspose2d(gy, ggW)`` for ``x`` and ``Conv2d(x, ggW)`` for ``gy``. Each backward
computes only the gradients asked for (an R1 penalty's image gradient computes no weight gradient).

Internally the kernels work channels-last: the column matrix is ``(G, N*Ho*Wo, kH*kW*Cg)``
(groups ``G``), copied from a channels-last padded input so the copy moves contiguous runs of
channels, and col2im adds runs of channels too. The GEMM is a single (batched over groups)
matrix product; NCHW layout is restored with one transposing copy of each result.
"""
from gpgan.autograd import FunctionNode
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


# -- raw array kernels (NumPy or CuPy by the same code) -----------------------------------------
def _as_strided(xp, x, shape, strides):
    if xp.__name__ == "numpy":
        return xp.lib.stride_tricks.as_strided(x, shape, strides, writeable=False)
    return xp.lib.stride_tricks.as_strided(x, shape, strides)


def _pad_channels_last(xp, x, p):
    """``x`` (N, C, H, W) as a zero-padded channels-last copy (N, H + 2pH, W + 2pW, C)."""
    N, C, H, W = x.shape
    pH, pW = p
    alloc = xp.zeros if (pH or pW) else xp.empty  # only the border needs zeros
    out = alloc((N, H + 2 * pH, W + 2 * pW, C), dtype=x.dtype)
    out[:, pH:pH + H, pW:pW + W, :] = x.transpose(0, 2, 3, 1)
    return out


def _im2col(xp, x, ksize, out_hw, s, p, d, groups):
    """Columns ``(G, N*Ho*Wo, kH*kW*Cg)`` of ``x`` (N, C, H, W): one copy of a strided view.

    The view reads a channels-last copy of the padded input, so each row of the copy is a run of
    contiguous channels (``kW*Cg`` of them when ``dilation == 1``), which copies several times
    faster than gathering strided pixels from NCHW.
    """
    N, C, H, W = x.shape
    kH, kW = ksize
    Ho, Wo = out_hw
    xpad = _pad_channels_last(xp, x, p)
    # as_strided does no bounds check: make sure the last window ends inside the padded input.
    if (Ho - 1) * s[0] + d[0] * (kH - 1) >= xpad.shape[1] or (Wo - 1) * s[1] + d[1] * (kW - 1) >= xpad.shape[2]:
        raise AssertionError("im2col window exceeds the padded input")
    sN, sH, sW, sC = xpad.strides
    Cg = C // groups
    view = _as_strided(
        xp, xpad,
        (groups, N, Ho, Wo, kH, kW, Cg),
        (Cg * sC, sN, s[0] * sH, s[1] * sW, d[0] * sH, d[1] * sW, sC),
    )
    return xp.ascontiguousarray(view).reshape(groups, N * Ho * Wo, kH * kW * Cg)


def _gemm(xp, a, b):
    """``a @ b`` for stacks of matrices; one plain 2-D product when there is one group (BLAS)."""
    if a.shape[0] == 1:
        return xp.matmul(a[0], b[0])[None]
    return xp.matmul(a, b)


def _conv2d_forward(xp, x, w, s, p, d, groups):
    N = x.shape[0]
    O, Cg, kH, kW = w.shape
    Og = O // groups
    Ho = _conv_out_size(x.shape[2], kH, s[0], p[0], d[0])
    Wo = _conv_out_size(x.shape[3], kW, s[1], p[1], d[1])
    col = _im2col(xp, x, (kH, kW), (Ho, Wo), s, p, d, groups)  # (G, M, K)
    # The weight's rows in the columns' (kH, kW, Cg) order: a small copy.
    w2 = w.reshape(groups, Og, Cg, kH, kW).transpose(0, 3, 4, 2, 1).reshape(groups, kH * kW * Cg, Og)
    y = _gemm(xp, col, w2)  # (G, M, Og)
    y = y.reshape(groups, N, Ho, Wo, Og).transpose(1, 0, 4, 2, 3)
    return xp.ascontiguousarray(y).reshape(N, O, Ho, Wo)


def _conv_transpose2d_forward(xp, x, w, s, p, d, groups, out_hw):
    """``x`` (N, Cin, H, W), ``w`` (Cin, Cog, kH, kW) -> (N, Cog*G, *out_hw)."""
    N, Cin, H, W = x.shape
    _, Cog, kH, kW = w.shape
    Cig = Cin // groups
    Ho, Wo = out_hw
    # Rows past the last window (output_padding) receive nothing; no window passes the end.
    Hp = max(Ho + 2 * p[0], (H - 1) * s[0] + d[0] * (kH - 1) + 1)
    Wp = max(Wo + 2 * p[1], (W - 1) * s[1] + d[1] * (kW - 1) + 1)
    x2 = xp.ascontiguousarray(x.reshape(N, groups, Cig, H, W).transpose(1, 0, 3, 4, 2))
    w2 = xp.ascontiguousarray(w.reshape(groups, Cig, Cog, kH, kW).transpose(0, 1, 3, 4, 2))
    cols = _gemm(xp, x2.reshape(groups, N * H * W, Cig), w2.reshape(groups, Cig, kH * kW * Cog))
    cols = cols.reshape(groups, N, H, W, kH, kW, Cog)
    # col2im, channels last so every strided add moves runs of Cog contiguous values.
    ypad = xp.zeros((N, Hp, Wp, groups, Cog), dtype=cols.dtype)
    hs, ws = (H - 1) * s[0] + 1, (W - 1) * s[1] + 1
    for i in range(kH):
        for j in range(kW):
            h0, w0 = i * d[0], j * d[1]
            ypad[:, h0:h0 + hs:s[0], w0:w0 + ws:s[1]] += cols[:, :, :, :, i, j].transpose(1, 2, 3, 0, 4)
    y = ypad[:, p[0]:p[0] + Ho, p[1]:p[1] + Wo].transpose(0, 3, 4, 1, 2)  # crop + NCHW: one copy
    return xp.ascontiguousarray(y).reshape(N, groups * Cog, Ho, Wo)


def _conv2d_grad_weight(xp, x, gy, ksize, s, p, d, groups):
    """d<gy, conv2d(x, W)>/dW: (O, C/G, kH, kW)."""
    N, C, _, _ = x.shape
    _, O, Ho, Wo = gy.shape
    kH, kW = ksize
    Og, Cg = O // groups, C // groups
    col = _im2col(xp, x, ksize, (Ho, Wo), s, p, d, groups)  # (G, M, K)
    gy2 = xp.ascontiguousarray(gy.reshape(N, groups, Og, Ho * Wo).transpose(1, 2, 0, 3))
    gw = _gemm(xp, gy2.reshape(groups, Og, N * Ho * Wo), col)  # (G, Og, kH*kW*Cg)
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
        y = self._linear(get_array_module(x), x, w)
        if len(inputs) == 3:
            y += inputs[2].reshape(1, -1, 1, 1)
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
