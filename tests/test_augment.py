"""gpgan.augment: DiffAugment's and ADA's ops to second order against finite differences (float64),
closed forms (translations, flips, quarter turns, a hue rotation, the identity at p = 0 and at
zero strength), the random parameters against the published ranges, and ADA's adaptive p."""
import math

import re

import numpy as np
import pytest

import gpgan.functions as F
from gpgan.augment import ADA, DiffAugment, make_augment
from gpgan.augment import diffaugment as da
from gpgan.augment.ada import N_NORMAL, N_UNIFORM, _N, _U, color_matrix, geometric_matrix
from gpgan.autograd import Variable, gradcheck, gradgradcheck
from gpgan.optim import CosineValue
from gpgan.train.config import ConfigError, default_config, validate_config
from helpers import ROOT, write_cifar_fixture


def images(shape=(3, 3, 6, 6), seed=0, dtype=np.float64):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# -- DiffAugment ---------------------------------------------------------------------------------
DA_OPS = {"brightness": da.brightness, "saturation": da.saturation, "contrast": da.contrast,
          "translation": da.translation, "cutout": da.cutout}


@pytest.mark.parametrize("op", sorted(DA_OPS))
def test_diffaugment_op_derivatives(op):
    x = images()
    draws = DiffAugment().draw(np.random.default_rng(1), x)
    # A nonlinearity after the op makes the second derivative pass through the op's backward.
    fn = lambda v: F.sin(DA_OPS[op](v, draws))  # noqa: E731
    assert gradcheck(fn, (x,))
    assert gradgradcheck(fn, (x,))


def test_diffaugment_pipeline_derivatives():
    x = images()
    aug = DiffAugment(["color", "translation", "cutout"])
    draws = aug.draw(np.random.default_rng(2), x)
    fn = lambda v: F.sin(aug(v, draws)) * 3  # noqa: E731
    assert gradcheck(fn, (x,))
    assert gradgradcheck(fn, (x,))


def test_diffaugment_closed_forms():
    x = images((2, 3, 8, 8))
    n = len(x)
    draws = {"brightness": np.full((n, 1, 1, 1), 0.25), "saturation": np.zeros((n, 1, 1, 1)),
             "contrast": np.ones((n, 1, 1, 1)), "translation": np.array([[2, 0], [0, -3]]),
             "cutout": np.array([[0, 0], [4, 4]])}
    np.testing.assert_array_equal(da.brightness(Variable(x), draws).data, x + 0.25)
    grey = da.saturation(Variable(x), draws).data  # saturation 0: every channel the pixel's mean
    np.testing.assert_allclose(grey, np.broadcast_to(x.mean(axis=1, keepdims=True), x.shape), rtol=1e-15)
    np.testing.assert_allclose(da.contrast(Variable(x), draws).data, x, rtol=1e-14, atol=1e-15)
    shifted = da.translation(Variable(x), draws).data
    np.testing.assert_array_equal(shifted[0, :, :6], x[0, :, 2:])  # 2 rows up, zeros below
    np.testing.assert_array_equal(shifted[0, :, 6:], 0)
    np.testing.assert_array_equal(shifted[1, :, :, 3:], x[1, :, :, :5])
    cut = da.cutout(Variable(x), draws).data
    # 8x8 images: side 4, from offset - 2; offset 0 clips to rows/cols 0..1, offset 4 covers 2..5
    np.testing.assert_array_equal(cut[0, :, :2, :2], 0)
    np.testing.assert_array_equal(cut[0, :, 2:], x[0, :, 2:])
    assert (cut[1] == 0).sum() == 3 * 16 and np.all(cut[1, :, 2:6, 2:6] == 0)


def test_diffaugment_parameter_ranges():
    x = np.zeros((20000, 3, 32, 32), dtype=np.float32)
    draws = DiffAugment().draw(np.random.default_rng(3), x)
    b, s, c = draws["brightness"].ravel(), draws["saturation"].ravel(), draws["contrast"].ravel()
    assert b.dtype == np.float32 and -0.5 <= b.min() < -0.49 and 0.49 < b.max() < 0.5
    assert 0 <= s.min() < 0.01 and 1.99 < s.max() < 2 and abs(s.mean() - 1) < 0.02
    assert 0.5 <= c.min() < 0.51 and 1.49 < c.max() < 1.5
    t = draws["translation"]  # int(32 / 8 + 0.5) = 4
    assert t.shape == (20000, 2) and sorted(np.unique(t)) == list(range(-4, 5))
    o = draws["cutout"]  # side 16 (even): offsets 0..32
    assert sorted(np.unique(o)) == list(range(0, 33))
    assert abs(np.mean(t == 0) - 1 / 9) < 0.01


