"""The seed examples of issue 2: backward vs grad, a gradient penalty through sigmoid against finite
differences, and a Hessian-vector product by double backward against explicit Hessians."""
import numpy as np

import gpgan
import gpgan.functions as F


def np_sigmoid(x):
    return np.exp(-np.logaddexp(0.0, -x))


# 1. ----------------------------------------------------------------------------------------------
def test_sigmoid_backward_equals_grad():
    rng = np.random.default_rng(0)
    x = gpgan.Variable(rng.standard_normal((2, 3)), requires_grad=True)
    gy = rng.standard_normal((2, 3))
    y = F.sigmoid(x)
    g, = gpgan.grad(y, x, grad_outputs=gy, retain_graph=True)
    y.backward(gy)
    np.testing.assert_array_equal(x.grad.data, g.data)
    s = np_sigmoid(x.data)
    np.testing.assert_allclose(g.data, gy * s * (1 - s), rtol=1e-14)
    # and through a scalar sum
    x.grad = None
    F.sum(F.sigmoid(x)).backward()
    g2, = gpgan.grad(F.sum(F.sigmoid(x)), x)
    np.testing.assert_array_equal(x.grad.data, g2.data)


# 2. ----------------------------------------------------------------------------------------------
def _penalty_numpy(x):
    """The same gradient penalty in closed form: g = sigmoid'(x), gp = mean_i (||g_i|| - 1)^2."""
    s = np_sigmoid(x)
    g = s * (1 - s)
    norms = np.sqrt((g * g).reshape(len(x), -1).sum(axis=1))
    return ((norms - 1) ** 2).mean()


def test_gradient_penalty_of_sigmoid_matches_finite_differences():
    rng = np.random.default_rng(1)
    data = rng.standard_normal((16, 3, 32, 32))
    x = gpgan.Variable(data.copy(), requires_grad=True)
    y = F.sigmoid(x)
    g, = gpgan.grad(y, x, grad_outputs=np.ones_like(data), create_graph=True)
    norms = F.sqrt(F.sum(F.square(g), axis=(1, 2, 3)))
    gp = F.mean(F.square(norms - 1.0))
    gp.backward()
    grad = x.grad.data
    np.testing.assert_allclose(gp.item(), _penalty_numpy(data), rtol=1e-13)

    # Closed form over every entry: d gp / dx = 2/N (n_i - 1)/n_i * g * g', g' = s (1 - s)(1 - 2 s).
    s = np_sigmoid(data)
    g_np = s * (1 - s)
    n = np.sqrt((g_np ** 2).sum(axis=(1, 2, 3), keepdims=True))
    closed = 2.0 / len(data) * (n - 1) / n * g_np * g_np * (1 - 2 * s)
    np.testing.assert_allclose(grad, closed, rtol=1e-10, atol=1e-18)

    # Central finite differences on 200 random coordinates...
    eps = 1e-5
    flat = data.reshape(-1)
    picks = rng.choice(flat.size, size=200, replace=False)
    numeric = np.empty(len(picks))
    for k, j in enumerate(picks):
        orig = flat[j]
        flat[j] = orig + eps
        plus = _penalty_numpy(data)
        flat[j] = orig - eps
        minus = _penalty_numpy(data)
        flat[j] = orig
        numeric[k] = (plus - minus) / (2 * eps)
    np.testing.assert_allclose(grad.reshape(-1)[picks], numeric, rtol=1e-5, atol=1e-9)

    # ...and along one random direction through all 49152 coordinates.
    d = rng.standard_normal(data.shape)
    directional = (_penalty_numpy(data + eps * d) - _penalty_numpy(data - eps * d)) / (2 * eps)
    np.testing.assert_allclose((grad * d).sum(), directional, rtol=1e-6)


# 3. ----------------------------------------------------------------------------------------------
SIZES = {"w1": (5, 3), "b1": (5,), "w2": (1, 5), "b2": (1,)}


def _mlp_loss(theta, x):
    """A 3 -> 5 -> 1 tanh MLP whose 26 parameters are slices of the flat vector ``theta``."""
    params, start = {}, 0
    for name, shape in SIZES.items():
        size = int(np.prod(shape))
        params[name] = F.reshape(theta[start:start + size], shape)
        start += size
    h = F.tanh(F.linear(x, params["w1"], params["b1"]))
    return F.sum(F.tanh(F.linear(h, params["w2"], params["b2"])) ** 2)


def _gradient(theta_data, x):
    theta = gpgan.Variable(theta_data, requires_grad=True)
    return gpgan.grad(_mlp_loss(theta, x), theta)[0].data


def test_hessian_vector_product_by_double_backward_matches_explicit_hessians():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 3))
    theta_data = rng.standard_normal(26) * 0.8
    v = rng.standard_normal(26)
    p = theta_data.size

    theta = gpgan.Variable(theta_data, requires_grad=True)
    g, = gpgan.grad(_mlp_loss(theta, x), theta, create_graph=True)
    hvp, = gpgan.grad(F.sum(g * v), theta, retain_graph=True)

    # Hessian column by column with grad-of-grad: column j = d g_j / d theta.
    h_exact = np.empty((p, p))
    for j in range(p):
        col, = gpgan.grad(g[j], theta, retain_graph=True)
        h_exact[:, j] = col.data
    # Hessian column by column from central differences of the (first-order) gradient.
    eps = 1e-6
    h_fd = np.empty((p, p))
    for j in range(p):
        e = np.zeros(p)
        e[j] = eps
        h_fd[:, j] = (_gradient(theta_data + e, x) - _gradient(theta_data - e, x)) / (2 * eps)

    np.testing.assert_allclose(h_exact, h_exact.T, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(h_exact, h_fd, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(hvp.data, h_exact @ v, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(hvp.data, h_fd @ v, rtol=1e-5, atol=1e-6)
    assert np.abs(h_exact).max() > 1e-2  # a genuinely curved loss, not a trivial zero Hessian
