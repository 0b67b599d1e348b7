"""Latent noise for sampling and evaluation (gpgan.train.sampling): the standard normal as one
draw, and BigGAN's truncation trick against the truncated normal's closed-form moments and CDF."""
import math

import numpy as np
import pytest

from gpgan.train.sampling import LATENT_BLOCK, check_truncation, draw_latents, latent_batches


def _truncated_moments(t):
    """E[z^2], E[z^4] of the standard normal restricted to [-t, t]: E[z^k] = (k - 1) E[z^(k-2)]
    - 2 t^(k-1) phi(t) / Z for even k, Z = 2 Phi(t) - 1."""
    phi, mass = math.exp(-t * t / 2) / math.sqrt(2 * math.pi), math.erf(t / math.sqrt(2))
    second = 1 - 2 * t * phi / mass
    return second, 3 * second - 2 * t ** 3 * phi / mass


def _truncated_cdf(x, t):
    mass = math.erf(t / math.sqrt(2))
    return (math.erf(x / math.sqrt(2)) + mass) / (2 * mass)


def test_untruncated_latents_are_one_standard_normal_draw_whatever_the_batches():
    want = np.random.default_rng(5).standard_normal((23, 7))
    np.testing.assert_array_equal(draw_latents(np.random.default_rng(5), 23, 7), want)
    for batch in (1, 4, 23, 100):
        got = list(latent_batches(np.random.default_rng(5), 23, 7, batch))
        assert [len(z) for z in got] == [min(batch, 23 - k) for k in range(0, 23, batch)]
        np.testing.assert_array_equal(np.concatenate(got), want)


# 0.3 and 1.0 take uniform proposals, 2.5 standard normal ones (the switch is at sqrt(pi / 2)).
@pytest.mark.parametrize("t", [0.3, 1.0, 2.5])
def test_truncated_latents_follow_the_truncated_normal(t):
    z = draw_latents(np.random.default_rng(0), 2 * LATENT_BLOCK, 500, t).ravel()  # 1,024,000 components
    assert np.abs(z).max() <= t and len(np.unique(z)) == len(z)  # inside, and no value clipped onto the edge
    second, fourth = _truncated_moments(t)
    n = len(z)
    # Each estimate within 5 standard errors of the closed form (its variance from the moments).
    assert abs(z.mean()) < 5 * math.sqrt(second / n)
    assert abs(np.mean(z ** 2) - second) < 5 * math.sqrt((fourth - second ** 2) / n)
    # The whole distribution: Kolmogorov-Smirnov distance against the closed-form CDF, at 5 times
    # its 1 / sqrt(n) scale (an acceptance of exp(-z^2) instead of exp(-z^2 / 2) at t = 1 is 0.02 off).
    grid = np.linspace(-t, t, 201)
    empirical = np.searchsorted(np.sort(z), grid, side="right") / n
    closed = np.array([_truncated_cdf(x, t) for x in grid])
    assert np.abs(empirical - closed).max() < 5 / math.sqrt(n)


def test_truncated_latents_do_not_depend_on_the_batch_size_or_the_number_of_samples():
    whole = draw_latents(np.random.default_rng(3), 2500, 6, 0.7)
    assert whole.shape == (2500, 6) and whole.dtype == np.float64
    for batch in (1, 7, 1024, 5000):
        np.testing.assert_array_equal(np.concatenate(list(latent_batches(np.random.default_rng(3), 2500, 6, batch,
                                                                         0.7))), whole)
    np.testing.assert_array_equal(draw_latents(np.random.default_rng(3), 10, 6, 0.7), whole[:10])
    assert draw_latents(np.random.default_rng(3), 0, 6, 0.7).shape == (0, 6)
    assert not np.array_equal(draw_latents(np.random.default_rng(4), 10, 6, 0.7), whole[:10])


@pytest.mark.parametrize("value", [0, -1, float("nan"), float("inf"), "x", "1e400"])
def test_a_truncation_that_is_not_a_number_above_zero_is_refused(value):
    with pytest.raises(ValueError, match=r"the truncation must be a number > 0 \(each latent component is drawn "
                                         r"within \[-t, t\]\), got "):
        check_truncation(value)
    assert check_truncation("0.5") == 0.5 and check_truncation(None) is None
