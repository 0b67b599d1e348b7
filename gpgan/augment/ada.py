"""ADA (Karras et al. 2020): stylegan2-ada-pytorch's 'bgc' pipeline with an adaptive probability.

Ops, in the reference's order (``training/augment.py``), each applied to an image with
probability ``p`` (the two rotations with ``1 - sqrt(1 - p)`` each, so that one of them happens
with probability ``p``):

=============  ===============================================================================
geometric      x-flip; rotation by ``90 * U{0..3}`` degrees; integer translation
               ``round(U(-0.125, 0.125) * size)`` per axis; isotropic scaling ``2^N(0, 0.2^2)``;
               rotation ``U(-180, 180)`` degrees; anisotropic scaling ``2^N(0, 0.2^2)`` (x by s,
               y by 1/s); rotation again; fractional translation ``N(0, 0.125^2) * size`` per axis
colour         brightness ``+N(0, 0.2^2)``; contrast ``x 2^N(0, 0.5^2)``; luma flip (a
               Householder reflection of the luma axis, with probability 1/2); hue rotation
               ``U(-180, 180)`` degrees about the luma axis; saturation ``x 2^N(0, 1)``
=============  ===============================================================================

Two probability multipliers (the reference's per-op multipliers, which R3GAN sets away from
'bgc''s): ``color_multiplier`` (default 1) scales the colour ops' probability to
``color_multiplier * p`` (R3GAN: 0.5), and ``cutout_multiplier`` (default 0: off, as 'bgc') adds,
after the colour ops, the reference's cutout with probability ``cutout_multiplier * p``: the pixels
whose centre lies within a square of half the image's side (``CUTOUT_SIZE``), centred at a uniform
point of the image, are set to 0 (R3GAN: 1).

The geometric ops are composed into one inverse 3x3 matrix per image that maps each output pixel
(centred pixel coordinates) to its source, which :func:`~gpgan.functions.bilinear_sample` reads
with mirrored padding (the reference pads with ``mode='reflect'`` by at most the image's size less
one pixel, zeros beyond); the colour ops into one 4x4
matrix applied by a batched product. Both are linear in the images, so the gradient with respect
to the un-augmented images and its own derivative pass through them. Unlike the reference, the
images are not upsampled 2x around the resampling with its wavelet low-pass filter (an
anti-aliasing step): the bilinear sample is taken on the images themselves.

Random numbers: :meth:`ADA.draw` draws on the CPU, with the run's generator, a fixed number of
uniform and normal numbers per image (whether or not an op happens; with cutout, three more
uniforms per image after them, so a pipeline without it draws what it always drew); the gates
``u < p`` and the matrices are computed on the device from them and from ``p``, which lives on the
device, so a training step never reads the device for them.

``p``: fixed, a linear ramp over generator steps, a curve in images seen (``cosine``: R3GAN's
cosine from ``p`` to ``p_end``, whose values the caller's ``p_curve`` gives), or adaptive: every
``interval`` critic minibatches, ``r_t = E[sign(D(real))]`` over them moves ``p`` by
``sign(r_t - target) * images / (speed_kimg * 1000)``, clipped to [0, 1] (``speed_kimg = 500``:
from 0 to 1 in 500k images, as the reference). ``p``, ``r_t`` and the partial sums are the state
(:meth:`state_dict`) that a checkpoint keeps, so a resumed run continues with the same ``p``. A
data-parallel run sums each minibatch's counts (:meth:`ADA.count`: signs and images, whole
numbers) over its processes before :meth:`ADA.adapt` adds them, as stylegan2-ada-pytorch
all-reduces its sign statistics: every process then holds the same ``p``, the one process would
hold on the global batch.
"""
import math

import numpy

import gpgan.functions as F
from gpgan.autograd import Variable
from gpgan.backend import constant_array, get_array_module, to_device
from gpgan.backend.graph import host_effect, host_number
from gpgan.kernels import matmul

__all__ = ["ADA", "P_MODES", "SCHEDULED_MODES", "N_UNIFORM", "N_NORMAL", "CUTOUT_SIZE", "cutout_mask"]

P_MODES = ("adaptive", "fixed", "linear", "cosine")
#: the modes in which p follows the step count (set by :meth:`ADA.begin_step`, nothing to adapt)
SCHEDULED_MODES = ("linear", "cosine")

