"""avg_pool2d, upsample_nearest2d, batch_norm, layer_norm, dropout: values and gradients to second order."""
import numpy as np
import pytest

import gpgan
import gpgan.functions as F
from gpgan.autograd import gradcheck, gradgradcheck
from helpers import pair


def naive_avg_pool2d(x, k, s=None, p=0):
    k = pair(k)
    s = k if s is None else pair(s)
    p = pair(p)
    N, C, H, W = x.shape
    xp = np.zeros((N, C, H + 2 * p[0], W + 2 * p[1]))
    xp[:, :, p[0]:p[0] + H, p[1]:p[1] + W] = x
    Ho, Wo = (H + 2 * p[0] - k[0]) // s[0] + 1, (W + 2 * p[1] - k[1]) // s[1] + 1
    y = np.zeros((N, C, Ho, Wo))
    for i in range(Ho):
        for j in range(Wo):
            y[:, :, i, j] = xp[:, :, i * s[0]:i * s[0] + k[0], j * s[1]:j * s[1] + k[1]].mean(axis=(2, 3))
    return y


POOL_CASES = [(2, None, 0), (3, 2, 1), ((2, 3), (1, 2), (1, 0)), (3, 1, 0)]


@pytest.mark.parametrize("k,s,p", POOL_CASES)
def test_avg_pool2d_values_and_gradients(k, s, p, rng):
    x = rng.standard_normal((2, 2, 6, 7))
    y = F.avg_pool2d(gpgan.Variable(x), k, s, p)
    np.testing.assert_allclose(y.data, naive_avg_pool2d(x, k, s, p), rtol=1e-12, atol=1e-12)

    def fn(v):
        return F.avg_pool2d(v, k, s, p)

    gradcheck(fn, [x])
    gradgradcheck(fn, [x])


def test_avg_pool2d_errors():
    x = gpgan.Variable(np.zeros((1, 1, 4, 4)))
    with pytest.raises(ValueError, match="avg_pool2d: padding"):
        F.avg_pool2d(x, 2, padding=2)
    with pytest.raises(ValueError, match=r"avg_pool2d: x must have 4 dimensions"):
        F.avg_pool2d(gpgan.Variable(np.zeros((4, 4))), 2)


@pytest.mark.parametrize("scale", [2, (1, 3)])
def test_upsample_nearest2d_values_and_gradients(scale, rng):
    x = rng.standard_normal((2, 3, 3, 2))
    sH, sW = pair(scale)
    y = F.upsample_nearest2d(gpgan.Variable(x), scale)
    ref = np.repeat(np.repeat(x, sH, axis=2), sW, axis=3)
    np.testing.assert_array_equal(y.data, ref)

    def fn(v):
        return F.upsample_nearest2d(v, scale)

    gradcheck(fn, [x])
    gradgradcheck(fn, [x])


def test_upsample_gradient_is_block_sum(rng):
    x = gpgan.Variable(rng.standard_normal((1, 2, 3, 3)), requires_grad=True)
    gy = rng.standard_normal((1, 2, 6, 6))
    F.upsample_nearest2d(x, 2).backward(gy)
    np.testing.assert_allclose(x.grad.data, gy.reshape(1, 2, 3, 2, 3, 2).sum(axis=(3, 5)))


def naive_batch_norm_train(x, w, b, eps):
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    mu = x.mean(axis=axes, keepdims=True)
    var = x.var(axis=axes, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w.reshape(shape) + b.reshape(shape)


@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 3, 2)])
def test_batch_norm_training_values_running_stats_and_gradients(shape, rng):
    x = rng.standard_normal(shape) * 2 + 1
    C = shape[1]
    w, b = rng.standard_normal(C), rng.standard_normal(C)
    rm, rv = rng.standard_normal(C), rng.random(C) + 0.5
    rm0, rv0 = rm.copy(), rv.copy()
    y = F.batch_norm(gpgan.Variable(x), rm, rv, gpgan.Variable(w), gpgan.Variable(b), training=True, momentum=0.3)
    np.testing.assert_allclose(y.data, naive_batch_norm_train(x, w, b, 1e-5), rtol=1e-10, atol=1e-10)
    axes = (0,) + tuple(range(2, x.ndim))
    np.testing.assert_allclose(rm, 0.7 * rm0 + 0.3 * x.mean(axis=axes))
    np.testing.assert_allclose(rv, 0.7 * rv0 + 0.3 * x.var(axis=axes, ddof=1))

    def fn(xv, wv, bv):
        return F.batch_norm(xv, None, None, wv, bv, training=True, eps=1e-3)

    gradcheck(fn, [x, w, b])
    gradgradcheck(fn, [x, w, b])


