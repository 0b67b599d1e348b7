"""Gradient penalties on the critic's input gradient, selectable by name.

A penalty evaluates the critic at some points ``x`` (real samples, generated samples, random
interpolates or perturbed real samples), takes the input gradient
``g = grad(D(x).sum(), x, create_graph=True)`` (only the image gradient: the engine skips weight
gradients), and returns a scalar Variable that is differentiable with respect to the critic's
weights (a double backward). R1 and R2 take their points from the critic loss (real or fake
samples), so a caller that has the critic's output there passes that forward
(:attr:`GradientPenalty.shared_points`, ``evaluate(..., forward=(x, D(x)))``) and the penalty
differentiates through it instead of running the critic again, as the training step does.

==========  =============================================  ======  =========  =========================
name        points                                         centre  form       reference
==========  =============================================  ======  =========  =========================
wgan_gp     eps * real + (1 - eps) * fake, eps ~ U(0,1)    1       two-sided  Gulrajani et al. 2017
r1          real                                           0       gamma / 2  Mescheder et al. 2018
r2          fake                                           0       gamma / 2  Mescheder et al. 2018
r1r2        real and fake (both terms, summed)             0       gamma / 2  Huang et al. 2024 (R3GAN)
dragan      real perturbed by noise (below)                1       two-sided  Kodali et al. 2017
zero_gp     eps * real + (1 - eps) * fake                  0       gamma / 2  Thanh-Tung et al. 2019
lp          eps * real + (1 - eps) * fake                  1       one-sided  Petzka et al. 2018
==========  =============================================  ======  =========  =========================

Values, with ``w`` the weight, ``c`` the centre and ``k`` the lazy-regularization interval:

* one-centred (wgan_gp, dragan): ``w * k * E[(||g|| - c)^2]``;
* one-sided (lp): ``w * k * E[max(0, ||g|| - c)^2]``;
* zero-centred (r1, r2, zero_gp): ``w / 2 * k * E[||g||^2]``; r1r2 is the sum of r1's and r2's,
  ``w / 2 * k * (E[||g_real||^2] + E[||g_fake||^2])``, as R3GAN's ``Gamma / 2 * (R1 + R2)``. The ``gamma / 2`` convention is that
  of R1 in StyleGAN2 and R3GAN. GAN_stability (Mescheder et al.'s code) computes
  ``reg_param * E[||g||^2]`` without the 1/2, so its ``reg_param = 10`` is our ``weight = 20``.
  Thanh-Tung et al.'s lambda likewise equals our ``weight / 2``.

The norm: with centre 0 (and not one-sided) the squared norm ``sum(g^2)`` is used directly, with
no square root, so it is smooth everywhere. Otherwise ``||g|| = sqrt(sum(g^2) + 1e-12)``
(``norm_eps``): finite at ``g = 0``, and its derivative ``g / ||g||`` is 0 there, not NaN. The
bias this adds (at most 1e-6 in the norm) is far below anything the penalties resolve.

DRAGAN's points follow the authors' code (github.com/kodalinaveen3/DRAGAN): perturbed samples
``x_p = x + 0.5 * std(x) * u`` with ``u ~ U(0, 1)`` elementwise and ``std(x)`` the standard
deviation over the whole batch, then ``x_hat = x + alpha * (x_p - x)`` with ``alpha ~ U(0, 1)``
per sample (``noise_scale`` and ``interpolate=False`` change this).

Options: each penalty class declares the keyword options it takes beyond weight, centre and
interval in :attr:`GradientPenalty.options` ({name: :class:`~gpgan.schema.Field`}, with type,
default and bounds): ``norm_eps`` for those that take a norm, DRAGAN's ``noise_scale`` and
``interpolate`` besides; r1r2 (its centre is 0, so no norm is taken) and none take none.
:func:`make_penalty` checks options against them, and the config schema checks
``penalty.options`` against the same declarations (:func:`penalty_options`).

Lazy regularization (Karras et al. 2020, StyleGAN2): with ``interval=k`` the trainer calls the
penalty only on critic steps where ``step % k == 0`` and the returned value is already multiplied
by ``k``, so the penalty's average strength is unchanged. It is added to that step's loss in one
update; StyleGAN2 takes a separate optimizer step for it, with Adam's learning rate and betas
scaled by ``k / (k + 1)``, which moves Adam's statistics a little differently.

Generated samples are never differentiated through here: ``fake`` is detached inside. The
caller passes detached fakes to the critic loss as well (the critic's step must not build a
graph through the generator).

Randomness (``eps``, ``alpha``, DRAGAN's noise) is drawn on the CPU with NumPy by
:meth:`GradientPenalty.draw` and moved to the data's device, so a seed gives the same numbers on
every device. :meth:`GradientPenalty.evaluate` then computes the penalty from those arrays on the
device without reading anything back (a training step calls the two apart: it draws the inputs of
a whole step first); calling a penalty does both, with the ``rng`` argument or the global generator.
"""
import math