# Columns of the per-image random numbers (draw order); each op has its own, used or not.
_U = {name: k for k, name in enumerate((
    "xflip", "xflip_gate", "rot90", "rot90_gate", "xint_x", "xint_y", "xint_gate", "scale_gate",
    "rotate1", "rotate1_gate", "aniso_gate", "rotate2", "rotate2_gate", "xfrac_gate",
    "brightness_gate", "contrast_gate", "lumaflip", "lumaflip_gate", "hue", "hue_gate", "saturation_gate"))}
_N = {name: k for k, name in enumerate(("scale", "aniso", "xfrac_x", "xfrac_y", "brightness", "contrast",
                                        "saturation"))}
N_UNIFORM, N_NORMAL = len(_U), len(_N)

# The reference's 'bgc' ranges.
XINT_MAX, SCALE_STD, ROTATE_MAX, ANISO_STD, XFRAC_STD = 0.125, 0.2, 1.0, 0.2, 0.125
BRIGHTNESS_STD, CONTRAST_STD, HUE_MAX, SATURATION_STD = 0.2, 0.5, 1.0, 1.0
#: the side of cutout's square, a fraction of the image's (the reference's cutout_size)
CUTOUT_SIZE = 0.5


# -- per-image matrices (xp arrays, float64) ------------------------------------------------------
def _matrices(xp, rows):
    """(N, k, k) from a k x k nested list of (N,) arrays or numbers. Numbers are filled on the
    device (no copy from the host: a step captured as a CUDA graph may not make one)."""
    n = next(v.shape[0] for row in rows for v in row if hasattr(v, "shape"))
    entry = lambda v: v.astype(numpy.float64, copy=False) if hasattr(v, "shape") else xp.full(n, float(v))  # noqa: E731
    return xp.stack([xp.stack([entry(v) for v in row], axis=-1) for row in rows], axis=-2)


def translate2d(xp, tx, ty):
    return _matrices(xp, [[1, 0, tx], [0, 1, ty], [0, 0, 1]])


def scale2d(xp, sx, sy):
    return _matrices(xp, [[sx, 0, 0], [0, sy, 0], [0, 0, 1]])


def rotate2d_cs(xp, c, s):
    """Rotation by the angle whose cosine and sine are ``c`` and ``s``."""
    return _matrices(xp, [[c, -s, 0], [s, c, 0], [0, 0, 1]])


def rotate2d(xp, theta):
    return rotate2d_cs(xp, xp.cos(theta), xp.sin(theta))


def _luma_axis(xp):
    return constant_array(xp, numpy.array([1, 1, 1, 0]) / math.sqrt(3), numpy.float64)


def rotate3d_luma(xp, theta):
    """(N, 4, 4): rotation by ``theta`` about the luma axis (Rodrigues' formula)."""
    vx = vy = vz = 1 / math.sqrt(3)
    s, c = xp.sin(theta), xp.cos(theta)
    cc = 1 - c
    return _matrices(xp, [
        [vx * vx * cc + c, vx * vy * cc - vz * s, vx * vz * cc + vy * s, 0],
        [vy * vx * cc + vz * s, vy * vy * cc + c, vy * vz * cc - vx * s, 0],
        [vz * vx * cc - vy * s, vz * vy * cc + vx * s, vz * vz * cc + c, 0],
        [0, 0, 0, 1]])