def test_batch_norm_eval_uses_running_stats(rng):
    x = rng.standard_normal((3, 2, 2, 2))
    w, b = rng.standard_normal(2), rng.standard_normal(2)
    rm, rv = rng.standard_normal(2), rng.random(2) + 0.5
    before = (rm.copy(), rv.copy())
    y = F.batch_norm(gpgan.Variable(x), rm, rv, gpgan.Variable(w), gpgan.Variable(b), training=False, eps=1e-4)
    s = (1, 2, 1, 1)
    ref = (x - rm.reshape(s)) / np.sqrt(rv.reshape(s) + 1e-4) * w.reshape(s) + b.reshape(s)
    np.testing.assert_allclose(y.data, ref, rtol=1e-12)
    np.testing.assert_array_equal(rm, before[0])
    np.testing.assert_array_equal(rv, before[1])

    def fn(xv, wv, bv):
        return F.batch_norm(xv, rm, rv, wv, bv, training=False)

    gradcheck(fn, [x, w, b])
    gradgradcheck(fn, [x, w, b])


def test_batch_norm_float32_and_errors(rng):
    x = gpgan.Variable(rng.standard_normal((4, 3, 2, 2)).astype(np.float32), requires_grad=True)
    rm, rv = np.zeros(3, np.float32), np.ones(3, np.float32)
    y = F.batch_norm(x, rm, rv, training=True)
    assert y.dtype == np.float32 and rm.dtype == np.float32
    with pytest.raises(ValueError, match=r"batch_norm: running_mean must have shape \(3,\)"):
        F.batch_norm(x, np.zeros(2), rv, training=True)
    with pytest.raises(ValueError, match="batch_norm: eval mode"):
        F.batch_norm(x, None, None, training=False)
    with pytest.raises(ValueError, match="more than one value per channel"):
        F.batch_norm(gpgan.Variable(np.zeros((1, 3))), None, None, training=True)


@pytest.mark.parametrize("normalized_shape", [4, (3, 4)])
def test_layer_norm_values_and_gradients(normalized_shape, rng):
    x = rng.standard_normal((2, 3, 4)) * 3
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else normalized_shape
    w, b = rng.standard_normal(shape), rng.standard_normal(shape)
    axes = tuple(range(3 - len(shape), 3))
    mu, var = x.mean(axis=axes, keepdims=True), x.var(axis=axes, keepdims=True)
    ref = (x - mu) / np.sqrt(var + 1e-5) * w + b
    y = F.layer_norm(gpgan.Variable(x), normalized_shape, gpgan.Variable(w), gpgan.Variable(b))
    np.testing.assert_allclose(y.data, ref, rtol=1e-10, atol=1e-10)

    def fn(xv, wv, bv):
        return F.layer_norm(xv, normalized_shape, wv, bv, eps=1e-3)

    gradcheck(fn, [x, w, b])
    gradgradcheck(fn, [x, w, b])


def test_layer_norm_of_a_one_dimensional_input(rng):
    """A 1-D input has statistics over axis 0 only, which once looked like batch norm's case."""
    x, w, b = rng.standard_normal(6) * 3, rng.standard_normal(6), rng.standard_normal(6)
    y = F.layer_norm(gpgan.Variable(x), 6, gpgan.Variable(w), gpgan.Variable(b))
    np.testing.assert_allclose(y.data, (x - x.mean()) / np.sqrt(x.var() + 1e-5) * w + b, rtol=1e-10, atol=1e-10)
    gradcheck(lambda xv, wv, bv: F.layer_norm(xv, 6, wv, bv), [x, w, b])
    gradgradcheck(lambda xv, wv, bv: F.layer_norm(xv, 6, wv, bv), [x, w, b])
    with pytest.raises(ValueError, match="layer_norm: normalized_shape"):
        F.layer_norm(gpgan.Variable(x), (5,))


