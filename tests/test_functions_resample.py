"""max_pool2d, avg_pool2d without padded values, interpolate and adaptive_avg_pool2d: values
against naive loops, gradients to second order, and (optional) against PyTorch."""
import math

import numpy as np
import pytest

import gpgan
import gpgan.functions as F
from gpgan.autograd import gradcheck, gradgradcheck
from helpers import pair


# -- naive references ----------------------------------------------------------------------------
def naive_max_pool2d(x, k, s=None, p=0):
    """Window maxima over the real inputs, and the gradient of sum(y * gy) routed to the first maximum."""
    k = pair(k)
    s = k if s is None else pair(s)
    p = pair(p)
    N, C, H, W = x.shape
    Ho, Wo = (H + 2 * p[0] - k[0]) // s[0] + 1, (W + 2 * p[1] - k[1]) // s[1] + 1
    y = np.zeros((N, C, Ho, Wo))
    where = np.zeros((N, C, Ho, Wo, 2), dtype=int)
    for n in range(N):
        for c in range(C):
            for i in range(Ho):
                for j in range(Wo):
                    best, at = -np.inf, None
                    for a in range(i * s[0] - p[0], i * s[0] - p[0] + k[0]):
                        for b in range(j * s[1] - p[1], j * s[1] - p[1] + k[1]):
                            if 0 <= a < H and 0 <= b < W and (at is None or x[n, c, a, b] > best):
                                best, at = x[n, c, a, b], (a, b)
                    y[n, c, i, j] = best
                    where[n, c, i, j] = at
    return y, where


def naive_max_pool2d_grad(x_shape, where, gy):
    gx = np.zeros(x_shape)
    N, C, Ho, Wo = gy.shape
    for n in range(N):
        for c in range(C):
            for i in range(Ho):
                for j in range(Wo):
                    a, b = where[n, c, i, j]
                    gx[n, c, a, b] += gy[n, c, i, j]
    return gx


def naive_avg_pool2d_exclude_pad(x, k, s, p):
    k, s, p = pair(k), pair(s), pair(p)
    N, C, H, W = x.shape
    Ho, Wo = (H + 2 * p[0] - k[0]) // s[0] + 1, (W + 2 * p[1] - k[1]) // s[1] + 1
    y = np.zeros((N, C, Ho, Wo))
    for i in range(Ho):
        for j in range(Wo):
            a0, b0 = max(i * s[0] - p[0], 0), max(j * s[1] - p[1], 0)
            a1, b1 = min(i * s[0] - p[0] + k[0], H), min(j * s[1] - p[1] + k[1], W)
            y[:, :, i, j] = x[:, :, a0:a1, b0:b1].mean(axis=(2, 3))
    return y


def _bilinear_source(dst, in_size, out_size, align_corners, scale):
    if align_corners:
        return dst * (in_size - 1) / (out_size - 1) if out_size > 1 else 0.0
    step = in_size / out_size if scale is None else scale
    return max((dst + 0.5) * step - 0.5, 0.0)


def naive_bilinear(x, out_hw, align_corners=False, scales=(None, None)):
    """torch's upsample_bilinear2d, one output pixel at a time."""
    N, C, H, W = x.shape
    Ho, Wo = out_hw
    y = np.zeros((N, C, Ho, Wo))
    for i in range(Ho):
        h = _bilinear_source(i, H, Ho, align_corners, scales[0])
        h0 = min(math.floor(h), H - 1)
        h1, lh = min(h0 + 1, H - 1), min(max(h - h0, 0.0), 1.0)
        for j in range(Wo):
            w = _bilinear_source(j, W, Wo, align_corners, scales[1])
            w0 = min(math.floor(w), W - 1)
            w1, lw = min(w0 + 1, W - 1), min(max(w - w0, 0.0), 1.0)
            y[:, :, i, j] = ((1 - lh) * ((1 - lw) * x[:, :, h0, w0] + lw * x[:, :, h0, w1])
                             + lh * ((1 - lw) * x[:, :, h1, w0] + lw * x[:, :, h1, w1]))
    return y


