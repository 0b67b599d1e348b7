"""The accelerated kernels of a 2-D convolution: whole convolutions on oneDNN, and the Numba
passes of gpgan's own im2col / col2im kernels (:mod:`gpgan.functions.conv`).

Each function returns None, computing nothing, where no accelerator takes the arrays (CuPy arrays,
another dtype, the library off or not installed; for the Numba passes, grouped convolutions); the
caller then runs its portable NumPy / CuPy form. oneDNN agrees with that form to float32
rounding, the Numba passes bit for bit. Shapes and conventions are those of :mod:`gpgan.functions.conv`: activations
(N, C, H, W) in any memory layout, results channels-last in memory.
"""
from gpgan.backend.mechanisms import off
from gpgan.kernels.cpu.passes import over_batch
from gpgan.kernels.cpu.select import cpu_kernels, onednn_convolutions
from gpgan.kernels.record import note, recording

__all__ = ["conv2d", "conv_transpose2d", "conv2d_grad_weight", "window_columns", "col2im_planes",
           "col2im_channels_last"]


def conv2d(xp, x, w, stride, padding, dilation, groups, out_hw):
    """``conv2d(x, w)`` (N, O, *out_hw) on oneDNN, or None."""
    dnn = onednn_convolutions(xp, x, w)
    y = dnn and dnn.conv_forward(x, w, stride, padding, dilation, out_hw, groups)
    if recording:
        note("conv2d", "portable" if y is None else "onednn")
    return y


def conv_transpose2d(xp, x, w, stride, padding, dilation, groups, out_hw):
    """``conv_transpose2d(x, w)`` (N, Cog*G, *out_hw) on oneDNN (a convolution's backward data),
    or None."""
    dnn = onednn_convolutions(xp, x, w)
    y = dnn and dnn.conv_backward_data(x, w, stride, padding, dilation, out_hw, groups)
    if recording:
        note("conv_transpose2d", "portable" if y is None else "onednn")
    return y


def conv2d_grad_weight(xp, x, gy, ksize, stride, padding, dilation, groups):
    """The weight gradient (O, C/G, kH, kW) of ``conv2d(x, W)`` for output gradient ``gy`` on
    oneDNN, or None."""
    dnn = onednn_convolutions(xp, x, gy)
    gw = dnn and dnn.conv_backward_weights(x, gy, ksize, stride, padding, dilation, groups)
    if recording:
        note("conv2d_grad_weight", "portable" if gw is None else "onednn")
    return gw


def _nhwc(x):
    return x.transpose(0, 2, 3, 1)


def window_columns(xp, x, pads, origin, out_hw, taps, tap_step, s, groups):
    """The im2col columns ``(1, N*Ho*Wo, tH*tW*C)`` of ``x`` (N, C, H, W) zero-padded by ``pads``
    ``((top, bottom), (left, right))`` in one Numba pass that reads ``x`` itself and writes the
    padding's zeros as it goes; or None (one group of float NumPy arrays only).

    Output pixel (h, w)'s tap (a, b) reads the padded input at ``origin + (h*s + a*tap_step)`` per
    axis, as :func:`gpgan.functions.conv._windows` does.
    """
    kernels = cpu_kernels(xp, x.dtype) if groups == 1 else None
    if kernels is None or off.numba_conv_copies:
        return None
    N, C = x.shape[:2]
    col = xp.empty((N,) + tuple(out_hw) + tuple(taps) + (C,), dtype=x.dtype)
    xh = _nhwc(x)
    off_h, off_w = origin[0] - pads[0][0], origin[1] - pads[1][0]

    def copy(a, b):
        kernels.window_columns(xh, col, a, b, off_h, off_w, s[0], s[1], tap_step[0], tap_step[1])

    over_batch(xp, copy, N, col.nbytes)
    return col.reshape(1, N * out_hw[0] * out_hw[1], -1)


def col2im_planes(xp, cols, out_hw, s, p, d):
    """The transposed convolution's col2im of channels-first ``cols`` (kH, kW, Cog, N, H, W):
    the (N, Cog, Ho, Wo) output (its memory (Cog, N, Ho, Wo)) in one Numba pass, or None."""
    kernels = cpu_kernels(xp, cols.dtype)
    if kernels is None or off.numba_conv_copies:
        return None
    Cog, N = cols.shape[2], cols.shape[3]
    y = xp.empty((Cog, N) + tuple(out_hw), dtype=cols.dtype)
    over_batch(xp, lambda a, b: kernels.col2im_planes(cols, y, a, b, *s, *p, *d), N, cols.nbytes)
    return y.transpose(1, 0, 2, 3)


def col2im_channels_last(xp, cols, out_hw, s, p, d):
    """The transposed convolution's col2im of channels-last ``cols`` (G, N, H, W, kH, kW, Cog):
    the (N, Cog, Ho, Wo) output (channels-last) in one Numba pass, or None (one group only)."""
    kernels = cpu_kernels(xp, cols.dtype) if cols.shape[0] == 1 else None
    if kernels is None or off.numba_conv_copies:
        return None
    N, Cog = cols.shape[1], cols.shape[6]
    y = xp.empty((N,) + tuple(out_hw) + (Cog,), dtype=cols.dtype)
    over_batch(xp, lambda a, b: kernels.col2im_channels_last(cols[0], y, a, b, *s, *p, *d), N, cols.nbytes)
    return y.transpose(0, 3, 1, 2)