import gpgan.functions as F
from gpgan.autograd import Variable, enable_grad, grad, no_grad
from gpgan.backend import device_of, get_array_module, get_rng, to_device
from gpgan.backend.graph import host_effect, host_number
from gpgan.schema import Field, check_options, problems_line

#: the constant inside the norm's square root (every penalty that takes a norm)
NORM_EPS = Field("float", 1e-12, "the constant inside the gradient norm's square root, sqrt(sum g^2 + norm_eps), "
                 "that keeps it differentiable at g = 0; read where the centre is not 0 or the form one-sided",
                 minimum=0, exclusive_min=True)


def _array(x, name):
    """The raw array of a Variable or array, detached from any graph."""
    if isinstance(x, Variable):
        return x.data
    if hasattr(x, "dtype") and hasattr(x, "shape"):
        return x
    raise TypeError(f"penalty: {name} must be a Variable or an array, got {type(x).__name__}")


def _batch_shape(x):
    """(N, 1, 1, ...) so a per-sample number broadcasts over the other axes of ``x``."""
    return (x.shape[0],) + (1,) * (x.ndim - 1)


def input_gradient(critic, x, create_graph=True):
    """``(x_var, g)``: ``g = dD/dx`` at the points ``x`` (array), summed over the batch's outputs.

    ``x_var`` is a fresh leaf Variable made from the detached data. With ``create_graph`` the
    gradient stays in the graph (so a penalty on it reaches the critic's weights).
    """
    x_var = Variable(x, requires_grad=True)
    with enable_grad():
        out = critic(x_var)
    return x_var, _gradient_of_output(x_var, out, create_graph)


def _gradient_of_output(x_var, out, create_graph):
    """``d sum(out) / d x_var``: the critic's input gradient, given its output ``out`` computed
    from the leaf ``x_var``. For a critic without batch statistics each sample's output depends on
    its own input only, so row i is sample i's own gradient."""
    # Output gradients of ones: the gradient of sum(out), without a sum node and its backward's
    # reshape and broadcast (and a broadcast operand in the products that follow).
    ones = get_array_module(out.data).ones_like(out.data)
    with enable_grad():
        g, = grad(out, x_var, grad_outputs=ones, create_graph=create_graph)
    return g


def _squared_norms(g):
    """Per-sample ``sum(g^2)`` over every axis but the first: shape (N,)."""
    return F.sum(g * g, axis=tuple(range(1, g.ndim))) if g.ndim > 1 else g * g


