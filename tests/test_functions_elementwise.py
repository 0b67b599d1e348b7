"""Elementwise math and activations: values against NumPy closed forms, first and second derivatives
against finite differences, stability at large |x|, and the conventions at kinks and ties."""
import numpy as np
import pytest

import gpgan
import gpgan.functions as F
from gpgan.autograd import gradcheck, gradgradcheck


def away_from(rng, shape, points=(0.0,), gap=0.1, scale=2.0):
    """Random normal values kept at least ``gap`` away from every kink in ``points``."""
    x = rng.standard_normal(shape) * scale
    for p in points:
        close = np.abs(x - p) < gap
        x[close] = p + np.where(x[close] >= p, gap, -gap) * 2
    return x


def positive(rng, shape):
    return rng.uniform(0.5, 2.0, shape)


def sigmoid_ref(x):
    return np.exp(-np.logaddexp(0.0, -x))  # exp(log sigmoid(x)): no overflow, full relative precision


def softplus_ref(x, beta=1.0):
    return np.logaddexp(0.0, beta * x) / beta


# name -> (function, numpy reference, input generator)
UNARY = {
    "exp": (F.exp, np.exp, lambda r, s: r.standard_normal(s)),
    "log": (F.log, np.log, positive),
    "sqrt": (F.sqrt, np.sqrt, positive),
    "square": (F.square, np.square, lambda r, s: r.standard_normal(s)),
    "abs": (F.abs, np.abs, lambda r, s: away_from(r, s)),
    "sin": (F.sin, np.sin, lambda r, s: r.standard_normal(s)),
    "cos": (F.cos, np.cos, lambda r, s: r.standard_normal(s)),
    "clip": (lambda x: F.clip(x, -0.5, 1.0), lambda x: np.clip(x, -0.5, 1.0),
             lambda r, s: away_from(r, s, (-0.5, 1.0))),
    "clip_min_only": (lambda x: F.clip(x, min=0.3), lambda x: np.maximum(x, 0.3),
                      lambda r, s: away_from(r, s, (0.3,))),
    "clamp_max_only": (lambda x: F.clamp(x, max=-0.2), lambda x: np.minimum(x, -0.2),
                       lambda r, s: away_from(r, s, (-0.2,))),
    "relu": (F.relu, lambda x: np.maximum(x, 0), lambda r, s: away_from(r, s)),
    "leaky_relu": (lambda x: F.leaky_relu(x, 0.2), lambda x: np.where(x > 0, x, 0.2 * x),
                   lambda r, s: away_from(r, s)),
    "leaky_relu_negative_slope": (lambda x: F.leaky_relu(x, -0.3), lambda x: np.where(x > 0, x, -0.3 * x),
                                  lambda r, s: away_from(r, s)),
    "elu": (F.elu, lambda x: np.where(x > 0, x, np.expm1(x)), lambda r, s: away_from(r, s)),
    "elu_alpha": (lambda x: F.elu(x, alpha=0.7), lambda x: np.where(x > 0, x, 0.7 * np.expm1(x)),
                  lambda r, s: away_from(r, s)),
    "elu_negative_alpha": (lambda x: F.elu(x, alpha=-0.5), lambda x: np.where(x > 0, x, -0.5 * np.expm1(x)),
                           lambda r, s: away_from(r, s)),
    "sigmoid": (F.sigmoid, sigmoid_ref, lambda r, s: r.standard_normal(s) * 3),
    "tanh": (F.tanh, np.tanh, lambda r, s: r.standard_normal(s) * 2),
    "softplus": (F.softplus, softplus_ref, lambda r, s: r.standard_normal(s) * 3),
    "softplus_beta": (lambda x: F.softplus(x, beta=2.0, threshold=5.0),
                      lambda x: np.where(2 * x > 5, x, softplus_ref(x, 2.0)),
                      lambda r, s: away_from(r, s, (2.5,), scale=3)),
    "log_sigmoid": (F.log_sigmoid, lambda x: -np.logaddexp(0.0, -x), lambda r, s: r.standard_normal(s) * 3),
    "neg": (F.neg, np.negative, lambda r, s: r.standard_normal(s)),
    "neg_operator": (lambda x: -(x * x), lambda x: -(x * x), lambda r, s: r.standard_normal(s)),
    "rpow": (lambda x: 1.7 ** x, lambda x: 1.7 ** x, lambda r, s: r.standard_normal(s)),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_values_and_first_and_second_derivatives(name):
    fn, ref, gen = UNARY[name]
    rng = np.random.default_rng(abs(hash(name)) % 2**32)
    x = gen(rng, (3, 4))
    np.testing.assert_allclose(fn(gpgan.Variable(x)).data, ref(x), rtol=1e-12, atol=1e-14)
    assert gradcheck(fn, [x])
    assert gradgradcheck(fn, [x])


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_keeps_float32(name):
    fn, ref, gen = UNARY[name]
    x = gpgan.Variable(gen(np.random.default_rng(0), (5,)).astype(np.float32), requires_grad=True)
    y = fn(x)
    assert y.dtype == np.float32
    y.backward(np.ones(5, dtype=np.float32))
    assert x.grad.dtype == np.float32


# -- binary ops with broadcasting ------------------------------------------------------------------
BINARY = {
    "maximum": (F.maximum, np.maximum),
    "minimum": (F.minimum, np.minimum),
    "add": (F.add, np.add),
    "mul": (F.mul, np.multiply),
    "div": (lambda a, b: F.div(a, b * b + 1.0), lambda a, b: a / (b * b + 1.0)),
    "sub": (F.sub, np.subtract),
    # tensor exponent with a positive base: a Variable base and a Variable exponent, broadcast
    "pow": (lambda a, b: F.pow(a * a + 0.5, b), lambda a, b: (a * a + 0.5) ** b),
}


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((3, 4), (4,)), ((2, 1, 3), (4, 1))])
def test_binary_broadcasting_values_and_derivatives(name, shapes):
    fn, ref = BINARY[name]
    rng = np.random.default_rng(7)
    while True:  # keep maximum/minimum away from ties, where they are not differentiable
        a, b = rng.standard_normal(shapes[0]), rng.standard_normal(shapes[1])
        if np.abs(a - b).min() > 0.05:
            break
    np.testing.assert_allclose(fn(gpgan.Variable(a), gpgan.Variable(b)).data, ref(a, b), rtol=1e-13)
    assert gradcheck(fn, [a, b])
    assert gradgradcheck(fn, [a, b])


