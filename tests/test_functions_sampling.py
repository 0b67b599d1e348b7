"""translate2d and bilinear_sample: values against naive loops and closed forms, gradients to
second order against finite differences in float64. bilinear_sample runs each test twice: on its
portable NumPy form and on the Numba kernels (gpgan.kernels.sampling), which must also give the
portable form's bits on DCGAN-sized batches."""
import numpy as np
import pytest

import gpgan.functions as F
from gpgan.autograd import Variable, grad, gradcheck, gradgradcheck
from gpgan.kernels import switches
from gpgan.kernels.cpu import passes

SAMPLING_KERNELS = ("bilinear_taps", "bilinear_gather", "bilinear_scatter")


@pytest.fixture(params=["portable", "kernels"])
def path(request, monkeypatch):
    """Runs the test on the portable form (the kernels off) or on the Numba kernels (on for arrays
    of any size); yields the calls of each sampling kernel, which the kernels path must have made."""
    before = switches.compiled_kernels_enabled()
    calls = dict.fromkeys(SAMPLING_KERNELS, 0)
    if request.param == "kernels":
        numba_kernels = pytest.importorskip("gpgan.kernels.cpu.numba_kernels", reason="needs Numba")
        monkeypatch.setattr(passes, "COMPILED_MIN_BYTES", 0)
        for name in SAMPLING_KERNELS:
            def counting(*args, _name=name, _original=getattr(numba_kernels, name)):
                calls[_name] += 1
                return _original(*args)
            monkeypatch.setattr(numba_kernels, name, counting)
    switches.set_compiled_kernels(request.param == "kernels")
    yield calls
    switches.set_compiled_kernels(before)
    if request.param == "kernels":
        assert calls["bilinear_taps"] > 0 and calls["bilinear_gather"] > 0, "the kernels did not run"


def naive_translate(x, shifts):
    N, C, H, W = x.shape
    y = np.zeros_like(x)
    for n in range(N):
        for i in range(H):
            for j in range(W):
                a, b = i + shifts[n, 0], j + shifts[n, 1]
                if 0 <= a < H and 0 <= b < W:
                    y[n, :, i, j] = x[n, :, a, b]
    return y


def _mirror(i, size):
    """pad(mode='reflect') by size - 1 pixels: the mirrored index, or None beyond the padding."""
    if i < -(size - 1) or i > 2 * (size - 1):
        return None
    return -i if i < 0 else 2 * (size - 1) - i if i > size - 1 else i


def naive_bilinear(x, sx, sy, padding):
    N, C, H, W = x.shape
    _, Ho, Wo = sx.shape
    y = np.zeros((N, C, Ho, Wo))
    for n in range(N):
        for i in range(Ho):
            for j in range(Wo):
                u, v = sx[n, i, j], sy[n, i, j]
                c0, r0 = int(np.floor(u)), int(np.floor(v))
                for r, c, w in ((r0, c0, (1 - (v - r0)) * (1 - (u - c0))), (r0, c0 + 1, (1 - (v - r0)) * (u - c0)),
                                (r0 + 1, c0, (v - r0) * (1 - (u - c0))), (r0 + 1, c0 + 1, (v - r0) * (u - c0))):
                    if padding == "reflection":
                        r, c = _mirror(r, H), _mirror(c, W)
                        if r is None or c is None:
                            continue
                    elif not (0 <= r < H and 0 <= c < W):
                        continue
                    y[n, :, i, j] += w * x[n, :, r, c]
    return y


SHIFTS = np.array([[0, 0], [2, -1], [-3, 4], [7, -9]])


def test_translate_matches_naive_and_large_shifts_give_zeros():
    x = np.random.default_rng(0).standard_normal((4, 2, 5, 6))
    y = F.translate2d(Variable(x), SHIFTS).data
    np.testing.assert_array_equal(y, naive_translate(x, SHIFTS))
    np.testing.assert_array_equal(y[0], x[0])  # no shift: the identity
    np.testing.assert_array_equal(y[3], 0)     # shifted out entirely


def test_translate_by_k_pixels_closed_form():
    x = np.arange(2 * 1 * 4 * 4, dtype=np.float64).reshape(2, 1, 4, 4)
    y = F.translate2d(Variable(x), np.array([[1, 0], [0, -2]])).data
    np.testing.assert_array_equal(y[0, 0, :3], x[0, 0, 1:])  # up by one row, last row zero
    np.testing.assert_array_equal(y[0, 0, 3], 0)
    np.testing.assert_array_equal(y[1, 0, :, 2:], x[1, 0, :, :2])  # right by two columns
    np.testing.assert_array_equal(y[1, 0, :, :2], 0)


def test_translate_derivatives_first_and_second_order():
    x = np.random.default_rng(1).standard_normal((4, 2, 5, 6))
    fn = lambda v: F.sin(F.translate2d(v, SHIFTS)) * F.translate2d(v, SHIFTS[::-1].copy())  # noqa: E731
    assert gradcheck(fn, (x,))
    assert gradgradcheck(fn, (x,))


def test_translate_rejects_bad_shifts():
    with pytest.raises(ValueError, match="shifts must be an integer array of shape"):
        F.translate2d(Variable(np.zeros((2, 1, 3, 3))), np.zeros((2, 2)))