class GradientPenalty:
    """A gradient penalty; call it as ``penalty(critic, real, fake, rng=None)``.

    Args:
        weight: lambda (one-centred, one-sided) or gamma (zero-centred, applied as gamma / 2).
        center: the target gradient norm (0 or 1 by default, see the module table).
        interval: lazy regularization period ``k``; the value is multiplied by ``k``.
        norm_eps: the tiny constant inside the square root of the norm.

    ``options`` declares the keyword options a penalty takes besides weight, center and interval
    (:func:`make_penalty` and the config's ``penalty.options`` are checked against it); its
    Fields' defaults are the constructor's. ``fixed_center``: the one centre a penalty is defined
    for (r1r2: 0), or None for any.

    Returns from a call: ``(value, stats)`` with ``value`` a scalar Variable (already multiplied
    by the weight, the 1/2 of zero-centred penalties and ``interval``) and ``stats`` a dict of
    floats: ``grad_norm`` (mean ||g|| over the points) and ``penalty`` (the unweighted mean term).
    """

    name = None
    points = None          # "real", "fake", "interpolate" or "perturbed_real"
    default_weight = 10.0
    default_center = 1.0
    one_sided = False
    half = False           # the gamma / 2 convention of zero-centred penalties
    fixed_center = None
    options = {"norm_eps": NORM_EPS}

    def __init__(self, weight=None, center=None, interval=1, norm_eps=NORM_EPS.default):
        self.weight = float(self.default_weight if weight is None else weight)
        self.center = float(self.default_center if center is None else center)
        if self.fixed_center is not None and self.center != self.fixed_center:
            fixed = "the zero centre" if self.fixed_center == 0 else f"the centre {self.fixed_center:g}"
            raise ValueError(f"penalty {self.name}: only {fixed} is defined (center {self.fixed_center:g} or null), "
                             f"got {self.center:g}")
        if int(interval) != interval or interval < 1:
            raise ValueError(f"penalty {self.name}: interval must be a positive integer, got {interval!r}")
        self.interval = int(interval)
        self.norm_eps = float(norm_eps)

    @property
    def scale(self):
        """The factor the mean term is multiplied by: weight (/2 when zero-centred) * interval."""
        return self.weight * (0.5 if self.half else 1.0) * self.interval

    def _scaled(self, mean_term):
        """``mean_term * scale``, the scale read as a host number: a schedule may move the weight
        (R3GAN's gamma), and a replayed CUDA graph must read its new value."""
        return mean_term * host_effect(lambda: host_number(self.scale, mean_term.dtype))

    def draw(self, rng, real):
        """The random numbers one evaluation needs, drawn on the CPU with ``rng``: a dict of NumPy
        arrays in ``real``'s dtype, each with the batch as its first axis (so a data-parallel rank
        takes its slice). ``real`` gives the shape and dtype (its values are not read)."""
        if self.points == "interpolate":
            return {"eps": rng.random(_batch_shape(real)).astype(real.dtype, copy=False)}
        return {}

    def sample_points(self, real, fake, draws):
        """The raw array of points where the gradient is taken, from the arrays ``real`` and
        ``fake`` and the output of :meth:`draw` (on their device)."""
        if self.points == "real":
            return real
        if self.points == "fake":
            return fake
        if self.points == "interpolate":
            if real.shape != fake.shape:
                raise ValueError(
                    f"penalty {self.name}: interpolating needs real and fake of one shape, got "
                    f"{real.shape} and {fake.shape}")
            eps = draws["eps"]
            return eps * real + (1 - eps) * fake
        raise NotImplementedError(f"penalty {self.name}: unknown points {self.points!r}")

    def term(self, sq):
        """The per-sample penalty from the per-sample squared norms ``sq`` (N,)."""
        if self.center == 0.0 and not self.one_sided:
            return sq
        gap = (sq + self.norm_eps) ** 0.5 - self.center
        if self.one_sided:
            gap = F.relu(gap)
        return gap * gap

    @property
    def shared_points(self):
        """``"real"``, ``"fake"`` or ``"real+fake"`` when the points are the critic loss's own, so
        a caller that has the critic's output there can pass that forward to :meth:`evaluate` (one
        forward and one backward serve the loss and the penalty, as in GAN_stability and
        StyleGAN2-ADA); None when the points are made here (interpolates, perturbed samples)."""
        return self.points if self.points in ("real", "fake", "real+fake") else None

    def evaluate(self, critic, real, fake, draws, forward=None):
        """``(value, mean_term, sq)``, all on the device, nothing read back: ``value`` the scalar
        penalty (weighted, scaled), ``mean_term`` its unweighted mean term and ``sq`` the (N,)
        squared input-gradient norms. ``draws``: :meth:`draw`'s arrays, on the data's device.

        ``forward``: optionally ``(x, out)``, the critic's output ``out`` at the points
        :attr:`shared_points` names, computed from the leaf Variable ``x`` that requires grad.
        The input gradient is then taken through that graph instead of a second forward; the
        value is the same, and the weights' gradient of ``loss + value`` needs one backward
        through the critic at those points instead of two.
        """
        if forward is not None:
            if self.shared_points is None:
                raise ValueError(f"penalty {self.name}: its points ({self.points}) are made inside the "
                                 "penalty, so no forward of the caller's can be reused; pass forward=None")
            x_var, out = forward
            g = _gradient_of_output(x_var, out, create_graph=True)
        else:
            real = _array(real, "real")
            fake = _array(fake, "fake")
            with no_grad():
                x = self.sample_points(real, fake, draws)
            _, g = input_gradient(critic, x, create_graph=True)
        with enable_grad():
            sq = _squared_norms(g)
            mean_term = F.mean(self.term(sq))
            value = self._scaled(mean_term)
        return value, mean_term, sq

    def __call__(self, critic, real, fake, rng=None, forward=None):
        """``(value, stats)``: the penalty with its random numbers drawn from ``rng`` (default: the
        global generator), and ``stats`` of floats read back: ``grad_norm`` (mean ||g||) and
        ``penalty`` (the unweighted mean term). ``forward``: as in :meth:`evaluate`."""
        real_array = _array(real, "real")
        device = device_of(real_array)
        draws = {k: to_device(v, device) for k, v in self.draw(get_rng(rng), real_array).items()}
        value, mean_term, sq = self.evaluate(critic, real, fake, draws, forward=forward)
        xp = get_array_module(sq.data)
        return value, {"grad_norm": float(xp.sqrt(sq.data).mean()), "penalty": float(mean_term.data)}

    def __repr__(self):
        return (f"{type(self).__name__}(weight={self.weight:g}, center={self.center:g}, "
                f"interval={self.interval})")


