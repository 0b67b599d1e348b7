"""Seeded samplers of 2-D toy distributions: a ring of 8 Gaussians, a 5x5 grid of 25 Gaussians
and a Swiss roll.

Two scalings:

* ``"pacgan"`` (default), the mode-collapse benchmark of VEEGAN (Srivastava et al. 2017) as
  specified by PacGAN (Lin et al. 2018), so mode counts sit beside PacGAN's published table:
  ring8 has its 8 means on the unit circle at angles ``2 pi k / 8`` with standard deviation 0.01;
  grid25 has its means at ``{-4, -2, 0, 2, 4}^2`` with standard deviation 0.05.
* ``"wgan_gp"``, the toy data of Gulrajani et al. 2017 (WGAN-GP's ``gan_toy.py``): the 8
  Gaussians sit at radius 2 with standard deviation 0.02 and everything is divided by 1.414; the
  25 Gaussians sit on ``{-2..2} * 2`` with standard deviation 0.05 and everything is divided by
  2.828.

Swiss roll (our own formula, the usual 3-D Swiss roll seen from above): ``t = 1.5 pi (1 + 2u)``
with ``u ~ U(0, 1)``, point ``(t cos t, t sin t) + 0.25 * N(0, I)``, divided by 7.5 (the WGAN-GP
toy normalisation, which took the x/z coordinates of scikit-learn's ``make_swiss_roll`` with
noise 0.25). PacGAN has no Swiss roll, so both scalings give this one. It has no modes:
``.means`` is None and ``.std`` is the noise level 0.25 / 7.5.

Every sampler draws from the NumPy Generator passed as ``rng`` (or gpgan's global generator),
returns float32 arrays of shape (n, 2), and picks each sample's mode uniformly at random.

:data:`TOY_OPTIONS` declares the keyword options of :func:`make_toy` each data set takes (type,
default, accepted values): what the config's ``data.options`` is checked against.
"""
import math

import numpy

from gpgan.backend import get_rng
from gpgan.schema import Field

TOY_DATASETS = ("ring8", "grid25", "swiss_roll")
SCALES = ("pacgan", "wgan_gp")
_SCALE = Field("str", SCALES[0], "the scaling: pacgan (VEEGAN's and PacGAN's benchmark) or wgan_gp (WGAN-GP's "
               "gan_toy.py); swiss_roll is the same in both", choices=SCALES)
#: {data set: {option of make_toy: Field}}
TOY_OPTIONS = {name: {"scale": _SCALE} for name in TOY_DATASETS}


class GaussianMixture2D:
    """An equal-weight mixture of isotropic 2-D Gaussians.

    Attributes:
        name: the dataset name.
        means: float64 array (K, 2) of the mode centres.
        std: the standard deviation of every component (a float).
    """

    def __init__(self, name, means, std):
        self.name = name
        self.means = numpy.asarray(means, dtype=numpy.float64)
        self.std = float(std)

    def sample(self, n, rng=None):
        """``n`` samples as a float32 array (n, 2)."""
        rng = get_rng(rng)
        modes = rng.integers(len(self.means), size=int(n))
        points = self.means[modes] + self.std * rng.standard_normal((int(n), 2))
        return points.astype(numpy.float32)

    def __repr__(self):
        return f"GaussianMixture2D({self.name!r}, modes={len(self.means)}, std={self.std:g})"


class SwissRoll2D:
    """The 2-D Swiss roll described in the module docstring (``.means`` is None)."""

    means = None

    def __init__(self, name="swiss_roll", noise=0.25, divisor=7.5):
        self.name = name
        self.noise = float(noise)
        self.divisor = float(divisor)
        self.std = self.noise / self.divisor

    def sample(self, n, rng=None):
        """``n`` samples as a float32 array (n, 2)."""
        rng = get_rng(rng)
        t = 1.5 * math.pi * (1.0 + 2.0 * rng.random(int(n)))
        points = numpy.stack([t * numpy.cos(t), t * numpy.sin(t)], axis=1)
        points += self.noise * rng.standard_normal((int(n), 2))
        return (points / self.divisor).astype(numpy.float32)

    def __repr__(self):
        return f"SwissRoll2D(noise={self.noise:g}, divisor={self.divisor:g})"


def _ring_means(radius):
    angles = 2.0 * math.pi * numpy.arange(8) / 8
    return radius * numpy.stack([numpy.cos(angles), numpy.sin(angles)], axis=1)


def _grid_means(spacing):
    ticks = spacing * numpy.arange(-2, 3, dtype=numpy.float64)
    xs, ys = numpy.meshgrid(ticks, ticks, indexing="ij")
    return numpy.stack([xs.ravel(), ys.ravel()], axis=1)


def make_toy(name, scale=SCALES[0]):
    """The toy dataset ``name`` (one of :data:`TOY_DATASETS`) at ``scale`` (one of :data:`SCALES`).

    Returns an object with ``sample(n, rng=None) -> float32 (n, 2)``, ``.means`` ((K, 2) or None)
    and ``.std``.
    """
    if scale not in SCALES:
        raise ValueError(f"make_toy: unknown scale {scale!r}; accepted: {', '.join(SCALES)}")
    if name == "ring8":
        if scale == "pacgan":
            return GaussianMixture2D(name, _ring_means(1.0), 0.01)
        return GaussianMixture2D(name, _ring_means(2.0) / 1.414, 0.02 / 1.414)
    if name == "grid25":
        if scale == "pacgan":
            return GaussianMixture2D(name, _grid_means(2.0), 0.05)
        return GaussianMixture2D(name, _grid_means(2.0) / 2.828, 0.05 / 2.828)
    if name == "swiss_roll":
        return SwissRoll2D(name)
    raise ValueError(f"make_toy: unknown toy dataset {name!r}; accepted: {', '.join(TOY_DATASETS)}")