def test_diffaugment_rejects_unknown_op():
    with pytest.raises(ValueError, match="unknown op 'flip' in policy; accepted: color, translation, cutout"):
        DiffAugment(["color", "flip"])


# -- ADA: draws that switch single ops on ---------------------------------------------------------
def only(n, on, uniform=None, normal=None):
    """Draws with every op's gate off (u = 1 is never < p) except the gates in ``on``; ``uniform``
    and ``normal`` set other columns by name."""
    u = np.ones((n, N_UNIFORM))
    z = np.zeros((n, N_NORMAL))
    for name in on:
        u[:, _U[name + "_gate"]] = 0.0
    for name, value in (uniform or {}).items():
        u[:, _U[name]] = value
    for name, value in (normal or {}).items():
        z[:, _N[name]] = value
    return {"uniform": u, "normal": z}


def test_ada_identity_at_p0_and_at_zero_strength():
    x = images((4, 3, 8, 8), dtype=np.float32)
    aug = ADA(p=0.0, mode="fixed")
    draws = aug.draw(np.random.default_rng(4), x)
    np.testing.assert_array_equal(aug(x, draws).data, x)  # every gate closed: exactly the images
    # every op on, at zero strength (no flip, quarter turns of 0, shifts and angles 0, scales 1)
    strengths = {"xflip": 0.25, "rot90": 0.1, "xint_x": 0.5, "xint_y": 0.5, "rotate1": 0.5, "rotate2": 0.5,
                 "lumaflip": 0.25, "hue": 0.5}
    zero = only(4, [k[:-5] for k in _U if k.endswith("_gate")], uniform=strengths)
    np.testing.assert_array_equal(ADA(p=1.0, mode="fixed")(x, zero).data, x)


def test_ada_geometric_closed_forms():
    x = images((1, 3, 8, 8))
    aug = ADA(p=1.0, mode="fixed")
    flipped = aug(x, only(1, ["xflip"], uniform={"xflip": 0.75})).data
    np.testing.assert_array_equal(flipped, x[..., ::-1])
    turned = [aug(x, only(1, ["rot90"], uniform={"rot90": (k + 0.5) / 4})).data for k in range(4)]
    np.testing.assert_array_equal(turned[0], x)
    np.testing.assert_array_equal(turned[2], x[..., ::-1, ::-1])
    # a quarter turn each way: rotate2d(+90 deg) maps output (x, y) to source (-y, x)
    np.testing.assert_array_equal(turned[1], np.rot90(x, 1, axes=(2, 3)))
    np.testing.assert_array_equal(turned[3], np.rot90(x, -1, axes=(2, 3)))
    # integer translation by round(0.0625 * 2 ... ): u = 0.75 -> t = 0.5 * 0.125 * 8 = 0.5 -> round
    # to 0 (half to even); u = 1 -> t = 1 pixel: output column j reads source column j - 1
    shifted = aug(x, only(1, ["xint"], uniform={"xint_x": 1.0, "xint_y": 0.5})).data
    reflected = np.pad(x, ((0, 0), (0, 0), (0, 0), (1, 0)), mode="reflect")[..., :8]
    np.testing.assert_array_equal(shifted, reflected)
    # fractional translation by half a pixel: the mean of neighbours
    half = aug(x, only(1, ["xfrac"], normal={"xfrac_x": -0.5 / (0.125 * 8)})).data
    np.testing.assert_allclose(half[..., :7], (x[..., :7] + x[..., 1:]) / 2, rtol=1e-12)