class WGANGP(GradientPenalty):
    """``lambda * E[(||grad D(x_hat)|| - 1)^2]`` on random interpolates (Gulrajani et al. 2017)."""

    name, points = "wgan_gp", "interpolate"


class R1(GradientPenalty):
    """``gamma / 2 * E[||grad D(x_real)||^2]`` (Mescheder et al. 2018). GAN_stability's
    ``reg_param`` omits the 1/2: its 10 is our ``weight=20``."""

    name, points, default_center, half = "r1", "real", 0.0, True


class R2(GradientPenalty):
    """``gamma / 2 * E[||grad D(x_fake)||^2]`` on generated samples (Mescheder et al. 2018)."""

    name, points, default_center, half = "r2", "fake", 0.0, True


class R1R2(GradientPenalty):
    """``gamma / 2 * (E[||grad D(x_real)||^2] + E[||grad D(x_fake)||^2])``: R1 and R2 at every
    critic step, as R3GAN (Huang et al. 2024) regularizes its relativistic loss.

    ``evaluate``'s ``forward`` is then a pair of pairs, ``((x_real, D(x_real)), (x_fake,
    D(x_fake)))``; its ``sq`` holds the real points' squared norms, then the fakes' (2N,), and
    its mean term is the sum of the two means.
    """

    name, points, default_center, half = "r1r2", "real+fake", 0.0, True
    fixed_center = 0.0
    options = {}  # the squared norms are used as they are: no norm_eps

    def evaluate(self, critic, real, fake, draws, forward=None):
        if forward is None:
            forward = []
            for points, name in ((real, "real"), (fake, "fake")):
                x_var = Variable(_array(points, name), requires_grad=True)
                with enable_grad():
                    forward.append((x_var, critic(x_var)))
        squares, means = [], []
        for x_var, out in forward:
            g = _gradient_of_output(x_var, out, create_graph=True)
            with enable_grad():
                sq = _squared_norms(g)
                squares.append(sq)
                means.append(F.mean(sq))
        with enable_grad():
            mean_term = means[0] + means[1]
            value = self._scaled(mean_term)
            sq = F.concat(squares, axis=0)
        return value, mean_term, sq


class ZeroGP(GradientPenalty):
    """Zero-centred penalty on interpolates, ``gamma / 2 * E[||grad D(x_hat)||^2]``
    (Thanh-Tung et al. 2019; their lambda is our ``weight / 2``)."""

    name, points, default_center, half = "zero_gp", "interpolate", 0.0, True


class LP(GradientPenalty):
    """One-sided Lipschitz penalty ``lambda * E[max(0, ||grad D(x_hat)|| - 1)^2]`` on interpolates
    (Petzka et al. 2018)."""

    name, points, one_sided = "lp", "interpolate", True