def geometric_matrix(xp, u, z, p, hw):
    """(N, 3, 3): the inverse geometric transform (output pixel -> source pixel, centred pixel
    coordinates, x along the width) of each image from its uniforms ``u`` (N, N_UNIFORM), normals
    ``z`` (N, N_NORMAL) and the probability ``p`` (0-d)."""
    H, W = hw
    n = u.shape[0]
    gate = lambda name, prob=p: u[:, _U[name]] < prob  # noqa: E731
    G = xp.broadcast_to(xp.eye(3), (n, 3, 3))
    i = xp.where(gate("xflip_gate"), xp.floor(u[:, _U["xflip"]] * 2), 0)
    G = matmul(G, scale2d(xp, 1 - 2 * i, 1))  # its own inverse
    # 90-degree steps with exact cosines and sines, so that a quarter turn moves pixels exactly.
    k = xp.where(gate("rot90_gate"), xp.floor(u[:, _U["rot90"]] * 4), 0).astype(numpy.int64)
    cos4 = constant_array(xp, [1.0, 0.0, -1.0, 0.0], numpy.float64)
    sin4 = constant_array(xp, [0.0, 1.0, 0.0, -1.0], numpy.float64)
    G = matmul(G, rotate2d_cs(xp, cos4[k], sin4[k]))  # rotate2d_inv(-pi / 2 * k)
    t = xp.stack([u[:, _U["xint_x"]], u[:, _U["xint_y"]]], axis=1) * 2 - 1
    t = xp.where(gate("xint_gate")[:, None], t * XINT_MAX, 0)
    G = matmul(G, translate2d(xp, -xp.round(t[:, 0] * W), -xp.round(t[:, 1] * H)))
    s = xp.where(gate("scale_gate"), xp.exp2(z[:, _N["scale"]] * SCALE_STD), 1)
    G = matmul(G, scale2d(xp, 1 / s, 1 / s))
    p_rot = 1 - xp.sqrt(xp.clip(1 - p, 0, 1))  # one of the two rotations with probability p
    theta = xp.where(gate("rotate1_gate", p_rot), (u[:, _U["rotate1"]] * 2 - 1) * math.pi * ROTATE_MAX, 0)
    G = matmul(G, rotate2d(xp, theta))  # rotate2d_inv(-theta)
    s = xp.where(gate("aniso_gate"), xp.exp2(z[:, _N["aniso"]] * ANISO_STD), 1)
    G = matmul(G, scale2d(xp, 1 / s, s))
    theta = xp.where(gate("rotate2_gate", p_rot), (u[:, _U["rotate2"]] * 2 - 1) * math.pi * ROTATE_MAX, 0)
    G = matmul(G, rotate2d(xp, theta))
    t = xp.where(gate("xfrac_gate")[:, None], xp.stack([z[:, _N["xfrac_x"]], z[:, _N["xfrac_y"]]], axis=1) * XFRAC_STD, 0)
    return matmul(G, translate2d(xp, -t[:, 0] * W, -t[:, 1] * H))


def color_matrix(xp, u, z, p):
    """(N, 4, 4): the colour transform of each image (acting on (r, g, b, 1))."""
    n = u.shape[0]
    gate = lambda name: u[:, _U[name]] < p  # noqa: E731
    eye = xp.eye(4)
    C = xp.broadcast_to(eye, (n, 4, 4))
    b = xp.where(gate("brightness_gate"), z[:, _N["brightness"]] * BRIGHTNESS_STD, 0)
    C = matmul(translate3d(xp, b), C)
    c = xp.where(gate("contrast_gate"), xp.exp2(z[:, _N["contrast"]] * CONTRAST_STD), 1)
    C = matmul(scale3d(xp, c), C)
    v = _luma_axis(xp)
    vv = xp.outer(v, v)
    i = xp.where(gate("lumaflip_gate"), xp.floor(u[:, _U["lumaflip"]] * 2), 0)
    C = matmul(eye - 2 * vv * i[:, None, None], C)  # Householder reflection
    theta = xp.where(gate("hue_gate"), (u[:, _U["hue"]] * 2 - 1) * math.pi * HUE_MAX, 0)
    C = matmul(rotate3d_luma(xp, theta), C)
    s = xp.where(gate("saturation_gate"), xp.exp2(z[:, _N["saturation"]] * SATURATION_STD), 1)
    # vv + (I - vv) * s, written as I + (s - 1)(I - vv) so that s = 1 is the identity exactly
    return matmul(eye + (s - 1)[:, None, None] * (eye - vv), C)


def translate3d(xp, b):
    return _matrices(xp, [[1, 0, 0, b], [0, 1, 0, b], [0, 0, 1, b], [0, 0, 0, 1]])


def scale3d(xp, c):
    return _matrices(xp, [[c, 0, 0, 0], [0, c, 0, 0], [0, 0, c, 0], [0, 0, 0, 1]])


def cutout_mask(xp, c, p, hw):
    """(N, H, W) float64: 0 inside each image's cutout square, 1 elsewhere, from its uniforms ``c``
    (N, 3: the gate, the centre's x and y in [0, 1)) and the cutout's probability ``p`` (0-d). A
    pixel (i, j) is cut when both ``|(j + 0.5) / W - cx|`` and ``|(i + 0.5) / H - cy|`` are below
    half the square's side; a closed gate makes the side 0, which cuts nothing."""
    H, W = hw
    size = (c[:, 0] < p).astype(numpy.float64) * CUTOUT_SIZE
    keep_x = xp.abs((xp.arange(W, dtype=numpy.float64) + 0.5) / W - c[:, 1:2]) >= size[:, None] / 2
    keep_y = xp.abs((xp.arange(H, dtype=numpy.float64) + 0.5) / H - c[:, 2:3]) >= size[:, None] / 2
    return xp.logical_or(keep_x[:, None, :], keep_y[:, :, None]).astype(numpy.float64)