def naive_nearest(x, out_hw):
    N, C, H, W = x.shape
    Ho, Wo = out_hw
    y = np.zeros((N, C, Ho, Wo))
    for i in range(Ho):
        for j in range(Wo):
            y[:, :, i, j] = x[:, :, min(int(i * H / Ho), H - 1), min(int(j * W / Wo), W - 1)]
    return y


def naive_adaptive_avg(x, out_hw):
    N, C, H, W = x.shape
    Ho, Wo = out_hw
    y = np.zeros((N, C, Ho, Wo))
    for i in range(Ho):
        for j in range(Wo):
            a0, a1 = math.floor(i * H / Ho), math.ceil((i + 1) * H / Ho)
            b0, b1 = math.floor(j * W / Wo), math.ceil((j + 1) * W / Wo)
            y[:, :, i, j] = x[:, :, a0:a1, b0:b1].mean(axis=(2, 3))
    return y


# -- max_pool2d ------------------------------------------------------------------------------------
MAX_CASES = [(2, None, 0), (3, 2, 0), (3, 1, 1), ((2, 3), (1, 2), (1, 1)), (3, 2, 1)]


@pytest.mark.parametrize("k,s,p", MAX_CASES)
def test_max_pool2d_values_gradient_and_routing(k, s, p, rng):
    x = rng.standard_normal((2, 3, 7, 6))
    ref, where = naive_max_pool2d(x, k, s, p)
    xv = gpgan.Variable(x, requires_grad=True)
    y = F.max_pool2d(xv, k, s, p)
    np.testing.assert_array_equal(y.data, ref)
    gy = rng.standard_normal(ref.shape)
    y.backward(gy)
    np.testing.assert_allclose(xv.grad.data, naive_max_pool2d_grad(x.shape, where, gy), rtol=1e-13, atol=1e-15)

    def fn(v):
        return F.max_pool2d(v, k, s, p)

    gradcheck(fn, [x])
    gradgradcheck(fn, [x])


def test_max_pool2d_ties_go_to_the_first_maximum():
    x = np.zeros((1, 1, 4, 4))
    x[0, 0, 1, 1] = x[0, 0, 1, 2] = 5.0  # a tie inside one 2x2 window... and across windows below
    x[0, 0, 2, 2] = x[0, 0, 3, 3] = 1.0
    xv = gpgan.Variable(x, requires_grad=True)
    F.max_pool2d(xv, 3, 1).backward(np.ones((1, 1, 2, 2)))
    _, where = naive_max_pool2d(x, 3, 1)
    np.testing.assert_array_equal(xv.grad.data, naive_max_pool2d_grad(x.shape, where, np.ones((1, 1, 2, 2))))
    assert xv.grad.data[0, 0, 1, 1] == 4.0 and xv.grad.data[0, 0, 1, 2] == 0.0


def test_max_pool2d_second_derivative_in_the_input_is_zero(rng):
    # As torch: d/dx of a max-pool gradient is zero, not an "unused input" error.
    x = gpgan.Variable(rng.standard_normal((2, 2, 5, 5)), requires_grad=True)
    y = F.max_pool2d(x, 3, 2, 1)
    gx, = gpgan.grad(y, x, rng.standard_normal(y.shape), create_graph=True)
    ggx, = gpgan.grad(F.sum(gx * gx), x)
    np.testing.assert_array_equal(ggx.data, np.zeros(x.shape))


def test_max_pool2d_nan_propagates_and_float32_stays(rng):
    x = rng.standard_normal((1, 1, 4, 4)).astype(np.float32)
    x[0, 0, 0, 0] = np.nan
    y = F.max_pool2d(gpgan.Variable(x), 2)
    assert y.dtype == np.float32
    assert np.isnan(y.data[0, 0, 0, 0]) and np.isfinite(y.data[0, 0, 1:, 1:]).all()
    xv = gpgan.Variable(x, requires_grad=True)
    F.max_pool2d(xv, 2).backward(np.ones((1, 1, 2, 2), np.float32))
    assert xv.grad.data[0, 0, 0, 0] == 1.0 and xv.grad.data[0, 0, :2, :2].sum() == 1.0