class DRAGAN(GradientPenalty):
    """``lambda * E[(||grad D(x_hat)|| - 1)^2]`` around real samples (Kodali et al. 2017).

    Points as in the authors' code: ``x_p = x + noise_scale * std(x) * U(0, 1)`` (elementwise
    noise, ``std`` over the whole batch), then ``x_hat = x + alpha * (x_p - x)`` with
    ``alpha ~ U(0, 1)`` per sample; ``interpolate=False`` uses ``x_p`` itself.
    """

    name, points = "dragan", "perturbed_real"
    options = {
        **GradientPenalty.options,
        "noise_scale": Field("float", 0.5, "the perturbation's size: x + noise_scale * std(x) * U(0, 1) (the authors' "
                             "0.5; 0 takes the gradient at the real samples)", minimum=0),
        "interpolate": Field("bool", True, "take x + alpha * (perturbed - x), alpha ~ U(0, 1) per sample, as the "
                             "authors' code; false: the perturbed samples themselves"),
    }

    def __init__(self, weight=None, center=None, interval=1, norm_eps=NORM_EPS.default,
                 noise_scale=options["noise_scale"].default, interpolate=options["interpolate"].default):
        super().__init__(weight, center, interval, norm_eps)
        self.noise_scale = float(noise_scale)
        self.interpolate = bool(interpolate)

    def draw(self, rng, real):
        draws = {"noise": rng.random(real.shape).astype(real.dtype, copy=False)}
        if self.interpolate:
            draws["alpha"] = rng.random(_batch_shape(real)).astype(real.dtype, copy=False)
        return draws

    def sample_points(self, real, fake, draws):
        perturbed = real + (self.noise_scale * real.std()).astype(real.dtype) * draws["noise"]
        if not self.interpolate:
            return perturbed
        return real + draws["alpha"] * (perturbed - real)


class NoPenalty:
    """The "none" penalty: a zero of the data's dtype, no gradient computed.

    ``stats["grad_norm"]`` is NaN (not measured); use :func:`gradient_norm` to log it.
    """

    name = "none"
    weight = 0.0
    center = 0.0
    fixed_center = None
    options = {}
    shared_points = None

    def __init__(self, weight=None, center=None, interval=1):
        self.interval = int(interval)

    def draw(self, rng, real):
        return {}

    def evaluate(self, critic, real, fake, draws, forward=None):
        real = _array(real, "real")
        zero = Variable(get_array_module(real).zeros((), dtype=real.dtype))
        return zero, zero, None

    def __call__(self, critic, real, fake, rng=None, forward=None):
        value, _, _ = self.evaluate(critic, real, fake, {})
        return value, {"grad_norm": math.nan, "penalty": 0.0}

    def __repr__(self):
        return "NoPenalty()"


_PENALTY_CLASSES = {cls.name: cls for cls in (NoPenalty, WGANGP, R1, R2, R1R2, DRAGAN, ZeroGP, LP)}
PENALTIES = tuple(_PENALTY_CLASSES)


def penalty_options():
    """``{penalty name: {option name: Field}}``: the keyword options each penalty takes besides
    weight, center and interval (what ``penalty.options`` accepts for each ``penalty.type``)."""
    return {name: cls.options for name, cls in _PENALTY_CLASSES.items()}


def fixed_center(name):
    """The one centre penalty ``name`` is defined for (r1r2: 0), or None where any is."""
    return _PENALTY_CLASSES[name].fixed_center


def make_penalty(name, weight=None, center=None, interval=1, **options):
    """The gradient penalty called ``name`` (one of :data:`PENALTIES`).

    ``weight`` and ``center`` default per penalty (weight 10; centre 1, or 0 for r1/r2/zero_gp);
    ``interval`` is the lazy-regularization period; ``options`` are those the penalty declares
    (:func:`penalty_options`: ``norm_eps``, DRAGAN's ``noise_scale`` and ``interpolate``), checked
    and converted by their Fields: another option, or a value they refuse, is a ValueError naming
    it and what is accepted.
    """
    if name not in _PENALTY_CLASSES:
        raise ValueError(f"make_penalty: unknown penalty {name!r}; accepted: {', '.join(PENALTIES)}")
    cls = _PENALTY_CLASSES[name]
    checked, errors = check_options(cls.options, options, f"penalty {name!r}")
    if errors:
        raise ValueError(f"make_penalty({name!r}): {problems_line(errors)}")
    return cls(weight=weight, center=center, interval=interval, **checked)


def gradient_norm(critic, x):
    """Mean over the batch of ``||dD/dx||`` at the points ``x`` (Variable or array), as a float.

    For logging: no graph is kept and no weight gradient is computed.
    """
    _, g = input_gradient(critic, _array(x, "x"), create_graph=False)
    data = g.data
    xp = get_array_module(data)
    sq = (data.reshape(data.shape[0], -1) ** 2).sum(axis=1) if data.ndim > 1 else data ** 2
    return float(xp.sqrt(sq).mean())