def _coords(rng, N, Ho, Wo, H, W, spread):
    sx = rng.uniform(-spread, W - 1 + spread, (N, Ho, Wo))
    sy = rng.uniform(-spread, H - 1 + spread, (N, Ho, Wo))
    return sx, sy


@pytest.mark.parametrize("padding", ["zeros", "reflection"])
def test_bilinear_matches_naive(padding, path):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 2, 5, 4))
    sx, sy = _coords(rng, 3, 4, 6, 5, 4, spread=6.0)  # some mirrored, some beyond the mirrored band
    y = F.bilinear_sample(Variable(x), sx, sy, padding=padding).data
    np.testing.assert_allclose(y, naive_bilinear(x, sx, sy, padding), rtol=1e-12, atol=1e-12)


def test_bilinear_closed_forms(path):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 6, 5))
    rows, cols = np.meshgrid(np.arange(6.0), np.arange(5.0), indexing="ij")
    ident = F.bilinear_sample(Variable(x), np.stack([cols] * 2), np.stack([rows] * 2)).data
    np.testing.assert_array_equal(ident, x)  # integer coordinates at the pixels: the identity, exactly
    flipped = F.bilinear_sample(Variable(x), np.stack([4 - cols] * 2), np.stack([rows] * 2)).data
    np.testing.assert_array_equal(flipped, x[..., ::-1])
    shifted = F.bilinear_sample(Variable(x), np.stack([cols + 2] * 2), np.stack([rows] * 2)).data
    np.testing.assert_array_equal(shifted[..., :3], x[..., 2:])
    np.testing.assert_array_equal(shifted[..., 3:], 0)
    mirrored = F.bilinear_sample(Variable(x), np.stack([cols - 2] * 2), np.stack([rows] * 2), padding="reflection").data
    np.testing.assert_array_equal(mirrored, np.pad(x, ((0, 0), (0, 0), (0, 0), (2, 0)), mode="reflect")[..., :5])
    half = F.bilinear_sample(Variable(x), np.stack([cols[:, :4] + 0.5] * 2), np.stack([rows[:, :4]] * 2)).data
    np.testing.assert_allclose(half, (x[..., :4] + x[..., 1:]) / 2, rtol=1e-15)


@pytest.mark.parametrize("padding", ["zeros", "reflection"])
def test_bilinear_derivatives_first_and_second_order(padding, path):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 2, 4, 5))
    sx, sy = _coords(rng, 2, 3, 4, 4, 5, spread=3.0)
    # A repeated tap (two outputs reading one pixel) exercises the adjoint's adding up.
    sx[:, 0, :2], sy[:, 0, :2] = 1.25, 2.5
    fn = lambda v: F.sin(F.bilinear_sample(v, sx, sy, padding=padding)) * 2  # noqa: E731
    assert gradcheck(fn, (x,))
    assert gradgradcheck(fn, (x,))
    if path["bilinear_taps"]:
        assert path["bilinear_scatter"] > 0  # the adjoint ran on its kernel too
    if path["bilinear_taps"]:
        assert path["bilinear_scatter"] > 0  # the adjoint ran on its kernel too


def test_bilinear_rejects_bad_arguments():
    x = Variable(np.zeros((2, 1, 3, 3)))
    with pytest.raises(ValueError, match="padding 'border' is not supported; accepted: zeros, reflection"):
        F.bilinear_sample(x, np.zeros((2, 3, 3)), np.zeros((2, 3, 3)), padding="border")
    with pytest.raises(ValueError, match=r"sx and sy must both be \(N, Ho, Wo\) with N = 2"):
        F.bilinear_sample(x, np.zeros((1, 3, 3)), np.zeros((1, 3, 3)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("padding", ["zeros", "reflection"])
def test_bilinear_kernels_give_the_portable_forms_bits(dtype, padding):
    """A batch large enough for the kernels (no threshold lowered), an input in another memory
    layout, coordinates on whole pixels, inside, mirrored and beyond: the sample, its gradient and
    the gradient's own gradient, with the kernels and without, the same bits."""
    pytest.importorskip("gpgan.kernels.cpu.numba_kernels", reason="needs Numba")
    rng = np.random.default_rng(5)
    x = np.ascontiguousarray(rng.standard_normal((64, 16, 16, 3)).astype(dtype)).transpose(0, 3, 1, 2)
    sx, sy = (c.astype(dtype) for c in _coords(rng, 64, 16, 16, 16, 16, spread=20.0))
    sx[:, :3], sy[:, :, :3] = np.round(sx[:, :3]), np.round(sy[:, :, :3])
    gy = rng.standard_normal(x.shape).astype(dtype)
    before, results = switches.compiled_kernels_enabled(), []
    try:
        for on in (True, False):
            switches.set_compiled_kernels(on)
            v, u = Variable(x, requires_grad=True), Variable(gy, requires_grad=True)
            y = F.bilinear_sample(v, sx, sy, padding=padding)
            g, = grad([y], [v], [u], create_graph=True)  # the adjoint of u
            gg, = grad([F.sum(g * g)], [u])  # the sample of the adjoint's output again
            results.append((y.data, g.data, gg.data))
    finally:
        switches.set_compiled_kernels(before)
    for with_kernels, portable in zip(*results):
        assert with_kernels.dtype == dtype
        np.testing.assert_array_equal(with_kernels, portable)
