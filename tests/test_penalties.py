"""Gradient penalties against closed forms (value) and finite differences (weight gradient)."""
import inspect
import math

import numpy as np
import pytest

import gpgan
import gpgan.functions as F
from gpgan import Variable
from gpgan.losses import PENALTIES, gradient_norm, make_penalty
from gpgan.losses.penalties import penalty_options

N, D, H = 6, 2, 5


class TinyCritic:
    """D(x) = tanh(x W1^T + b1) w2^T + b2 in float64, parameters as gpgan Variables."""

    def __init__(self, rng, scale=1.0):
        self.w1 = Variable(scale * rng.standard_normal((H, D)), requires_grad=True)
        self.b1 = Variable(0.3 * rng.standard_normal(H), requires_grad=True)
        self.w2 = Variable(scale * rng.standard_normal((1, H)), requires_grad=True)
        self.b2 = Variable(0.3 * rng.standard_normal(1), requires_grad=True)
        self.params = [self.w1, self.b1, self.w2, self.b2]

    def __call__(self, x):
        return F.linear(F.tanh(F.linear(x, self.w1, self.b1)), self.w2, self.b2)

    def input_gradient_numpy(self, x):
        """Closed form: dD/dx = (w2 * (1 - h^2)) W1, h = tanh(x W1^T + b1)."""
        h = np.tanh(x @ self.w1.data.T + self.b1.data)
        return (self.w2.data * (1.0 - h ** 2)) @ self.w1.data


def reference_points(name, real, fake, seed):
    """The documented points, drawn independently with the same generator and order of draws."""
    rng = np.random.default_rng(seed)
    if name == "r1":
        return real
    if name == "r2":
        return fake
    if name == "dragan":
        noise = rng.random(real.shape)
        perturbed = real + 0.5 * real.std() * noise
        alpha = rng.random((len(real), 1))
        return real + alpha * (perturbed - real)
    eps = rng.random((len(real), 1))
    return eps * real + (1 - eps) * fake


def reference_value(name, critic, real, fake, seed, weight, center=None, interval=1):
    if name == "r1r2":  # R3GAN's gamma / 2 * (R1 + R2): the sum of the two zero-centred means
        norms = [np.sqrt((critic.input_gradient_numpy(x) ** 2).sum(axis=1)) for x in (real, fake)]
        return 0.5 * weight * interval * (np.mean(norms[0] ** 2) + np.mean(norms[1] ** 2)), np.concatenate(norms)
    g = critic.input_gradient_numpy(reference_points(name, real, fake, seed))
    norm = np.sqrt((g ** 2).sum(axis=1))
    if name in ("r1", "r2", "zero_gp"):
        c = 0.0 if center is None else center
        return 0.5 * weight * interval * np.mean((norm - c) ** 2), norm
    c = 1.0 if center is None else center
    gap = np.maximum(norm - c, 0.0) if name == "lp" else norm - c
    return weight * interval * np.mean(gap ** 2), norm


