"""Adversarial losses against NumPy formulas; their gradients against finite differences."""
import numpy as np
import pytest

from gpgan import Variable
from gpgan.autograd import gradcheck, gradgradcheck
from gpgan.losses import LOSSES, make_loss


def softplus(t):
    return np.logaddexp(0.0, t)


REFERENCE = {
    "wgan": (lambda r, f: f.mean() - r.mean(), lambda f: -f.mean()),
    "non_saturating": (lambda r, f: softplus(-r).mean() + softplus(f).mean(), lambda f: softplus(-f).mean()),
    "hinge": (lambda r, f: np.maximum(0, 1 - r).mean() + np.maximum(0, 1 + f).mean(), lambda f: -f.mean()),
    "least_squares": (lambda r, f: 0.5 * ((r - 1) ** 2).mean() + 0.5 * (f ** 2).mean(),
                      lambda f: 0.5 * ((f - 1) ** 2).mean()),
}


def logits(seed, n=7):
    # Keep hinge's kinks (|t| = 1) away from the finite-difference step.
    t = np.random.default_rng(seed).uniform(-3, 3, (n, 1))
    return np.where(np.abs(np.abs(t) - 1) < 0.05, t + 0.2, t)


def test_names():
    assert set(LOSSES) == {"wgan", "non_saturating", "hinge", "least_squares"}
    with pytest.raises(ValueError, match="unknown loss 'bce'.*accepted: wgan"):
        make_loss("bce")


@pytest.mark.parametrize("name", LOSSES)
def test_values_match_formulas(name):
    loss = make_loss(name)
    real, fake = logits(0), logits(1)
    critic_ref, gen_ref = REFERENCE[name]
    lc = loss.critic_loss(Variable(real), Variable(fake))
    lg = loss.generator_loss(Variable(fake))
    assert lc.shape == () and lg.shape == ()
    np.testing.assert_allclose(lc.item(), critic_ref(real, fake), rtol=1e-12)
    np.testing.assert_allclose(lg.item(), gen_ref(fake), rtol=1e-12)


@pytest.mark.parametrize("name", LOSSES)
def test_gradients(name):
    loss = make_loss(name)
    real, fake = logits(2), logits(3)
    gradcheck(loss.critic_loss, [real, fake])
    gradcheck(loss.generator_loss, [fake])
    gradgradcheck(loss.critic_loss, [real, fake])


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