def test_maximum_minimum_ties_send_the_gradient_to_the_first_input():
    a = gpgan.Variable(np.array([1.0, 2.0, 3.0]), requires_grad=True)
    b = gpgan.Variable(np.array([1.0, 5.0, 3.0]), requires_grad=True)
    for fn, first, second in [(F.maximum, [1, 0, 1], [0, 1, 0]), (F.minimum, [1, 1, 1], [0, 0, 0])]:
        ga, gb = gpgan.grad(fn(a, b), [a, b], grad_outputs=np.ones(3))
        np.testing.assert_array_equal(ga.data, first)
        np.testing.assert_array_equal(gb.data, second)


def test_maximum_with_a_number_and_kink_conventions():
    x = gpgan.Variable(np.array([-1.0, 0.0, 2.0]), requires_grad=True)
    g, = gpgan.grad(F.maximum(x, 0.0), x, grad_outputs=np.ones(3))
    np.testing.assert_array_equal(g.data, [0, 1, 1])  # the tie at 0 goes to x (first input)
    g, = gpgan.grad(F.relu(x), x, grad_outputs=np.ones(3))
    np.testing.assert_array_equal(g.data, [0, 0, 1])
    g, = gpgan.grad(F.abs(x), x, grad_outputs=np.ones(3))
    np.testing.assert_array_equal(g.data, [-1, 0, 1])
    g, = gpgan.grad(F.clip(x, -1.0, 2.0), x, grad_outputs=np.ones(3))
    np.testing.assert_array_equal(g.data, [1, 1, 1])  # bounds are inclusive


# -- where and clip with tensor bounds --------------------------------------------------------------
def test_where_values_and_derivatives_with_broadcasting():
    rng = np.random.default_rng(3)
    cond = rng.random((3, 4)) > 0.5
    x, y = rng.standard_normal((3, 4)), rng.standard_normal((4,))
    np.testing.assert_allclose(F.where(cond, gpgan.Variable(x), gpgan.Variable(y)).data, np.where(cond, x, y))
    fn = lambda a, b: F.where(cond, a, b)  # noqa: E731
    assert gradcheck(fn, [x, y])
    assert gradgradcheck(fn, [x, y])
    # condition broadcast against the values, given as a Variable
    cond_row = gpgan.Variable(np.array([True, False, True, False]))
    fn2 = lambda a, b: F.where(cond_row, a, b) * a  # noqa: E731
    assert gradgradcheck(fn2, [x, rng.standard_normal((3, 1))])