def make_data(seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((N, D)), 0.5 * rng.standard_normal((N, D)) + 1.0


GP_NAMES = [n for n in PENALTIES if n != "none"]


@pytest.mark.parametrize("name", GP_NAMES)
def test_value_and_weight_gradient_match_references(name):
    real, fake = make_data()
    critic = TinyCritic(np.random.default_rng(1), scale=1.6)
    weight, seed = 3.0, 7
    penalty = make_penalty(name, weight=weight)

    value, stats = penalty(critic, real, fake, rng=np.random.default_rng(seed))
    expected, norms = reference_value(name, critic, real, fake, seed, weight)
    assert value.shape == () and value.dtype == np.float64
    np.testing.assert_allclose(value.item(), expected, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(stats["grad_norm"], norms.mean(), rtol=1e-9)
    if name == "lp":  # the one-sided case must exercise both sides of the kink
        assert (norms > 1).any() and (norms < 1).any()

    value.backward()
    # b2 does not change dD/dx, so it gets no gradient at all (None): its derivative is 0.
    analytic = [np.zeros_like(p.data) if p.grad is None else p.grad.data.copy() for p in critic.params]
    assert critic.b2.grad is None

    def penalty_value():
        v, _ = penalty(critic, real, fake, rng=np.random.default_rng(seed))
        return v.item()

    step = 1e-6
    for p, got in zip(critic.params, analytic):
        numeric = np.zeros_like(p.data)
        flat = p.data.reshape(-1)
        for j in range(flat.size):
            orig = flat[j]
            flat[j] = orig + step
            plus = penalty_value()
            flat[j] = orig - step
            minus = penalty_value()
            flat[j] = orig
            numeric.reshape(-1)[j] = (plus - minus) / (2 * step)
        np.testing.assert_allclose(got, numeric, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name", ["r1", "r2"])
def test_shared_forward_gives_the_same_value_and_weight_gradient(name):
    """R1/R2 through the critic loss's own forward (``forward=(x, D(x))``) against the penalty's
    separate forward: the same value, and the same weight gradient of ``loss + penalty``. The
    tanh critic makes the shared forward's nodes get gradient from both terms."""
    real, fake = make_data(5)
    critic = TinyCritic(np.random.default_rng(6), scale=1.3)
    penalty = make_penalty(name, weight=4.0)
    assert penalty.shared_points == {"r1": "real", "r2": "fake"}[name]

    def total_and_gradients(shared):
        x_real = Variable(real, requires_grad=shared and name == "r1")
        x_fake = Variable(fake, requires_grad=shared and name == "r2")
        d_real, d_fake = critic(x_real), critic(x_fake)
        loss = F.mean(F.softplus(-d_real)) + F.mean(F.softplus(d_fake))
        forward = {"r1": (x_real, d_real), "r2": (x_fake, d_fake)}[name] if shared else None
        value, _ = penalty(critic, x_real, x_fake, rng=np.random.default_rng(0), forward=forward)
        grads = gpgan.grad(loss + value, critic.params)
        return value.item(), [g.data for g in grads]

    value_shared, grads_shared = total_and_gradients(True)
    value_alone, grads_alone = total_and_gradients(False)
    expected, _ = reference_value(name, critic, real, fake, 0, 4.0)
    np.testing.assert_allclose(value_shared, expected, rtol=1e-12)
    assert value_shared == value_alone
    for a, b in zip(grads_shared, grads_alone):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def test_r1r2_is_r1_plus_r2_and_shares_both_forwards():
    """r1r2 equals r1 + r2 at the same weight; through the critic loss's own forwards at both
    points (``forward=((x_r, D(x_r)), (x_f, D(x_f)))``) it gives the same value and the same weight
    gradient of ``loss + penalty`` as with forwards of its own."""
    real, fake = make_data(8)
    critic = TinyCritic(np.random.default_rng(9), scale=1.3)
    penalty = make_penalty("r1r2", weight=0.7, interval=2)
    assert penalty.shared_points == "real+fake"
    parts = [make_penalty(n, weight=0.7, interval=2)(critic, real, fake)[0].item() for n in ("r1", "r2")]
    np.testing.assert_allclose(penalty(critic, real, fake)[0].item(), sum(parts), rtol=1e-12)

    def total_and_gradients(shared):
        x_real, x_fake = Variable(real, requires_grad=shared), Variable(fake, requires_grad=shared)
        d_real, d_fake = critic(x_real), critic(x_fake)
        loss = F.mean(F.softplus(-(d_real - d_fake)))
        forward = ((x_real, d_real), (x_fake, d_fake)) if shared else None
        value, stats = penalty(critic, x_real, x_fake, forward=forward)
        grads = gpgan.grad(loss + value, critic.params)
        return value.item(), stats, [g.data for g in grads]

    value_shared, stats, grads_shared = total_and_gradients(True)
    value_alone, _, grads_alone = total_and_gradients(False)
    expected, norms = reference_value("r1r2", critic, real, fake, 0, 0.7, interval=2)
    np.testing.assert_allclose(value_shared, expected, rtol=1e-12)
    np.testing.assert_allclose(stats["grad_norm"], norms.mean(), rtol=1e-12)
    np.testing.assert_allclose(value_alone, expected, rtol=1e-12)
    for a, b in zip(grads_shared, grads_alone):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", ["wgan_gp", "dragan", "zero_gp", "lp"])
def test_penalties_with_their_own_points_refuse_a_shared_forward(name):
    real, fake = make_data()
    critic = TinyCritic(np.random.default_rng(0))
    x = Variable(real, requires_grad=True)
    penalty = make_penalty(name)
    assert penalty.shared_points is None
    with pytest.raises(ValueError, match=f"penalty {name}: its points .* pass forward=None"):
        penalty(critic, x, fake, forward=(x, critic(x)))


@pytest.mark.parametrize("name", ["wgan_gp", "r1", "lp"])
def test_center_and_lazy_interval_scale_the_value(name):
    real, fake = make_data(3)
    critic = TinyCritic(np.random.default_rng(4))
    penalty = make_penalty(name, weight=2.0, center=0.5, interval=4)
    assert penalty.interval == 4
    value, _ = penalty(critic, real, fake, rng=np.random.default_rng(0))
    expected, _ = reference_value(name, critic, real, fake, 0, 2.0, center=0.5, interval=4)
    np.testing.assert_allclose(value.item(), expected, rtol=1e-9)


@pytest.mark.parametrize("name", GP_NAMES)
def test_zero_input_gradient_stays_finite(name):
    """A critic constant in x: the norm's derivative at g = 0 must be 0, not NaN."""
    real, fake = make_data()
    critic = TinyCritic(np.random.default_rng(2))
    critic.w2.data[...] = 0.0  # dD/dx = 0 everywhere
    value, stats = make_penalty(name, weight=1.0)(critic, real, fake, rng=np.random.default_rng(0))
    value.backward()
    expected = {"wgan_gp": 1.0, "dragan": 1.0}.get(name, 0.0)
    np.testing.assert_allclose(value.item(), expected, atol=1e-5)
    assert stats["grad_norm"] == 0.0
    for p in critic.params:
        assert p.grad is None or np.isfinite(p.grad.data).all()


def test_fake_is_not_differentiated_through():
    real, _ = make_data()
    theta = Variable(np.ones((1, D)), requires_grad=True)  # a "generator" parameter
    fake = theta * Variable(np.random.default_rng(0).standard_normal((N, D)))
    critic = TinyCritic(np.random.default_rng(1))
    for name in ("r2", "wgan_gp"):
        value, _ = make_penalty(name)(critic, real, fake, rng=np.random.default_rng(0))
        value.backward()
        assert theta.grad is None
        assert critic.w1.grad is not None


def test_gradient_norm_matches_closed_form_and_keeps_no_graph():
    real, _ = make_data()
    critic = TinyCritic(np.random.default_rng(5))
    expected = np.sqrt((critic.input_gradient_numpy(real) ** 2).sum(axis=1)).mean()
    got = gradient_norm(critic, Variable(real))
    assert isinstance(got, float)
    np.testing.assert_allclose(got, expected, rtol=1e-10)
    assert all(p.grad is None for p in critic.params)


def test_randomness_comes_from_the_global_generator_when_no_rng():
    real, fake = make_data()
    critic = TinyCritic(np.random.default_rng(5))
    penalty = make_penalty("wgan_gp")
    gpgan.manual_seed(11)
    a = penalty(critic, real, fake)[0].item()
    gpgan.manual_seed(11)
    b = penalty(critic, real, fake)[0].item()
    c = penalty(critic, real, fake)[0].item()
    assert a == b and a != c


def test_none_and_errors():
    real, fake = make_data()
    assert set(PENALTIES) == {"none", "wgan_gp", "r1", "r2", "r1r2", "dragan", "zero_gp", "lp"}
    value, stats = make_penalty("none")(TinyCritic(np.random.default_rng(0)), real, fake)
    assert value.item() == 0.0 and math.isnan(stats["grad_norm"])
    with pytest.raises(ValueError, match="unknown penalty 'r3'.*accepted"):
        make_penalty("r3")
    with pytest.raises(ValueError, match="interval"):
        make_penalty("r1", interval=0)
    with pytest.raises(ValueError, match="r1r2: only the zero centre"):
        make_penalty("r1r2", center=1.0)
    with pytest.raises(ValueError, match="wgan_gp.*shape"):
        make_penalty("wgan_gp")(TinyCritic(np.random.default_rng(0)), real, fake[:3])


def test_make_penalty_checks_the_options_each_penalty_declares():
    # Each penalty's options are declared with their types and ranges; make_penalty names the one
    # that is wrong and what is accepted, in one line without Python's own wording.
    cases = [
        ("r1", {"foo": 1}, "make_penalty('r1'): foo: not an option of penalty 'r1'; accepted: norm_eps"),
        ("wgan_gp", {"noise_scale": 0.5},
         "make_penalty('wgan_gp'): noise_scale: not an option of penalty 'wgan_gp'; accepted: norm_eps"),
        ("dragan", {"noise_scale": "abc"},
         "make_penalty('dragan'): noise_scale: got 'abc' (not a number); accepted: a number >= 0"),
        ("dragan", {"noise_scale": -1}, "make_penalty('dragan'): noise_scale: got -1 (out of range); accepted: "
                                        "a number >= 0"),
        ("dragan", {"interpolate": "maybe"},
         "make_penalty('dragan'): interpolate: got 'maybe' (a string, not a boolean); accepted: true or false"),
        ("lp", {"norm_eps": "abc"}, "make_penalty('lp'): norm_eps: got 'abc' (not a number); accepted: a number > 0"),
        ("none", {"foo": 1}, "make_penalty('none'): options: penalty 'none' takes no options; got foo"),
        ("r1r2", {"norm_eps": 1e-8}, "make_penalty('r1r2'): options: penalty 'r1r2' takes no options; got norm_eps"),
    ]
    for name, options, message in cases:
        with pytest.raises(ValueError) as info:
            make_penalty(name, **options)
        assert str(info.value) == message
    dragan = make_penalty("dragan", noise_scale="1e-2", interpolate=False, norm_eps=1e-10)
    assert (dragan.noise_scale, dragan.interpolate, dragan.norm_eps) == (0.01, False, 1e-10)
    assert make_penalty("lp", norm_eps="1e-8").norm_eps == 1e-8 and make_penalty("lp").one_sided


@pytest.mark.parametrize("name", PENALTIES)
def test_declared_options_are_the_constructors_keywords_with_its_defaults(name):
    options = penalty_options()[name]
    cls = type(make_penalty(name))
    params = inspect.signature(cls.__init__).parameters
    assert set(options) <= set(params) - {"self", "weight", "center", "interval"}
    for key, field in options.items():
        assert field.doc and params[key].default == field.default, key
        assert getattr(make_penalty(name), key) == field.default, key


def test_float32_stays_float32():
    rng = np.random.default_rng(0)
    real = rng.standard_normal((4, 3, 2, 2)).astype(np.float32)
    fake = rng.standard_normal((4, 3, 2, 2)).astype(np.float32)
    w = Variable(rng.standard_normal((1, 12)).astype(np.float32), requires_grad=True)

    def critic(x):  # image-shaped input, quadratic so the gradient depends on x
        flat = F.reshape(x, (x.shape[0], 12))
        return F.linear(flat * flat, w)

    for name in GP_NAMES:
        value, _ = make_penalty(name)(critic, real, fake, rng=rng)
        assert value.dtype == np.float32