def test_max_pool2d_without_a_graph(rng):
    # The fast path (no winners kept) gives the same maxima, NaN included.
    x = rng.standard_normal((1, 2, 6, 6))
    x[0, 1, 2, 2] = np.nan
    with gpgan.no_grad():
        y = F.max_pool2d(gpgan.Variable(x, requires_grad=True), 3, 2)
    assert not y.requires_grad
    ref = F.max_pool2d(gpgan.Variable(x, requires_grad=True), 3, 2)
    np.testing.assert_array_equal(y.data, ref.data)
    assert np.isnan(y.data[0, 1, :2, :2]).all() and not np.isnan(y.data[0, 0]).any()


def test_max_pool2d_errors():
    x = gpgan.Variable(np.zeros((1, 1, 4, 4)))
    with pytest.raises(ValueError, match="max_pool2d: padding 2 must be at most half of kernel_size 3"):
        F.max_pool2d(x, 3, padding=2)
    with pytest.raises(ValueError, match=r"max_pool2d: x must have 4 dimensions"):
        F.max_pool2d(gpgan.Variable(np.zeros((4, 4))), 2)
    with pytest.raises(ValueError, match="max_pool2d: kernel_size 5 is larger than the padded input"):
        F.max_pool2d(x, 5)
    with pytest.raises(ValueError, match="max_pool2d: stride must be an int >= 1"):
        F.max_pool2d(x, 2, stride=0)


# -- avg_pool2d(count_include_pad=False) -------------------------------------------------------------
@pytest.mark.parametrize("k,s,p", [(3, 1, 1), (3, 2, 1), ((3, 2), (2, 1), (1, 1)), (2, 2, 0)])
def test_avg_pool2d_without_padded_values(k, s, p, rng):
    x = rng.standard_normal((2, 2, 6, 5))
    y = F.avg_pool2d(gpgan.Variable(x), k, s, p, count_include_pad=False)
    np.testing.assert_allclose(y.data, naive_avg_pool2d_exclude_pad(x, k, s, p), rtol=1e-12, atol=1e-14)

    def fn(v):
        return F.avg_pool2d(v, k, s, p, count_include_pad=False)

    gradcheck(fn, [x])
    gradgradcheck(fn, [x])


# -- interpolate ----------------------------------------------------------------------------------
@pytest.mark.parametrize("in_hw,out_hw,align", [
    ((4, 5), (9, 7), False), ((6, 4), (3, 2), False), ((5, 5), (11, 3), True), ((3, 4), (1, 1), True),
    ((2, 3), (5, 5), False), ((4, 4), (4, 4), False),
])
def test_bilinear_matches_a_naive_loop(in_hw, out_hw, align, rng):
    x = rng.standard_normal((2, 3) + in_hw)
    y = F.interpolate(gpgan.Variable(x), size=out_hw, mode="bilinear", align_corners=align)
    np.testing.assert_allclose(y.data, naive_bilinear(x, out_hw, align), rtol=1e-12, atol=1e-13)


def test_bilinear_with_scale_factor_uses_its_inverse_as_step(rng):
    x = rng.standard_normal((1, 2, 5, 3))
    y = F.interpolate(gpgan.Variable(x), scale_factor=(1.7, 2.5), mode="bilinear")
    assert y.shape == (1, 2, 8, 7)  # floor(5 * 1.7), floor(3 * 2.5)
    np.testing.assert_allclose(y.data, naive_bilinear(x, (8, 7), scales=(1 / 1.7, 1 / 2.5)), rtol=1e-12,
                               atol=1e-13)


def test_bilinear_to_299_is_a_partition_of_unity_and_float32(rng):
    x = rng.standard_normal((2, 3, 32, 32)).astype(np.float32)
    y = F.interpolate(gpgan.Variable(x), size=(299, 299), mode="bilinear", align_corners=False)
    assert y.dtype == np.float32 and y.shape == (2, 3, 299, 299)
    # Coordinates are computed in float32, as torch does for float32 input: the weights are off
    # the exact ones by up to 32 * 2**-24 (source coordinates up to 32).
    np.testing.assert_allclose(y.data, naive_bilinear(x.astype(np.float64), (299, 299)), rtol=0, atol=2e-5)
    ones = F.interpolate(gpgan.Variable(np.ones((1, 1, 32, 32), np.float32)), size=299, mode="bilinear")
    np.testing.assert_allclose(ones.data, 1.0, rtol=0, atol=1e-6)