def test_where_with_a_number_and_bad_condition():
    x = gpgan.Variable(np.array([1.0, -2.0]), requires_grad=True)
    y = F.where(x.data > 0, x, 0.0)
    np.testing.assert_array_equal(y.data, [1.0, 0.0])
    with pytest.raises(TypeError, match="where: condition must be a boolean"):
        F.where(x.data, x, 0.0)
    with pytest.raises(ValueError, match="where: condition of shape"):
        F.where(np.ones(3, dtype=bool), x, x)


def test_clip_with_variable_bounds_sends_gradient_to_the_bounds():
    rng = np.random.default_rng(4)
    x = away_from(rng, (3, 4))
    lo, hi = np.full((4,), -0.5) + 0.03 * np.arange(4), np.full((3, 1), 0.8)
    assert gradgradcheck(lambda a, l, h: F.clip(a, l, h), [x, lo, hi])
    with pytest.raises(ValueError, match="clip: at least one"):
        F.clip(gpgan.Variable(x))


def test_backward_of_relu_family_is_differentiable_in_the_incoming_gradient():
    # d/dgy of (gy * mask) is mask: the R1-style penalty needs this path to reach gy's inputs.
    x = gpgan.Variable(np.array([-1.0, 0.5, 2.0]), requires_grad=True)
    w = gpgan.Variable(np.array([0.3, -0.7, 1.1]), requires_grad=True)
    for fn, slope in [(F.relu, 0.0), (lambda v: F.leaky_relu(v, 0.1), 0.1),
                      (lambda v: F.clip(v, -0.5, 1.0), None), (F.abs, None)]:
        y = fn(x * w)  # gy for fn is w (through the mul's backward)
        g, = gpgan.grad(F.sum(y), x, create_graph=True)
        gw, = gpgan.grad(F.sum(g * g), w)
        # g = w * fn'(x w), so sum(g^2) = sum(w^2 fn'^2) and d/dw = 2 w fn'^2 (fn' piecewise const)
        z = x.data * w.data
        if slope is not None:
            d = np.where(z > 0, 1.0, slope)
        elif fn is F.abs:
            d = np.sign(z)
        else:
            d = ((z >= -0.5) & (z <= 1.0)).astype(float)
        np.testing.assert_allclose(gw.data, 2 * w.data * d * d, rtol=1e-12)


# -- stability at large |x| -------------------------------------------------------------------------
LARGE = np.array([-1000.0, -745.0, -700.0, -100.0, -40.0, -20.5, -5.0, 0.0, 5.0, 19.5, 20.5, 40.0, 100.0,
                  700.0, 1000.0])


def _grad_of(fn, x):
    v = gpgan.Variable(x, requires_grad=True)
    return fn(v).data, gpgan.grad(fn(v), v, grad_outputs=np.ones_like(x))[0].data


def test_sigmoid_softplus_log_sigmoid_are_stable_and_exact_for_large_inputs():
    x = LARGE
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        s, ds = _grad_of(F.sigmoid, x)
        sp, dsp = _grad_of(F.softplus, x)
        ls, dls = _grad_of(F.log_sigmoid, x)
        t, dt = _grad_of(F.tanh, x)
    sig = sigmoid_ref(x)
    sig_neg = sigmoid_ref(-x)
    np.testing.assert_allclose(s, sig, rtol=1e-14, atol=0)
    # sigmoid' = y (1 - y) from the retained output: relatively exact for x <= 0, and for x > 0 the
    # cancellation in 1 - y costs at most one float64 ulp of 1 in absolute terms.
    np.testing.assert_allclose(ds[x <= 0], (sig * sig_neg)[x <= 0], rtol=1e-12, atol=0)
    np.testing.assert_allclose(ds, sig * sig_neg, rtol=1e-12, atol=2.3e-16)
    # softplus switches to the identity above threshold=20, as PyTorch (error < exp(-20))
    ref_sp = np.where(x > 20, x, softplus_ref(x))
    np.testing.assert_allclose(sp, ref_sp, rtol=1e-14, atol=0)  # exact even at x = -700 (value ~1e-304)
    np.testing.assert_allclose(dsp, np.where(x > 20, 1.0, sig), rtol=1e-14, atol=0)
    np.testing.assert_allclose(ls, -softplus_ref(-x), rtol=1e-14, atol=0)
    np.testing.assert_allclose(dls, sig_neg, rtol=1e-14, atol=0)
    assert np.isfinite([s, ds, sp, dsp, ls, dls, t, dt]).all()
    np.testing.assert_allclose(t, np.tanh(x), rtol=1e-14)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(), (7, 3)])