# The normalization node's backward has a raw-array form (no graph recorded) and a recorded form
# (create_graph=True); gradcheck checks the first and gradgradcheck the second. Here the two agree
# on every combination of affine parameters, for a channels-last batch too.
NORM_CASES = [
    ("batch", (5, 3, 4, 2), "nchw"), ("batch", (5, 3, 4, 2), "channels_last"), ("batch", (6, 4), "nchw"),
    ("layer", (2, 3, 4), "nchw"), ("layer", (3, 2, 4, 5), "channels_last"),
]


@pytest.mark.parametrize("kind, shape, layout", NORM_CASES)
@pytest.mark.parametrize("affine", [(True, True), (True, False), (False, True), (False, False)])
def test_normalization_backward_forms_agree(kind, shape, layout, affine, rng):
    x = rng.standard_normal(shape) * 2 + 0.5
    if layout == "channels_last":
        x = np.ascontiguousarray(np.moveaxis(x, 1, -1)).transpose(0, 3, 1, 2)
    own = (shape[1],) if kind == "batch" else shape[-2:]
    params = [gpgan.Variable(rng.standard_normal(own), requires_grad=True) if on else None for on in affine]
    xv = gpgan.Variable(x, requires_grad=True)

    def fn():
        if kind == "batch":
            return F.batch_norm(xv, None, None, params[0], params[1], training=True)
        return F.layer_norm(xv, own, params[0], params[1])

    targets = [xv] + [p for p in params if p is not None]
    gy = rng.standard_normal(shape)
    raw = gpgan.grad(fn(), targets, grad_outputs=gy)
    recorded = gpgan.grad(fn(), targets, grad_outputs=gy, create_graph=True)
    assert recorded[0].requires_grad and not raw[0].requires_grad
    for a, b in zip(raw, recorded):
        np.testing.assert_allclose(a.data, b.data, rtol=1e-10, atol=1e-12)


def test_dropout_seeded_mask_scaling_and_gradient(rng):
    x = gpgan.Variable(np.ones((200, 50)), requires_grad=True)
    y1 = F.dropout(x, 0.3, rng=np.random.default_rng(7))
    y2 = F.dropout(x, 0.3, rng=np.random.default_rng(7))
    np.testing.assert_array_equal(y1.data, y2.data)
    values = set(np.unique(y1.data).tolist())
    assert values <= {0.0, 1.0 / 0.7}
    # Kept fraction ~ 0.7 (binomial std ~ 0.0046) and expectation preserved by the 1/(1-p) scale.
    assert abs((y1.data != 0).mean() - 0.7) < 0.03
    assert abs(y1.data.mean() - 1.0) < 0.04
    # The global generator: manual_seed fixes the mask.
    gpgan.manual_seed(3)
    a = F.dropout(x, 0.5).data
    gpgan.manual_seed(3)
    np.testing.assert_array_equal(a, F.dropout(x, 0.5).data)
    # backward = gy * mask
    gy = rng.standard_normal(x.shape)
    y1.backward(gy)
    np.testing.assert_allclose(x.grad.data, gy * y1.data)


def test_dropout_eval_p0_p1_and_errors(rng):
    x = gpgan.Variable(rng.standard_normal((3, 4)).astype(np.float32))
    assert F.dropout(x, 0.5, training=False) is x
    assert F.dropout(x, 0.0) is x
    z = F.dropout(x, 1.0)
    assert z.dtype == np.float32 and not z.data.any()
    with pytest.raises(ValueError, match="dropout: p"):
        F.dropout(x, 1.5)


def test_dropout_gradgradcheck():
    x = np.random.default_rng(0).standard_normal((3, 4))

    def fn(v):
        return F.dropout(v, 0.4, rng=np.random.default_rng(5)) ** 2

    gradcheck(fn, [x])
    gradgradcheck(fn, [x])