@pytest.mark.parametrize("in_hw,out_hw", [((3, 4), (7, 9)), ((6, 6), (4, 3)), ((2, 2), (4, 4))])
def test_nearest_matches_a_naive_loop(in_hw, out_hw, rng):
    x = rng.standard_normal((2, 2) + in_hw)
    y = F.interpolate(gpgan.Variable(x), size=out_hw)
    np.testing.assert_array_equal(y.data, naive_nearest(x, out_hw))


@pytest.mark.parametrize("in_hw,out_hw", [((8, 8), (1, 1)), ((7, 5), (3, 2)), ((5, 6), (5, 4)), ((3, 3), (5, 4))])
def test_adaptive_avg_pool2d_matches_a_naive_loop(in_hw, out_hw, rng):
    x = rng.standard_normal((2, 3) + in_hw)
    y = F.adaptive_avg_pool2d(gpgan.Variable(x), out_hw)
    np.testing.assert_allclose(y.data, naive_adaptive_avg(x, out_hw), rtol=1e-12, atol=1e-14)
    area = F.interpolate(gpgan.Variable(x), size=out_hw, mode="area")
    np.testing.assert_array_equal(area.data, y.data)


def test_global_average_pooling_is_the_spatial_mean(rng):
    x = rng.standard_normal((3, 4, 8, 8))
    y = F.adaptive_avg_pool2d(gpgan.Variable(x), 1)
    np.testing.assert_allclose(y.data, x.mean(axis=(2, 3), keepdims=True), rtol=1e-13)
    y2 = F.adaptive_avg_pool2d(gpgan.Variable(x), (None, 2))
    np.testing.assert_allclose(y2.data, naive_adaptive_avg(x, (8, 2)), rtol=1e-12)


@pytest.mark.parametrize("call", [
    lambda v: F.interpolate(v, size=(5, 3), mode="bilinear"),
    lambda v: F.interpolate(v, size=(2, 7), mode="bilinear", align_corners=True),
    lambda v: F.interpolate(v, scale_factor=1.5, mode="nearest"),
    lambda v: F.adaptive_avg_pool2d(v, (2, 3)),
])
def test_resampling_gradients_to_second_order(call, rng):
    x = rng.standard_normal((2, 2, 4, 4))
    gradcheck(call, [x])
    gradgradcheck(call, [x])


def test_resampling_gradient_is_the_transposed_map(rng):
    # <interp(x), g> == <x, interp^T(g)> for the backward.
    x = gpgan.Variable(rng.standard_normal((1, 2, 5, 4)), requires_grad=True)
    y = F.interpolate(x, size=(9, 11), mode="bilinear")
    g = rng.standard_normal(y.shape)
    y.backward(g)
    assert np.isclose((y.data * g).sum(), (x.data * x.grad.data).sum(), rtol=1e-12)


def test_resize_errors():
    x = gpgan.Variable(np.zeros((1, 1, 4, 4)))
    with pytest.raises(ValueError, match="interpolate: mode 'bicubic' is not supported; accepted: 'nearest'"):
        F.interpolate(x, size=2, mode="bicubic")
    with pytest.raises(ValueError, match="give exactly one of size and scale_factor"):
        F.interpolate(x, size=2, scale_factor=2)
    with pytest.raises(ValueError, match="give exactly one of size and scale_factor"):
        F.interpolate(x)
    with pytest.raises(ValueError, match="align_corners applies to mode 'bilinear' only"):
        F.interpolate(x, size=2, align_corners=False)
    with pytest.raises(ValueError, match=r"size must be an int >= 1 or a pair of them, got \(0, 2\)"):
        F.interpolate(x, size=(0, 2))
    with pytest.raises(ValueError, match="scale_factor must be a number > 0"):
        F.interpolate(x, scale_factor=-1.0)
    with pytest.raises(ValueError, match="leaves no pixel"):
        F.interpolate(x, scale_factor=0.1)
    with pytest.raises(TypeError, match="interpolate: x must be floating point, got uint8"):
        F.interpolate(gpgan.Variable(np.zeros((1, 1, 4, 4), np.uint8)), size=2)
    with pytest.raises(ValueError, match=r"adaptive_avg_pool2d: x must have 4 dimensions"):
        F.adaptive_avg_pool2d(gpgan.Variable(np.zeros((4, 4))), 1)
    with pytest.raises(ValueError, match="output_size must be an int >= 1 or a pair of them"):
        F.adaptive_avg_pool2d(x, (2, 0))


