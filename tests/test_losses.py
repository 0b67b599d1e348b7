"""Adversarial losses against NumPy formulas; their gradients against finite differences."""
import numpy as np
import pytest

from gpgan import Variable
from gpgan.autograd import gradcheck, gradgradcheck
from gpgan.losses import LOSSES, make_loss


def softplus(t):
    return np.logaddexp(0.0, t)


# (critic loss of (real, fake), generator loss of (fake, real)); only rpgan's reads the reals.
REFERENCE = {
    "wgan": (lambda r, f: f.mean() - r.mean(), lambda f, r: -f.mean()),
    "non_saturating": (lambda r, f: softplus(-r).mean() + softplus(f).mean(), lambda f, r: softplus(-f).mean()),
    "hinge": (lambda r, f: np.maximum(0, 1 - r).mean() + np.maximum(0, 1 + f).mean(), lambda f, r: -f.mean()),
    "least_squares": (lambda r, f: 0.5 * ((r - 1) ** 2).mean() + 0.5 * (f ** 2).mean(),
                      lambda f, r: 0.5 * ((f - 1) ** 2).mean()),
    # RpGAN, paired by index: -log sigmoid(D(x_r) - D(x_f)) and -log sigmoid(D(x_f) - D(x_r))
    "rpgan": (lambda r, f: -np.log(1.0 / (1.0 + np.exp(-(r - f)))).mean(),
              lambda f, r: -np.log(1.0 / (1.0 + np.exp(-(f - r)))).mean()),
}


def logits(seed, n=7):
    # Keep hinge's kinks (|t| = 1) away from the finite-difference step.
    t = np.random.default_rng(seed).uniform(-3, 3, (n, 1))
    return np.where(np.abs(np.abs(t) - 1) < 0.05, t + 0.2, t)


def test_names():
    assert set(LOSSES) == {"wgan", "non_saturating", "hinge", "least_squares", "rpgan"}
    with pytest.raises(ValueError, match="unknown loss 'bce'.*accepted: wgan"):
        make_loss("bce")


@pytest.mark.parametrize("name", LOSSES)
def test_values_match_formulas(name):
    loss = make_loss(name)
    real, fake = logits(0), logits(1)
    critic_ref, gen_ref = REFERENCE[name]
    lc = loss.critic_loss(Variable(real), Variable(fake))
    lg = loss.generator_loss(Variable(fake), Variable(real))
    assert lc.shape == () and lg.shape == ()
    np.testing.assert_allclose(lc.item(), critic_ref(real, fake), rtol=1e-12)
    np.testing.assert_allclose(lg.item(), gen_ref(fake, real), rtol=1e-12)
    assert loss.pairs_real == (name == "rpgan")


@pytest.mark.parametrize("name", LOSSES)
def test_gradients(name):
    loss = make_loss(name)
    real, fake = logits(2), logits(3)
    gradcheck(loss.critic_loss, [real, fake])
    gradcheck(loss.generator_loss, [fake, real])
    gradgradcheck(loss.critic_loss, [real, fake])
    gradgradcheck(loss.generator_loss, [fake, real])


def test_non_saturating_is_stable_for_large_logits():
    loss = make_loss("non_saturating")
    big = np.array([[800.0], [-800.0]])
    value = loss.critic_loss(Variable(big), Variable(-big)).item()
    np.testing.assert_allclose(value, 800.0, rtol=1e-12)  # softplus(-800)=0, softplus(800)=800, mean over 2
    assert np.isfinite(loss.generator_loss(Variable(big)).item())


def test_float32_in_float32_out():
    loss = make_loss("hinge")
    r = Variable(np.zeros((3, 1), np.float32), requires_grad=True)
    f = Variable(np.ones((3, 1), np.float32), requires_grad=True)
    value = loss.critic_loss(r, f)
    value.backward()
    assert value.dtype == np.float32 and r.grad.dtype == np.float32


def test_rpgan_closed_form_values_and_pairing():
    """At equal logits both rpgan losses are log 2; the critic's loss depends only on the paired
    differences (so shifting both logits changes nothing); the gradient of the critic's loss with
    respect to D(x_r)_i is -sigmoid(-(D(x_r)_i - D(x_f)_i)) / N; unpaired shapes are refused."""
    loss = make_loss("rpgan")
    same = np.array([[0.3], [-1.2], [2.0]])
    np.testing.assert_allclose(loss.critic_loss(Variable(same), Variable(same)).item(), np.log(2), rtol=1e-14)
    np.testing.assert_allclose(loss.generator_loss(Variable(same), Variable(same)).item(), np.log(2), rtol=1e-14)
    r, f = logits(4), logits(5)
    shifted = loss.critic_loss(Variable(r + 5.0), Variable(f + 5.0)).item()
    np.testing.assert_allclose(shifted, loss.critic_loss(Variable(r), Variable(f)).item(), rtol=1e-12)
    rv = Variable(r, requires_grad=True)
    loss.critic_loss(rv, Variable(f)).backward()
    np.testing.assert_allclose(rv.grad.data, -1.0 / (1.0 + np.exp(r - f)) / len(r), rtol=1e-12)
    big = np.array([[800.0], [-800.0]])
    np.testing.assert_allclose(loss.critic_loss(Variable(big), Variable(-big)).item(), 800.0, rtol=1e-12)
    with pytest.raises(ValueError, match="paired by index"):
        loss.critic_loss(Variable(r), Variable(f[:3]))
    with pytest.raises(ValueError, match="needs real_logits"):
        loss.generator_loss(Variable(f))
