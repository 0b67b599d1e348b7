"""Differentiating through masks: the piecewise-linear functions to second order.

The gradient of relu, leaky_relu, abs, clip, maximum and minimum depends on the input only
through a mask, whose derivative is zero. A penalty on such a gradient must reach the input with
a zero gradient (as PyTorch's relu does), not fail with "not used" (issue 11, item 9); away from
the kinks, the second derivatives of compositions must match finite differences.
"""
import numpy as np
import pytest

import gpgan
import gpgan.functions as F
import gpgan.nn as nn
from gpgan.autograd import gradgradcheck
from helpers import MASKED


@pytest.mark.parametrize("name", sorted(MASKED))
def test_a_penalty_on_the_gradient_reaches_the_inputs_with_zeros(name):
    fn, make = MASKED[name]
    xs = [gpgan.Variable(a, requires_grad=True) for a in make(np.random.default_rng(0))]
    grads = gpgan.grad(F.sum(fn(*xs)), xs, create_graph=True)
    assert all(g.requires_grad for g in grads)  # connected through the masks
    second = gpgan.grad(F.sum(sum(F.sum(g * g) for g in grads)), xs)
    for x, s in zip(xs, second):
        assert s.shape == x.shape and s.dtype == x.dtype
        np.testing.assert_array_equal(s.data, np.zeros_like(x.data))


@pytest.mark.parametrize("name", sorted(MASKED))
def test_second_derivatives_of_compositions_match_finite_differences(name):
    fn, make = MASKED[name]
    inputs = make(np.random.default_rng(1))
    # The mask-only dependence alone (its d/dx is zero) ...
    assert gradgradcheck(fn, inputs)
    # ... and composed with smooth functions on both sides, so the second derivative is nonzero
    # and the masked backward's linearity in the incoming gradient is exercised too.
    assert gradgradcheck(lambda *xs: F.sin(fn(*xs)) * fn(*xs), inputs)


def test_issue_example_leaky_relu_conv_critic_gives_a_zero_input_gradient():
    rng = np.random.default_rng(0)
    D = nn.Sequential(
        nn.Conv2d(3, 4, 3, stride=2, padding=1, rng=rng), nn.LeakyReLU(0.2),
        nn.Conv2d(4, 8, 3, stride=2, padding=1, rng=rng), nn.LeakyReLU(0.2),
        nn.Flatten(), nn.Linear(8 * 2 * 2, 1, rng=rng),
    )
    x = gpgan.Variable(rng.standard_normal((2, 3, 8, 8)).astype(np.float32), requires_grad=True)
    g = gpgan.grad(D(x).sum(), x, create_graph=True)[0]
    gx, = gpgan.grad((g * g).sum(), x, retain_graph=True)
    assert gx.shape == x.shape and gx.dtype == np.float32
    np.testing.assert_array_equal(gx.data, np.zeros(x.shape, np.float32))
    # The weights are reached for real: the R1 gradient, unchanged by the connection to x.
    weights = list(D.parameters())
    grads = gpgan.grad((g * g).sum(), weights, allow_unused=True)
    assert all(gw is not None for gw in grads[:-1]) and grads[-1] is None  # the last bias: unused
    assert np.abs(grads[0].data).max() > 0


def test_third_order_through_a_mask_stays_connected():
    # sin(relu(x))'s gradient cos(relu x) relu'(x); differentiating twice more goes through the
    # mask's own backward (mask_scale of mask_scale), which must keep the link to x.
    x = gpgan.Variable(np.array([-1.5, 0.4, 1.2]), requires_grad=True)
    g, = gpgan.grad(F.sum(F.sin(F.relu(x))), x, create_graph=True)
    gg, = gpgan.grad(F.sum(g), x, create_graph=True)
    ggg, = gpgan.grad(F.sum(gg), x)
    on = x.data > 0
    np.testing.assert_allclose(gg.data, np.where(on, -np.sin(x.data), 0.0), rtol=1e-14)
    np.testing.assert_allclose(ggg.data, np.where(on, -np.cos(x.data), 0.0), rtol=1e-14)


def test_the_structural_link_changes_no_value_bit_for_bit(monkeypatch):
    """The link from a mask node to its masked value (for the zero gradient) must not change the
    order in which real gradients are summed: a WGAN-GP critic step's weight gradients of an MLP
    critic are bitwise those of the same graph built without the link (runs made before the link
    existed resume to the same weights)."""
    import gpgan.functions.activation as factivation
    import gpgan.functions.math as fmath
    from gpgan.losses import make_loss, make_penalty
    from gpgan.models import make_model

    def critic_weight_grads():
        gpgan.manual_seed(3)
        critic = make_model("mlp_critic", width=16, depth=3)
        rng = np.random.default_rng(0)
        real, fake = (rng.standard_normal((32, 2)).astype(np.float32) for _ in range(2))
        penalty, _ = make_penalty("wgan_gp", weight=10)(critic, real, fake, rng=np.random.default_rng(1))
        loss = make_loss("wgan").critic_loss(critic(gpgan.Variable(real)), critic(gpgan.Variable(fake))) + penalty
        return [w.data for w in gpgan.grad(loss, list(critic.parameters()))]

    linked = critic_weight_grads()
    unlinked_scale = fmath.mask_scale

    def unlinked_rectified(gy, ref, slope):  # the same factors as an array, without ref
        dtype = gy.dtype.type
        return unlinked_scale(gy, np.where(ref.data > 0, dtype(1 - slope) + dtype(slope), dtype(slope)))

    monkeypatch.setattr(fmath, "mask_scale", lambda gy, mask, ref=None: unlinked_scale(gy, mask))
    for module in (fmath, factivation):
        monkeypatch.setattr(module, "rectified_scale", unlinked_rectified)
    unlinked = critic_weight_grads()
    assert len(linked) == len(unlinked) == 8
    for a, b in zip(linked, unlinked):
        np.testing.assert_array_equal(a, b)