# -- CUDA: the same numbers, first and second order ------------------------------------------------
CUDA_CASES = {
    # x * x: pooling and resizing are linear, so without it the second derivative would be trivial
    "max_pool2d": lambda x: F.max_pool2d(x * x, 3, 2, 1),
    "avg_pool2d_exclude_pad": lambda x: F.avg_pool2d(x * x, 3, 1, 1, count_include_pad=False),
    "bilinear": lambda x: F.interpolate(x * x, size=(9, 7), mode="bilinear"),
    "adaptive_avg_pool2d": lambda x: F.adaptive_avg_pool2d(x * x, (2, 3)),
}


@pytest.mark.cuda
@pytest.mark.parametrize("name", sorted(CUDA_CASES))
def test_cuda_matches_cpu(name):
    fn = CUDA_CASES[name]
    host = np.random.default_rng(0).standard_normal((2, 3, 6, 5))
    results = {}
    for device in ("cpu", "cuda"):
        x = gpgan.Variable(gpgan.Variable(host).to(device).data, requires_grad=True)
        y = fn(x)
        gy = gpgan.Variable(gpgan.Variable(np.cos(np.arange(y.size)).reshape(y.shape)).to(device).data)
        gx, = gpgan.grad(y, x, grad_outputs=gy, create_graph=True)
        ggx, = gpgan.grad(F.sum(gx * gx), x)
        results[device] = [v.to("cpu").data for v in (y, gx, ggx)]
    for cpu, cuda in zip(results["cpu"], results["cuda"]):
        np.testing.assert_allclose(cuda, cpu, rtol=1e-10, atol=1e-12)


# -- optional: against PyTorch -------------------------------------------------------------------
@pytest.fixture
def torch():
    return pytest.importorskip("torch")


def test_pooling_and_resizing_equal_torch(torch, rng):
    TF = torch.nn.functional
    x = rng.standard_normal((2, 3, 13, 11))
    t = torch.tensor(x)
    cases = [
        (lambda v: F.max_pool2d(v, 3, 2), lambda v: TF.max_pool2d(v, 3, 2)),
        (lambda v: F.max_pool2d(v, 3, 1, 1), lambda v: TF.max_pool2d(v, 3, 1, 1)),
        (lambda v: F.avg_pool2d(v, 3, 1, 1, count_include_pad=False),
         lambda v: TF.avg_pool2d(v, 3, 1, 1, count_include_pad=False)),
        (lambda v: F.adaptive_avg_pool2d(v, (4, 3)), lambda v: TF.adaptive_avg_pool2d(v, (4, 3))),
        (lambda v: F.interpolate(v, size=(299, 299), mode="bilinear", align_corners=False),
         lambda v: TF.interpolate(v, size=(299, 299), mode="bilinear", align_corners=False)),
        (lambda v: F.interpolate(v, size=(7, 30), mode="bilinear", align_corners=True),
         lambda v: TF.interpolate(v, size=(7, 30), mode="bilinear", align_corners=True)),
        (lambda v: F.interpolate(v, scale_factor=(1.3, 2.6), mode="bilinear"),
         lambda v: TF.interpolate(v, scale_factor=(1.3, 2.6), mode="bilinear")),
        (lambda v: F.interpolate(v, size=(20, 5)), lambda v: TF.interpolate(v, size=(20, 5))),
    ]
    for ours, theirs in cases:
        for dtype, tol in ((np.float64, 1e-12), (np.float32, 2e-6)):
            got = ours(gpgan.Variable(x.astype(dtype))).data
            want = theirs(t.to(getattr(torch, np.dtype(dtype).name))).numpy()
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
        # Gradients too: the same output gradient through both.
        xv = gpgan.Variable(x, requires_grad=True)
        y = ours(xv)
        g = rng.standard_normal(y.shape)
        y.backward(g)
        tt = t.clone().requires_grad_(True)
        theirs(tt).backward(torch.tensor(g))
        np.testing.assert_allclose(xv.grad.data, tt.grad.numpy(), rtol=1e-12, atol=1e-12)