def apply_geometric(x, G):
    """``x`` (Variable, N, C, H, W) resampled through ``G`` (N, 3, 3), mirrored padding."""
    xp = get_array_module(G)
    H, W = x.shape[2:]
    cy, cx = (H - 1) / 2, (W - 1) / 2
    rows, cols = numpy.meshgrid(numpy.arange(H) - cy, numpy.arange(W) - cx, indexing="ij")
    # the output pixels (3, H * W), homogeneous, and the centre: device constants, made once (a
    # captured step may not copy from the host)
    points = constant_array(xp, numpy.stack([cols.reshape(-1), rows.reshape(-1), numpy.ones(H * W)]), numpy.float64)
    centre = constant_array(xp, [[cx], [cy]], numpy.float64)
    source = matmul(G[:, :2], points)  # (N, 2, H * W): one product, where a pass per term would cost five times more
    source += centre
    # coordinates in the images' dtype, as the reference's grid (whole numbers stay exact)
    source = source.astype(x.dtype).reshape(-1, 2, H, W)
    return F.bilinear_sample(x, source[:, 0], source[:, 1], padding="reflection")


def apply_color(x, C):
    """``x`` (Variable, N, C, H, W) with C = 3 (or 1: grey, as the reference takes it) through the
    colour matrices ``C`` (N, 4, 4)."""
    N, channels, H, W = x.shape
    C = C.astype(x.dtype)
    flat = F.reshape(x, (N, channels, H * W))
    if channels == 3:
        out = F.matmul(C[:, :3, :3], flat) + C[:, :3, 3:]
    elif channels == 1:
        # the reference's grey images: the rows' mean, its colour gains summed
        out = flat * C[:, :3, :3].mean(axis=1).sum(axis=1)[:, None, None] + C[:, :3, 3].mean(axis=1)[:, None, None]
    else:
        raise ValueError(f"ADA: the colour ops need images of 1 or 3 channels, got {channels}")
    return F.reshape(out, (N, channels, H, W))