@pytest.mark.parametrize("beta,threshold", [(1.0, 20.0), (2.0, 5.0)])
def test_softplus_first_order_gradient_is_the_recorded_one(beta, threshold, shape, dtype, rng):
    # Without a graph being recorded softplus's backward runs on arrays; recorded, it builds
    # nodes (for a penalty on it): the same operations, so the same bits, on both sides of the
    # threshold, for a 0-d input too.
    x = (rng.standard_normal(shape) * 8).astype(dtype)
    gy = rng.standard_normal(shape).astype(dtype)

    def first_order(create_graph):
        v = gpgan.Variable(x, requires_grad=True)
        g, = gpgan.grad(F.softplus(v, beta=beta, threshold=threshold), v, grad_outputs=gy,
                        create_graph=create_graph)
        return g.data

    arrays, recorded = first_order(False), first_order(True)
    assert isinstance(arrays, np.ndarray) and arrays.dtype == dtype and arrays.shape == shape
    np.testing.assert_array_equal(arrays, recorded)
    z = beta * x.astype(np.float64)
    np.testing.assert_allclose(arrays, gy * np.where(z > threshold, 1.0, sigmoid_ref(z)),
                               rtol=1e-6 if dtype == np.float32 else 1e-14)


@pytest.mark.parametrize("fn", [F.sigmoid, F.softplus, F.log_sigmoid, F.tanh, F.elu])
def test_second_derivatives_at_large_inputs_do_not_overflow(fn):
    x = np.array([-800.0, -60.0, 60.0, 800.0])
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        v = gpgan.Variable(x, requires_grad=True)
        g, = gpgan.grad(fn(v), v, grad_outputs=np.ones(4), create_graph=True)
        gg, = gpgan.grad(g, v, grad_outputs=np.ones(4), allow_unused=True)
    assert np.isfinite(g.data).all()
    assert gg is None or np.isfinite(gg.data).all()


def test_softmax_is_stable_for_large_logits():
    x = np.array([[1000.0, 1000.0, -1000.0], [-800.0, 0.0, 800.0]])
    with np.errstate(over="raise", invalid="raise"):
        s = F.softmax(gpgan.Variable(x)).data
        ls = F.log_softmax(gpgan.Variable(x)).data
    np.testing.assert_allclose(s, [[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]], atol=1e-300)
    np.testing.assert_allclose(ls, [[-np.log(2), -np.log(2), -2000 - np.log(2)], [-1600.0, -800.0, 0.0]],
                               rtol=1e-14)


# -- softmax / log_softmax along any dim ------------------------------------------------------------
def _softmax_ref(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_softmax_and_log_softmax_values_and_derivatives(dim):
    rng = np.random.default_rng(dim + 10)
    x = rng.standard_normal((2, 3, 4)) * 2
    np.testing.assert_allclose(F.softmax(gpgan.Variable(x), dim=dim).data, _softmax_ref(x, dim), rtol=1e-13)
    np.testing.assert_allclose(F.log_softmax(gpgan.Variable(x), dim=dim).data, np.log(_softmax_ref(x, dim)),
                               rtol=1e-12)
    for fn in (lambda v: F.softmax(v, dim=dim), lambda v: F.log_softmax(v, dim=dim)):
        assert gradcheck(fn, [x])
        assert gradgradcheck(fn, [x])


def test_softmax_bad_dim_names_the_function():
    with pytest.raises(ValueError, match="softmax: dim 2 is out of range"):
        F.softmax(gpgan.Variable(np.ones((2, 2))), dim=2)


def test_activation_backward_uses_retained_outputs_not_inputs():
    # Memory: sigmoid/tanh/relu/softmax keep only their output for the backward.
    for fn in (F.sigmoid, F.tanh, F.relu, F.softmax, F.log_softmax, F.elu, lambda v: F.leaky_relu(v, 0.2)):
        x = gpgan.Variable(np.ones((2, 3)), requires_grad=True)
        node = fn(x).creator
        assert node._retain_in is None and node._retain_out == (0,)


def test_third_derivative_of_sigmoid_and_tanh_match_closed_forms():
    x = gpgan.Variable(np.linspace(-3, 3, 7), requires_grad=True)
    s = sigmoid_ref(x.data)
    t = np.tanh(x.data)
    for fn, third in [(F.sigmoid, s * (1 - s) * (1 - 6 * s + 6 * s * s)), (F.tanh, -2 * (1 - t * t) * (1 - 3 * t * t))]:
        y = fn(x)
        for _ in range(3):
            y, = gpgan.grad(y, x, grad_outputs=np.ones(7), create_graph=True)
        np.testing.assert_allclose(y.data, third, rtol=1e-10, atol=1e-14)