def test_ada_color_closed_forms():
    x = images((1, 3, 4, 4))
    aug = ADA(p=1.0, mode="fixed")
    np.testing.assert_allclose(aug(x, only(1, ["brightness"], normal={"brightness": 1.5})).data, x + 0.3, rtol=1e-14)
    np.testing.assert_allclose(aug(x, only(1, ["contrast"], normal={"contrast": 2.0})).data, x * 2, rtol=1e-14)
    grey = np.broadcast_to(x[:, :1], x.shape)
    np.testing.assert_allclose(aug(grey, only(1, ["lumaflip"], uniform={"lumaflip": 0.75})).data, -grey,
                               rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(aug(grey, only(1, ["saturation"], normal={"saturation": 1.3})).data, grey,
                               rtol=1e-14, atol=1e-15)
    # 120 degrees about the luma axis permutes the channels cyclically: u = 5/6 -> theta = 2 pi / 3
    hue = aug(x, only(1, ["hue"], uniform={"hue": 5 / 6})).data
    np.testing.assert_allclose(hue, x[:, [2, 0, 1]], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("options", [{}, {"color_multiplier": 0.5, "cutout_multiplier": 1.0}],
                         ids=["bgc", "r3gan"])
def test_ada_derivatives_first_and_second_order(options):
    x = images((2, 3, 5, 6))
    aug = ADA(p=0.9, mode="fixed", **options)
    draws = aug.draw(np.random.default_rng(5), x)
    if options:  # both images cut (gates open), at centres that leave some pixels
        draws["cutout"][:] = [[0.1, 0.3, 0.6], [0.5, 0.9, 0.2]]
    fn = lambda v: F.sin(aug(v, draws)) * 2  # noqa: E731
    assert gradcheck(fn, (x,))
    assert gradgradcheck(fn, (x,))


def test_ada_cutout_closed_form():
    """stylegan2-ada's cutout (R3GAN's cutout=1): a pixel (i, j) is zeroed when its centre lies
    within half of CUTOUT_SIZE of the image's centre point on both axes, with probability
    cutout_multiplier x p; the other ops' gates closed here."""
    x = images((3, 3, 6, 8)) + 5.0  # no pixel 0 by chance
    c = np.array([[0.2, 0.5, 0.5], [0.2, 0.05, 0.9], [0.7, 0.5, 0.5]])  # the third gate closed at p 0.6
    aug = ADA(p=0.6, mode="fixed", cutout_multiplier=1.0)
    draws = {**only(3, []), "cutout": c}
    out = aug(x, draws).data
    expected = x.copy()
    for n in range(2):
        for i in range(6):
            for j in range(8):
                if abs((j + 0.5) / 8 - c[n, 1]) < 0.25 and abs((i + 0.5) / 6 - c[n, 2]) < 0.25:
                    expected[n, :, i, j] = 0
    np.testing.assert_array_equal(out, expected)
    assert (out[0] == 0).sum() == 3 * 2 * 4 and (out[1] == 0).sum() == 3 * 2 * 2  # channels x rows x columns
    # the multiplier scales the gate: at 0.3 x 0.6 = 0.18 < 0.2 nothing is cut
    np.testing.assert_array_equal(ADA(p=0.6, mode="fixed", cutout_multiplier=0.3)(x, draws).data, x)


def test_ada_color_multiplier_scales_the_colour_ops_probability():
    """color_multiplier 0.5 at p = 0.8: the colour ops act as at p = 0.4, the geometric ones as at 0.8."""
    x = images((4, 3, 6, 6))
    draws = ADA(p=0.8).draw(np.random.default_rng(9), x)
    half = ADA(p=0.8, mode="fixed", color_multiplier=0.5)
    geometric = [k for k in _U if k.endswith("_gate") and k[:-5] in (
        "xflip", "rot90", "xint", "scale", "rotate1", "aniso", "rotate2", "xfrac")]
    colour_only = {**draws, "uniform": draws["uniform"].copy()}
    colour_only["uniform"][:, [_U[k] for k in geometric]] = 1.0  # geometric gates closed
    np.testing.assert_array_equal(half(x, colour_only).data, ADA(p=0.4, mode="fixed")(x, colour_only).data)
    geometry_only = {**draws, "uniform": draws["uniform"].copy()}
    colour_gates = [k for k in _U if k.endswith("_gate") and k not in geometric]
    geometry_only["uniform"][:, [_U[k] for k in colour_gates]] = 1.0
    np.testing.assert_array_equal(half(x, geometry_only).data, ADA(p=0.8, mode="fixed")(x, geometry_only).data)
    gates = draws["uniform"][:, [_U[k] for k in colour_gates]]
    assert ((gates >= 0.4) & (gates < 0.8)).any()  # some op that p 0.8 would apply and 0.4 does not


def test_ada_without_cutout_draws_what_bgc_always_drew():
    x = images((5, 3, 4, 4))
    rng, ref = np.random.default_rng(3), np.random.default_rng(3)
    draws = ADA(color_multiplier=0.5).draw(rng, x)
    assert set(draws) == {"uniform", "normal"}
    np.testing.assert_array_equal(draws["uniform"], ref.random((5, N_UNIFORM)))
    np.testing.assert_array_equal(draws["normal"], ref.standard_normal((5, N_NORMAL)))
    assert rng.random() == ref.random()
    assert ADA(cutout_multiplier=1.0).draw(np.random.default_rng(3), x)["cutout"].shape == (5, 3)


def test_ada_grayscale_images():
    x = images((2, 1, 5, 5))
    aug = ADA(p=1.0, mode="fixed")
    out = aug(x, only(2, ["contrast"], normal={"contrast": 1.0})).data
    np.testing.assert_allclose(out, x * 2 ** 0.5, rtol=1e-14)


# -- ADA: the parameters' statistics -----------------------------------------------------------------
def _stats_draws(n, p, seed=6):
    return ADA(p=p, mode="fixed").draw(np.random.default_rng(seed), np.zeros((n, 3, 8, 8)))


def test_ada_geometric_parameter_statistics():
    n, hw = 40000, (32, 32)
    d = _stats_draws(n, 1.0)
    u, z = d["uniform"], d["normal"]

    def matrix(op, p=1.0):
        keep = only(n, [op])["uniform"]
        for k in _U:
            if not k.endswith("_gate"):
                keep[:, _U[k]] = u[:, _U[k]]
        keep[:, _U[op + "_gate"]] = u[:, _U[op + "_gate"]]
        return geometric_matrix(np, keep, z, np.float64(p), hw)

    flip = matrix("xflip", 0.5)[:, 0, 0]  # applied with p, flipping half of those
    assert abs(np.mean(flip == -1) - 0.25) < 0.01
    rot = matrix("rot90")
    quarter = np.round(np.arctan2(rot[:, 1, 0], rot[:, 0, 0]) / (np.pi / 2)) % 4
    assert all(abs(np.mean(quarter == k) - 0.25) < 0.01 for k in range(4))
    t = -matrix("xint")[:, :2, 2]  # whole pixels within +-0.125 * 32 = 4
    assert np.all(t == np.round(t)) and t.min() == -4 and t.max() == 4
    log_scale = -np.log2(matrix("scale")[:, 0, 0])
    assert abs(log_scale.std() - 0.2) < 0.005 and abs(log_scale.mean()) < 0.005
    aniso = matrix("aniso")
    assert np.allclose(aniso[:, 0, 0] * aniso[:, 1, 1], 1) and abs(np.log2(aniso[:, 1, 1]).std() - 0.2) < 0.005
    theta = np.arctan2(matrix("rotate1")[:, 1, 0], matrix("rotate1")[:, 0, 0])
    assert abs(theta.min() + np.pi) < 0.01 and abs(theta.max() - np.pi) < 0.01 and abs(theta.std() - np.pi / 3 ** 0.5) < 0.03
    frac = -matrix("xfrac")[:, :2, 2] / 32
    assert abs(frac.std() - 0.125) < 0.003


def test_ada_rotation_probability_is_p_overall():
    n, p = 40000, 0.5
    d = _stats_draws(n, p)
    u = d["uniform"]
    p_rot = 1 - math.sqrt(1 - p)
    either = (u[:, _U["rotate1_gate"]] < p_rot) | (u[:, _U["rotate2_gate"]] < p_rot)
    assert abs(either.mean() - p) < 0.01
    # and the pipeline uses exactly these gates: with only the rotations live, G is a pure rotation
    live = only(n, ["rotate1", "rotate2"])["uniform"]
    for k in ("rotate1", "rotate2", "rotate1_gate", "rotate2_gate"):
        live[:, _U[k]] = u[:, _U[k]]
    G = geometric_matrix(np, live, d["normal"], np.float64(p), (8, 8))
    rotated = G[:, 1, 0] != 0  # sin of the total angle: exactly 0 without a rotation
    np.testing.assert_array_equal(rotated, either)
    assert abs(rotated.mean() - p) < 0.01


def test_ada_color_parameter_statistics():
    n = 40000
    d = _stats_draws(n, 1.0)
    u, z = d["uniform"], d["normal"]

    def matrix(op):
        keep = only(n, [op])["uniform"]
        for k in ("lumaflip", "hue"):
            keep[:, _U[k]] = u[:, _U[k]]
        return color_matrix(np, keep, z, np.float64(1.0))

    assert abs(matrix("brightness")[:, 0, 3].std() - 0.2) < 0.004
    assert abs(np.log2(matrix("contrast")[:, 0, 0]).std() - 0.5) < 0.01
    flip = matrix("lumaflip")
    flipped = np.isclose(np.einsum("nij,j->ni", flip, [1, 1, 1, 0])[:, 0], -1)
    assert abs(flipped.mean() - 0.5) < 0.01
    hue = matrix("hue")  # rotation angle from the trace: 1 + 2 cos(theta) over the 3x3 block
    angle = np.arccos(np.clip((np.trace(hue[:, :3, :3], axis1=1, axis2=2) - 1) / 2, -1, 1))
    assert abs(angle.mean() - np.pi / 2) < 0.02  # |theta| ~ U(0, pi)
    sat = matrix("saturation")  # eigenvalue s on the chroma plane: the trace is 1 + 2 s
    s = (np.trace(sat[:, :3, :3], axis1=1, axis2=2) - 1) / 2
    assert abs(np.log2(s).std() - 1.0) < 0.02


# -- ADA: p ------------------------------------------------------------------------------------------
def test_adaptive_p_moves_towards_target_and_saturates():
    aug = ADA(p=0.0, mode="adaptive", target=0.6, interval=4, speed_kimg=500)
    positive = np.ones((64, 1), dtype=np.float32)
    for _ in range(3):
        aug.observe(positive)
    assert aug.state_dict()["p"] == 0 and math.isnan(aug.state_dict()["rt"])
    aug.observe(positive)
    state = aug.state_dict()
    assert state["p"] == pytest.approx(256 / 500e3) and state["rt"] == 1.0 and state["batches"] == 0
    images = 256
    while aug.state_dict()["p"] < 1:  # from 0 to 1 in 500k images
        for _ in range(4):
            aug.observe(positive)
        images += 256
    assert 500e3 <= images < 500e3 + 256
    below = np.full((64, 1), -1.0, dtype=np.float32)  # r_t = -1 < target: p goes down, stops at 0
    for _ in range(4 * 2000):
        aug.observe(below)
    assert aug.state_dict()["p"] == 0 and aug.state_dict()["rt"] == -1.0


def test_fixed_and_linear_p_and_state_round_trip():
    fixed = ADA(p=0.3, mode="fixed")
    fixed.observe(np.ones((8, 1)))
    assert fixed.state_dict()["p"] == pytest.approx(0.3)
    ramp = ADA(p=0.0, mode="linear", p_end=0.55, ramp_steps=10)
    for step, expected in ((0, 0.0), (5, 0.275), (10, 0.55), (20, 0.55)):
        ramp.begin_step(lambda: step)
        assert ramp.state_dict()["p"] == pytest.approx(expected)
    a = ADA(p=0.1)
    for _ in range(6):
        a.observe(np.array([[1.0], [-1.0], [1.0]]))
    b = ADA(p=0.9)
    b.load_state_dict(a.state_dict())
    assert b.state_dict() == a.state_dict()


def _cosine_p(images, p0, p_end, total, warmup):
    """R3GAN's aug_scheduler written out: linear from 0 to p0 over the warm-up, then the half
    cosine from p0 to p_end, then p_end."""
    if images > total:
        return p_end
    if images < warmup:
        return p0 * images / warmup
    u = (images - warmup) / (total - warmup)
    return p_end + (p0 - p_end) * (1 + math.cos(math.pi * u)) / 2


@pytest.mark.parametrize("p0, warmup", [(0.0, 0.0), (0.1, 512e3)])
def test_cosine_p_follows_the_schedule_in_images(p0, warmup):
    """p_mode cosine: p for the step after ``step`` steps of 512 images is the cosine over 20M images
    (R3GAN's CIFAR-10 numbers) at step * 512 images: at 0, in the warm-up, at its end, in the middle,
    at the end and past it."""
    from gpgan.optim import CosineValue

    curve = CosineValue(p0, 0.55, total_images=2e7, warmup_images=warmup, images_per_step=512)
    ada = ADA(p=p0, mode="cosine", p_end=0.55, p_curve=curve)
    steps = [0, 500, 1000, 19531, 20031, 30000, 39062, 39063, 39064, 100000]
    for step in steps:
        ada.begin_step(lambda: step)
        expected = _cosine_p(step * 512, p0, 0.55, 2e7, warmup)
        assert ada.state_dict()["p"] == pytest.approx(expected, rel=1e-12, abs=1e-15), step
    if warmup == 0:
        ada.begin_step(lambda: 19531.25)  # 10M images, halfway: the mean of the ends
        assert ada.state_dict()["p"] == pytest.approx(0.275, rel=1e-12)
    else:
        ada.begin_step(lambda: 500)  # halfway through the warm-up: half of p0
        assert ada.state_dict()["p"] == pytest.approx(0.05, rel=1e-12)
    ada.begin_step(lambda: 39063)  # 20,000,256 images: past the end, p_end exactly
    assert ada.state_dict()["p"] == 0.55
    # p follows the step count alone: a restored state at any p is overwritten by the next step's
    other = ADA(p=p0, mode="cosine", p_end=0.55, p_curve=curve)
    other.load_state_dict({**ada.state_dict(), "p": 0.9})
    other.begin_step(lambda: 1000)
    ada.begin_step(lambda: 1000)
    assert other.state_dict()["p"] == ada.state_dict()["p"]
    with pytest.raises(ValueError, match="p_curve"):
        ADA(p=0.0, mode="cosine", p_end=0.55)


# -- config --------------------------------------------------------------------------------------
def config(**augment):
    c = default_config()
    c["data"]["name"] = "cifar10"
    c["penalty"]["type"] = "r1"
    c["augment"].update(augment)
    return c


def test_make_augment_from_config():
    assert make_augment(validate_config(config())["augment"]) is None
    assert isinstance(make_augment(validate_config(config(type="diffaugment"))["augment"]), DiffAugment)
    ada = make_augment(validate_config(config(type="ada", p_mode="linear", p_end=0.55, ramp_steps=100))["augment"])
    assert isinstance(ada, ADA) and ada.mode == "linear"
    cosine = validate_config(config(type="ada", p_mode="cosine", p=0.2, p_end=0.55))["augment"]
    curve = CosineValue(0.2, 0.55, total_images=100)
    ada = make_augment(cosine, p_curve=curve)
    assert isinstance(ada, ADA) and ada.mode == "cosine" and ada.scheduled_p(50) == curve.value_at(50)


@pytest.mark.parametrize("augment, penalty, data, expected", [
    ({"type": "ada", "p_mode": "linear"}, "r1", "cifar10", "augment.p_mode 'linear' needs augment.p_end"),
    ({"type": "ada", "p_mode": "cosine"}, "r1", "cifar10", "augment.p_mode 'cosine' needs augment.p_end"),
    ({"type": "ada", "p_mode": "cosine", "p_end": 0.5, "ramp_steps": 10}, "r1", "cifar10",
     "augment.ramp_steps is set but augment.p_mode is 'cosine'; it applies to p_mode linear only"),
    ({"type": "ada", "p_mode": "fixed", "p_end": 0.5}, "r1", "cifar10",
     "augment.p_end is set but augment.p_mode is 'fixed'; it applies to p_mode linear and cosine only"),
    ({"type": "ada", "p_mode": "cosine", "p_end": 0.5, "target": 0.7}, "r1", "cifar10",
     "augment.target is set but augment.p_mode is 'cosine'; it applies to p_mode adaptive only"),
    ({"type": "ada", "p_mode": "cos"}, "r1", "cifar10", "augment.p_mode"),
    ({"type": "ada"}, "r1", "cifar10:least_squares",
     "augment.p_mode 'adaptive' reads the critic's overfitting from the sign of D(real), which loss 'least_squares'"),
    ({"type": "ada"}, "r1", "cifar10:rpgan", "use loss non_saturating or hinge, or a p_mode of fixed, linear or cosine"),
    ({"type": "diffaugment", "penalty_points": "unaugmented"}, "wgan_gp", "cifar10",
     "augment.penalty_points 'unaugmented' needs a penalty on the real or generated images"),
    ({"type": "diffaugment"}, "r1", "grid25", "augment.type 'diffaugment' augments images"),
    ({"type": "diffaugment", "policy": []}, "r1", "cifar10", "augment.policy is empty"),
    ({"type": "diff"}, "r1", "cifar10", "augment.type"),
    ({"type": "ada", "target": 1.5}, "r1", "cifar10", "augment.target"),
    ({"typ": "ada"}, "r1", "cifar10", "did you mean 'augment.type'"),
])
def test_bad_augment_configs(augment, penalty, data, expected):
    c = default_config()
    data, _, loss = data.partition(":")
    c["data"]["name"], c["penalty"]["type"] = data, penalty
    c["loss"] = loss or c["loss"]
    c["augment"] = augment
    with pytest.raises(ConfigError, match=re.escape(expected)):
        validate_config(c)


# -- CUDA: the same numbers as the CPU, to second order ------------------------------------------------
@pytest.mark.cuda
@pytest.mark.parametrize("kind", ["diffaugment", "ada", "ada_r3gan"])
def test_cuda_matches_cpu_first_and_second_order(kind):
    from gpgan.backend import to_device

    host = images((4, 3, 8, 8), seed=7)
    options = {"color_multiplier": 0.5, "cutout_multiplier": 1.0} if kind == "ada_r3gan" else {}
    aug_cpu = DiffAugment() if kind == "diffaugment" else ADA(p=0.8, mode="fixed", **options)
    aug_gpu = DiffAugment() if kind == "diffaugment" else ADA(p=0.8, mode="fixed", device="cuda", **options)
    draws = aug_cpu.draw(np.random.default_rng(8), host)
    results = {}
    for device, aug in (("cpu", aug_cpu), ("cuda", aug_gpu)):
        x = Variable(to_device(host, device), requires_grad=True)
        d = {k: to_device(v, device) for k, v in draws.items()}
        y = F.sin(aug(x, d))
        g, = gpgan_grad(F.sum(y * y), [x], create_graph=True)
        second, = gpgan_grad(F.sum(g * g), [x])
        results[device] = [to_device(a, "cpu") for a in (y.data, g.data, second.data)]
    for cpu, gpu in zip(results["cpu"], results["cuda"]):
        np.testing.assert_allclose(gpu, cpu, rtol=1e-10, atol=1e-12)


def gpgan_grad(*args, **kwargs):
    import gpgan

    return gpgan.grad(*args, **kwargs)


# -- the training step: R1 at the augmented or the un-augmented reals ----------------------------------
@pytest.mark.parametrize("points", ["augmented", "unaugmented"])
def test_r1_points_of_the_training_step(tmp_path, points):
    """With translation only, R1's per-image squared gradient norm is that of the critic's input
    gradient at the translated images (augmented), or of its adjoint translation back onto the
    un-augmented reals (unaugmented: the border rows that the translation dropped get nothing)."""
    import os

    import gpgan
    from gpgan.train.config import load_config
    from gpgan.train.loop import Trainer
    from gpgan.train.run import RunFolder

    write_cifar_fixture(tmp_path / "cifar")
    config = load_config(os.path.join(ROOT, "configs", "r1_cifar.yaml"), [
        "model.generator_options.width=2", "model.generator_options.latent_dim=8", "model.critic_options.width=2",
        "train.batch_size=4", f"data.root={tmp_path / 'cifar'}", "augment.type=diffaugment",
        "augment.policy=translation", f"augment.penalty_points={points}"])
    trainer = Trainer(config, RunFolder.create(tmp_path, "r1", "t"), quiet=True)
    seen = {}
    evaluate = trainer.step_fn.penalty.evaluate

    def spy(critic, real, fake, draws, forward=None):
        value, term, sq = evaluate(critic, real, fake, draws, forward=forward)
        seen["sq"], seen["critic"] = sq.data.copy(), critic
        seen["weights"] = [p.data.copy() for p in critic.parameters()]
        return value, term, sq

    trainer.step_fn.penalty.evaluate = spy
    inputs = trainer.feed.next(0, "cpu")
    trainer.feed.next = lambda *a: inputs
    trainer.train_step()
    critic_inputs = inputs.critic[0]
    shifts = critic_inputs.augment_real["translation"]
    for p, w in zip(seen["critic"].parameters(), seen["weights"]):  # the weights the penalty saw
        p.data[...] = w
    moved = Variable(F.translate2d(Variable(critic_inputs.real), shifts).data, requires_grad=True)
    g, = gpgan.grad(F.sum(seen["critic"](moved)), [moved])
    at_augmented = (g.data.astype(np.float64) ** 2).sum(axis=(1, 2, 3))
    back = F.translate2d(g, -shifts).data  # the adjoint: back where the pixels came from
    at_unaugmented = (back.astype(np.float64) ** 2).sum(axis=(1, 2, 3))
    expected, other = (at_augmented, at_unaugmented) if points == "augmented" else (at_unaugmented, at_augmented)
    np.testing.assert_allclose(seen["sq"], expected, rtol=1e-4)
    moved_images = np.any(shifts != 0, axis=1)
    assert moved_images.any() and not np.allclose(seen["sq"][moved_images], other[moved_images], rtol=1e-3, atol=0)


def test_rpgan_with_an_augmentation_augments_the_generator_steps_reals_and_r1r2_sees_both(tmp_path):
    """loss rpgan + penalty r1r2 with DiffAugment's translation at the un-augmented points: the
    generator's loss is softplus(-(D(T(G(z))) - D(T'(x_r)))), its own real batch translated by
    draws of its own; and r1r2's squared norms cover the reals and the fakes (2B of them), each
    taken through the translation's adjoint."""
    import os

    from gpgan import no_grad
    from gpgan.train.config import load_config
    from gpgan.train.loop import Trainer
    from gpgan.train.run import RunFolder

    write_cifar_fixture(tmp_path / "cifar")
    config = load_config(os.path.join(ROOT, "configs", "r1_cifar.yaml"), [
        "model.generator_options.width=2", "model.generator_options.latent_dim=8", "model.critic_options.width=2",
        "train.batch_size=4", f"data.root={tmp_path / 'cifar'}", "loss=rpgan", "penalty.type=r1r2",
        "augment.type=diffaugment", "augment.policy=translation", "augment.penalty_points=unaugmented"])
    trainer = Trainer(config, RunFolder.create(tmp_path, "r1", "t"), quiet=True)
    inputs = trainer.feed.next(0, "cpu")
    assert inputs.real is not None and set(inputs.augment_real) == {"translation"}
    seen = {}
    evaluate = trainer.step_fn.penalty.evaluate

    def spy(critic, real, fake, draws, forward=None):
        value, term, sq = evaluate(critic, real, fake, draws, forward=forward)
        seen["sq"] = sq.data.copy()
        return value, term, sq

    trainer.step_fn.penalty.evaluate = spy
    update = trainer.step_fn._generator_update

    def recording(step_inputs, values):
        critic, generator = trainer.parts.critic, trainer.parts.generator
        with no_grad():
            real = F.translate2d(Variable(step_inputs.real), step_inputs.augment_real["translation"])
            fake = F.translate2d(generator(Variable(step_inputs.noise)), step_inputs.augment["translation"])
            d_real, d_fake = critic(real).data.astype(np.float64), critic(fake).data.astype(np.float64)
        seen["expected"] = float(np.logaddexp(0.0, -(d_fake - d_real)).mean())
        return update(step_inputs, values)

    trainer.step_fn._generator_update = recording
    result = trainer.step_fn(inputs)
    np.testing.assert_allclose(float(result.values["loss/generator"]), seen["expected"], rtol=1e-5)
    assert seen["sq"].shape == (8,) and np.all(np.isfinite(seen["sq"])) and np.all(seen["sq"] > 0)
