"""conv2d, conv_transpose2d and conv2d_grad_weight: values against naive loops, gradients to second order."""
import numpy as np
import pytest

import gpgan
import gpgan.functions as F
from gpgan.autograd import gradcheck, gradgradcheck
from helpers import CONV_CASES, CONVT_CASES, FEW_OUTPUTS_CASES, KERNEL_CASES, in_layout, pair


def naive_conv2d(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    """Direct definition: a loop over output pixels and kernel offsets (tiny inputs only)."""
    s, p, d = pair(stride), pair(padding), pair(dilation)
    N, C, H, W = x.shape
    O, Cg, kH, kW = w.shape
    xp = np.zeros((N, C, H + 2 * p[0], W + 2 * p[1]), x.dtype)
    xp[:, :, p[0]:p[0] + H, p[1]:p[1] + W] = x
    Ho = (H + 2 * p[0] - d[0] * (kH - 1) - 1) // s[0] + 1
    Wo = (W + 2 * p[1] - d[1] * (kW - 1) - 1) // s[1] + 1
    Og = O // groups
    y = np.zeros((N, O, Ho, Wo), x.dtype)
    for o in range(O):
        g = o // Og
        for i in range(Ho):
            for j in range(Wo):
                for a in range(kH):
                    for c in range(kW):
                        patch = xp[:, g * Cg:(g + 1) * Cg, i * s[0] + a * d[0], j * s[1] + c * d[1]]
                        y[:, o, i, j] += patch @ w[o, :, a, c]
    if b is not None:
        y += b[None, :, None, None]
    return y


def naive_conv_transpose2d(x, w, b=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """Direct definition: every input pixel scatters its weighted kernel into the output."""
    s, p, op, d = pair(stride), pair(padding), pair(output_padding), pair(dilation)
    N, Cin, H, W = x.shape
    _, Cog, kH, kW = w.shape
    Cig = Cin // groups
    Ho = (H - 1) * s[0] - 2 * p[0] + d[0] * (kH - 1) + op[0] + 1
    Wo = (W - 1) * s[1] - 2 * p[1] + d[1] * (kW - 1) + op[1] + 1
    big = np.zeros((N, Cog * groups, Ho + 2 * p[0] + d[0] * kH, Wo + 2 * p[1] + d[1] * kW), x.dtype)
    for ci in range(Cin):
        g = ci // Cig
        for i in range(H):
            for j in range(W):
                for a in range(kH):
                    for c in range(kW):
                        big[:, g * Cog:(g + 1) * Cog, i * s[0] + a * d[0], j * s[1] + c * d[1]] += (
                            x[:, ci, i, j][:, None] * w[ci, :, a, c][None, :])
    y = big[:, :, p[0]:p[0] + Ho, p[1]:p[1] + Wo]
    if b is not None:
        y = y + b[None, :, None, None]
    return y


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv2d_forward_matches_naive(case, rng):
    N, C, H, W, O, k, s, p, d, g = case
    kH, kW = pair(k)
    x = rng.standard_normal((N, C, H, W))
    w = rng.standard_normal((O, C // g, kH, kW))
    b = rng.standard_normal(O)
    y = F.conv2d(gpgan.Variable(x), gpgan.Variable(w), gpgan.Variable(b), stride=s, padding=p, dilation=d, groups=g)
    ref = naive_conv2d(x, w, b, s, p, d, g)
    assert y.shape == ref.shape
    np.testing.assert_allclose(y.data, ref, rtol=1e-10, atol=1e-10)


def test_conv2d_output_size_formula(rng):
    x = gpgan.Variable(rng.standard_normal((1, 1, 11, 9)).astype(np.float32))
    for k, s, p, d in [(3, 1, 0, 1), (4, 2, 1, 1), (3, 3, 2, 2), (5, 2, 0, 1)]:
        w = gpgan.Variable(np.ones((1, 1, k, k), np.float32))
        y = F.conv2d(x, w, stride=s, padding=p, dilation=d)
        assert y.shape[2:] == ((11 + 2 * p - d * (k - 1) - 1) // s + 1, (9 + 2 * p - d * (k - 1) - 1) // s + 1)
        assert y.dtype == np.float32


@pytest.mark.parametrize("case", CONVT_CASES)
def test_conv_transpose2d_forward_matches_naive(case, rng):
    N, Cin, H, W, Cout, k, s, p, op, g, d = case
    kH, kW = pair(k)
    x = rng.standard_normal((N, Cin, H, W))
    w = rng.standard_normal((Cin, Cout // g, kH, kW))
    b = rng.standard_normal(Cout)
    y = F.conv_transpose2d(gpgan.Variable(x), gpgan.Variable(w), gpgan.Variable(b), stride=s, padding=p,
                           output_padding=op, groups=g, dilation=d)
    ref = naive_conv_transpose2d(x, w, b, s, p, op, g, d)
    assert y.shape == ref.shape
    np.testing.assert_allclose(y.data, ref, rtol=1e-10, atol=1e-10)


def test_conv_transpose2d_is_adjoint_of_conv2d(rng):
    # <conv2d(x, W), y> == <x, conv_transpose2d(y, W)> when the sizes correspond.
    x = rng.standard_normal((2, 4, 7, 6))
    w = rng.standard_normal((6, 2, 3, 3))
    y = F.conv2d(gpgan.Variable(x), gpgan.Variable(w), stride=2, padding=1, groups=2)
    r = rng.standard_normal(y.shape)
    # Width 6 -> 3 -> 5 without output_padding: the last column needs output_padding 1.
    xt = F.conv_transpose2d(gpgan.Variable(r), gpgan.Variable(w), stride=2, padding=1, output_padding=(0, 1),
                            groups=2)
    assert xt.shape == x.shape
    np.testing.assert_allclose(float((y.data * r).sum()), float((x * xt.data).sum()), rtol=1e-10)


@pytest.mark.parametrize("case", CONV_CASES)
@pytest.mark.parametrize("bias", [True, False])
def test_conv2d_gradcheck_and_gradgradcheck(case, bias, rng):
    N, C, H, W, O, k, s, p, d, g = case
    kH, kW = pair(k)
    x = rng.standard_normal((N, C, H, W))
    w = rng.standard_normal((O, C // g, kH, kW))
    inputs = [x, w] + ([rng.standard_normal(O)] if bias else [])

    def fn(*v):
        return F.conv2d(*v, stride=s, padding=p, dilation=d, groups=g)

    gradcheck(fn, inputs)
    gradgradcheck(fn, inputs)


@pytest.mark.parametrize("case", CONVT_CASES)
@pytest.mark.parametrize("bias", [True, False])
def test_conv_transpose2d_gradcheck_and_gradgradcheck(case, bias, rng):
    N, Cin, H, W, Cout, k, s, p, op, g, d = case
    kH, kW = pair(k)
    x = rng.standard_normal((N, Cin, H, W))
    w = rng.standard_normal((Cin, Cout // g, kH, kW))
    inputs = [x, w] + ([rng.standard_normal(Cout)] if bias else [])

    def fn(*v):
        return F.conv_transpose2d(*v, stride=s, padding=p, output_padding=op, groups=g, dilation=d)

    gradcheck(fn, inputs)
    gradgradcheck(fn, inputs)


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv2d_grad_weight_direct(case, rng):
    N, C, H, W, O, k, s, p, d, g = case
    kH, kW = pair(k)
    x = rng.standard_normal((N, C, H, W))
    w = rng.standard_normal((O, C // g, kH, kW))
    y = naive_conv2d(x, w, None, s, p, d, g)
    gy = rng.standard_normal(y.shape)
    gw = F.conv2d_grad_weight(gpgan.Variable(x), gpgan.Variable(gy), k, stride=s, padding=p, dilation=d, groups=g)
    # The weight gradient of a linear map: d<gy, conv(x, W)>/dW[e] = <gy, conv(x, E_e)>, by basis vectors.
    ref = np.zeros_like(w)
    for idx in np.ndindex(*w.shape):
        e = np.zeros_like(w)
        e[idx] = 1.0
        ref[idx] = (gy * naive_conv2d(x, e, None, s, p, d, g)).sum()
    np.testing.assert_allclose(gw.data, ref, rtol=1e-10, atol=1e-10)

    def fn(xv, gyv):
        return F.conv2d_grad_weight(xv, gyv, k, stride=s, padding=p, dilation=d, groups=g)

    gradcheck(fn, [x, gy])
    gradgradcheck(fn, [x, gy])


def test_input_gradient_alone_computes_no_weight_gradient(rng, monkeypatch):
    # R1's inner gradient w.r.t. the image must not run the weight-gradient op.
    from gpgan.functions import conv as conv_module

    calls = []
    original = conv_module.Conv2dGradWeight.forward

    def counting(self, inputs):
        calls.append(1)
        return original(self, inputs)

    monkeypatch.setattr(conv_module.Conv2dGradWeight, "forward", counting)
    x = gpgan.Variable(rng.standard_normal((2, 3, 6, 6)), requires_grad=True)
    w = gpgan.Variable(rng.standard_normal((4, 3, 3, 3)), requires_grad=True)
    y = F.conv2d(x, w, stride=2, padding=1)
    gx, = gpgan.grad(y.sum(), [x], create_graph=True)
    assert calls == []
    (gx * gx).sum().backward()
    assert w.grad is not None and w.grad.shape == w.shape


# -- the kernels behind the public functions ----------------------------------------------------
@pytest.mark.parametrize("layout", ["nchw", "channels_last", "cnhw"])
def test_conv_family_reads_every_memory_layout(layout, rng):
    x = rng.standard_normal((2, 4, 7, 6))
    w = rng.standard_normal((6, 2, 3, 3))
    y_ref = naive_conv2d(x, w, None, 2, 1, 1, 2)
    gy = rng.standard_normal(y_ref.shape)
    xl, gyl = in_layout(x, layout), in_layout(gy, layout)
    assert (layout == "nchw") == xl.flags.c_contiguous
    y = F.conv2d(gpgan.Variable(xl), gpgan.Variable(w), stride=2, padding=1, groups=2)
    np.testing.assert_allclose(y.data, y_ref, rtol=1e-10, atol=1e-10)
    gw = F.conv2d_grad_weight(gpgan.Variable(xl), gpgan.Variable(gyl), 3, stride=2, padding=1, groups=2)
    gw_ref = F.conv2d_grad_weight(gpgan.Variable(x), gpgan.Variable(gy), 3, stride=2, padding=1, groups=2)
    np.testing.assert_allclose(gw.data, gw_ref.data, rtol=1e-10, atol=1e-10)
    wt = rng.standard_normal((4, 3, 4, 4))
    xt = F.conv_transpose2d(gpgan.Variable(xl), gpgan.Variable(wt), stride=2, padding=1, output_padding=1)
    np.testing.assert_allclose(xt.data, naive_conv_transpose2d(x, wt, None, 2, 1, 1), rtol=1e-10, atol=1e-10)


# Transposed convolutions for the two kernels, each called directly: strides 1 to 3, paddings,
@pytest.mark.parametrize("kernel", ["_conv_transpose2d_gather", "_conv_transpose2d_scatter"])
@pytest.mark.parametrize("case", KERNEL_CASES)
def test_transposed_convolution_kernels_match_naive(kernel, case, rng):
    from gpgan.functions import conv as conv_module

    N, Cin, H, W, Cout, k, s, p, op, g, d = case
    k, s, p, op, d = pair(k), pair(s), pair(p), pair(op), pair(d)
    x = rng.standard_normal((N, Cin, H, W))
    w = rng.standard_normal((Cin, Cout // g, k[0], k[1]))
    ref = naive_conv_transpose2d(x, w, None, s, p, op, g, d)
    for layout in ("nchw", "channels_last"):
        y = getattr(conv_module, kernel)(np, in_layout(x, layout), w, s, p, d, g, ref.shape[2:])
        assert y.shape == ref.shape
        np.testing.assert_allclose(y, ref, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("case", FEW_OUTPUTS_CASES)
def test_stride1_convolution_with_few_outputs(case, rng, monkeypatch):
    from gpgan.functions import conv as conv_module

    N, C, H, W, O, k, p, d = case
    kH, kW = pair(k)
    x = rng.standard_normal((N, C, H, W))
    w = rng.standard_normal((O, C, kH, kW))
    b = rng.standard_normal(O)
    scatter_calls = []
    original = conv_module._conv_transpose2d_scatter
    monkeypatch.setattr(conv_module, "_conv_transpose2d_scatter",
                        lambda *a: scatter_calls.append(1) or original(*a))
    y = F.conv2d(gpgan.Variable(x), gpgan.Variable(w), gpgan.Variable(b), padding=p, dilation=d)
    np.testing.assert_allclose(y.data, naive_conv2d(x, w, b, 1, p, d), rtol=1e-10, atol=1e-10)
    assert len(scatter_calls) == (0 if pair(p)[0] > d * (kH - 1) else 1)
    gy = rng.standard_normal(y.shape)
    gw = F.conv2d_grad_weight(gpgan.Variable(x), gpgan.Variable(gy), k, padding=p, dilation=d)
    ref = np.zeros_like(w)
    for idx in np.ndindex(*w.shape):
        e = np.zeros_like(w)
        e[idx] = 1.0
        ref[idx] = (gy * naive_conv2d(x, e, None, 1, p, d)).sum()
    np.testing.assert_allclose(gw.data, ref, rtol=1e-10, atol=1e-10)

    def fn(*v):
        return F.conv2d(*v, padding=p, dilation=d)

    gradcheck(fn, [x, w, b])
    gradgradcheck(fn, [x, w, b])


def test_float32_stays_float32(rng):
    x = gpgan.Variable(rng.standard_normal((2, 3, 8, 8)).astype(np.float32), requires_grad=True)
    w = gpgan.Variable(rng.standard_normal((4, 3, 4, 4)).astype(np.float32), requires_grad=True)
    y = F.conv2d(x, w, stride=2, padding=1)
    z = F.conv_transpose2d(y, w, stride=2, padding=1)
    assert y.dtype == np.float32 and z.dtype == np.float32 and z.shape == x.shape
    z.sum().backward()
    assert x.grad.dtype == np.float32 and w.grad.dtype == np.float32


def test_shape_errors_name_function_and_shapes():
    x = gpgan.Variable(np.zeros((2, 3, 5, 5)))
    with pytest.raises(ValueError, match=r"conv2d.*\(2, 3, 5, 5\).*\(4, 2, 3, 3\)"):
        F.conv2d(x, gpgan.Variable(np.zeros((4, 2, 3, 3))))
    with pytest.raises(ValueError, match=r"conv2d.*smaller than the dilated kernel"):
        F.conv2d(x, gpgan.Variable(np.zeros((4, 3, 3, 3))), dilation=3)
    with pytest.raises(ValueError, match=r"conv2d: bias"):
        F.conv2d(x, gpgan.Variable(np.zeros((4, 3, 3, 3))), gpgan.Variable(np.zeros(3)))
    with pytest.raises(ValueError, match=r"conv2d: stride"):
        F.conv2d(x, gpgan.Variable(np.zeros((4, 3, 3, 3))), stride=0)
    with pytest.raises(ValueError, match=r"conv_transpose2d.*\(2, 3, 5, 5\).*\(4, 2, 3, 3\)"):
        F.conv_transpose2d(x, gpgan.Variable(np.zeros((4, 2, 3, 3))))
    with pytest.raises(ValueError, match=r"conv_transpose2d: output_padding"):
        F.conv_transpose2d(x, gpgan.Variable(np.zeros((3, 2, 3, 3))), stride=2, output_padding=2)
    with pytest.raises(ValueError, match=r"conv2d: x must have 4 dimensions"):
        F.conv2d(gpgan.Variable(np.zeros((3, 5, 5))), gpgan.Variable(np.zeros((4, 3, 3, 3))))


@pytest.mark.cuda
def test_conv_family_cuda_matches_cpu_to_second_order(rng):
    from gpgan.backend import to_device

    x = rng.standard_normal((2, 4, 7, 6))
    w = rng.standard_normal((6, 2, 3, 3))
    wt = rng.standard_normal((6, 2, 2, 2))
    wd, wdt = rng.standard_normal((4, 1, 4, 4)), rng.standard_normal((4, 1, 4, 4))  # depthwise

    def run(device):
        xv = gpgan.Variable(to_device(x, device), requires_grad=True)
        wv = gpgan.Variable(to_device(w, device), requires_grad=True)
        wtv = gpgan.Variable(to_device(wt, device), requires_grad=True)
        wdv = gpgan.Variable(to_device(wd, device), requires_grad=True)
        wdtv = gpgan.Variable(to_device(wdt, device), requires_grad=True)
        h = F.conv2d(xv, wv, stride=2, padding=1, groups=2)
        y = F.conv_transpose2d(h, wtv, stride=2, padding=1, output_padding=1, groups=2, dilation=2)
        # R3GAN's resampling: depthwise k4 s2 p1, down then up
        r = F.conv_transpose2d(F.conv2d(xv, wdv, stride=2, padding=1, groups=4), wdtv, stride=2, padding=1, groups=4)
        gx, = gpgan.grad((y * y).sum() + (r * r).sum(), [xv], create_graph=True)
        (gx * gx).sum().backward()
        return [v.numpy() for v in (y, r, gx, wv.grad, wtv.grad, wdv.grad, wdtv.grad)]

    for a, b in zip(run("cpu"), run("cuda")):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9)