class ADA:
    """The 'bgc' pipeline with probability ``p`` (see the module docstring).

    Args:
        p: the initial (adaptive), constant (fixed) or starting (linear, cosine) probability.
        mode: "adaptive", "fixed", "linear" or "cosine".
        target: r_t's target (adaptive).
        interval: critic minibatches between adjustments (adaptive).
        speed_kimg: thousands of images over which p may go from 0 to 1 (adaptive).
        p_end, ramp_steps: linear: p goes from ``p`` to ``p_end`` over ``ramp_steps`` generator steps.
        color_multiplier: the colour ops happen with probability ``color_multiplier * p``.
        cutout_multiplier: cutout happens with probability ``cutout_multiplier * p`` (0: never,
            and no numbers are drawn for it).
        p_curve: cosine: an object whose ``value_at(step)`` is p after ``step`` generator steps
            (the trainer passes a :class:`gpgan.optim.CosineValue` from ``p`` to ``p_end`` over the
            schedule section's images, the curve of the learning rates and the penalty weight).
        device: where ``p`` and the adaptation's sums live.
    """

    name = "ada"

    def __init__(self, p=0.0, mode="adaptive", target=0.6, interval=4, speed_kimg=500.0, p_end=None,
                 ramp_steps=None, p_curve=None, color_multiplier=1.0, cutout_multiplier=0.0, device="cpu"):
        if mode not in P_MODES:
            raise ValueError(f"ADA: unknown p mode {mode!r}; accepted: {', '.join(P_MODES)}")
        if mode == "linear" and (p_end is None or not ramp_steps):
            raise ValueError("ADA: the linear p mode needs p_end and ramp_steps >= 1")
        if mode == "cosine" and p_curve is None:
            raise ValueError("ADA: the cosine p mode needs p_curve (p after a number of generator steps)")
        self.mode, self.p0, self.target = mode, float(p), float(target)
        self.interval, self.speed_kimg = int(interval), float(speed_kimg)
        self.p_end, self.ramp_steps, self.p_curve = p_end, ramp_steps, p_curve
        self.color_multiplier, self.cutout_multiplier = float(color_multiplier), float(cutout_multiplier)
        self.device = device
        self.load_state_dict({"p": self.p0, "rt": math.nan, "signs": 0.0, "images": 0.0, "batches": 0.0})

    # -- random numbers and the pipeline ----------------------------------------------------------
    def draw(self, rng, x):
        """``{"uniform": (N, N_UNIFORM), "normal": (N, N_NORMAL)}`` float64, drawn on the CPU, and
        with cutout ``"cutout"``: (N, 3) uniforms drawn after them."""
        n = x.shape[0]
        draws = {"uniform": rng.random((n, N_UNIFORM)), "normal": rng.standard_normal((n, N_NORMAL))}
        if self.cutout_multiplier > 0:
            draws["cutout"] = rng.random((n, 3))
        return draws

    def __call__(self, x, draws):
        """``x`` (Variable or array, N, C, H, W) augmented with ``draws`` at the current ``p``."""
        x = x if isinstance(x, Variable) else Variable(x)
        xp = get_array_module(draws["uniform"])
        u, z = draws["uniform"], draws["normal"]
        x = apply_geometric(x, geometric_matrix(xp, u, z, self.p, tuple(x.shape[2:])))
        p_color = self.p if self.color_multiplier == 1 else self.p * self.color_multiplier
        x = apply_color(x, color_matrix(xp, u, z, p_color))
        if self.cutout_multiplier > 0:
            mask = cutout_mask(xp, draws["cutout"], self.p * self.cutout_multiplier, tuple(x.shape[2:]))
            x = x * mask[:, None].astype(x.dtype)
        return x

    # -- p --------------------------------------------------------------------------------------
    def scheduled_p(self, step):
        """p for the generator step that follows ``step`` steps, in the fixed, linear and cosine modes."""
        if self.mode == "cosine":
            return self.p_curve.value_at(step)
        if self.mode != "linear":
            return self.p0
        return self.p0 + (self.p_end - self.p0) * min(step / self.ramp_steps, 1.0)

    def begin_step(self, step):
        """Set p for the generator step that follows ``step()`` steps (linear and cosine modes): p
        follows the step count alone, so a resumed run takes it up exactly. In a captured step the
        value is taken again before each replay (a host effect writes it into the device's p)."""
        if self.mode in SCHEDULED_MODES:
            value = host_effect(lambda: host_number(self.scheduled_p(step()), numpy.float64))
            self.p[...] = value

    def count(self, d_real):
        """This process's counts of one real minibatch (adaptive mode; None in the others): a
        (2,) float64 device array, the sum of the signs of the critic's outputs ``d_real`` and
        the number of images. Whole numbers, so that processes can add theirs up exactly."""
        if self.mode != "adaptive":
            return None
        xp = get_array_module(d_real)
        counts = xp.empty(2, dtype=numpy.float64)  # filled in place: xp.stack would copy from the host
        counts[0] = xp.sign(d_real).astype(numpy.float64).sum()
        counts[1] = d_real.shape[0]
        return counts

    def adapt(self, counts):
        """Add one minibatch's ``counts`` (:meth:`count`'s, or their sum over the processes of a
        data-parallel run: then every process adjusts the same p) and adjust p after every
        ``interval`` minibatches. On the device, in place: nothing is read back."""
        xp = get_array_module(counts)
        self.signs += counts[0]
        self.images += counts[1]
        self.batches += 1
        due = self.batches >= self.interval
        rt = self.signs / xp.maximum(self.images, 1)
        adjusted = xp.clip(self.p + xp.sign(rt - self.target) * self.images / (self.speed_kimg * 1000), 0, 1)
        self.p[...] = xp.where(due, adjusted, self.p)
        self.rt[...] = xp.where(due, rt, self.rt)
        for total in (self.signs, self.images, self.batches):
            total[...] = xp.where(due, 0, total)

    def observe(self, d_real):
        """:meth:`count` and :meth:`adapt` in one process (adaptive mode; nothing otherwise)."""
        counts = self.count(d_real)
        if counts is not None:
            self.adapt(counts)

    # -- state ----------------------------------------------------------------------------------
    def state_dict(self):
        """p, the last r_t and the partial sums, as floats (read from the device)."""
        return {k: float(numpy.asarray(to_device(getattr(self, k), "cpu"))) for k in
                ("p", "rt", "signs", "images", "batches")}

    def load_state_dict(self, state):
        """Set the state from :meth:`state_dict`'s floats; arrays that exist are written in place
        (a captured step keeps reading them)."""
        for k in ("p", "rt", "signs", "images", "batches"):
            value = to_device(numpy.array(float(state[k]), dtype=numpy.float64), self.device)
            if hasattr(self, k):
                getattr(self, k)[...] = value
            else:
                setattr(self, k, value)

    def log_values(self):
        """``augment/p`` and ``augment/rt`` (device scalars; r_t is NaN before the first adjustment
        and in the modes that do not adapt p)."""
        return {"augment/p": self.p, "augment/rt": self.rt}

    def __repr__(self):
        return (f"ADA(mode={self.mode!r}, p={self.p0:g}, color_multiplier={self.color_multiplier:g}, "
                f"cutout_multiplier={self.cutout_multiplier:g})")
