"""DiffAugment (Zhao et al. 2020): colour, translation and cutout, differentiable in the images.

The ops and ranges follow the authors' ``DiffAugment_pytorch.py`` (mit-han-lab/data-efficient-gans),
each applied to every image with its own random numbers:

===========  ==================================================================================
op           what
===========  ==================================================================================
color        brightness ``x + (u - 0.5)``; saturation ``(x - m_c) * 2u + m_c`` with ``m_c`` the
             mean over channels; contrast ``(x - m) * (u + 0.5) + m`` with ``m`` the image's mean
             (``u ~ U(0, 1)`` per image and per op), in that order
translation  by whole pixels, ``t ~ U{-s, ..., s}`` per axis with ``s = int(size / 8 + 0.5)``,
             zero padding
cutout       a square of ``k = int(size / 2 + 0.5)`` pixels set to 0, its rows (columns) from
             ``o - k // 2`` with ``o ~ U{0, ..., size - k % 2}``, clipped to the image
===========  ==================================================================================

Random numbers are drawn on the CPU by :meth:`DiffAugment.draw` (the run's generator) and the
ops run on the images' device from those arrays, so a seed gives the same augmentations on every
device. The ops are built from :mod:`gpgan.functions` (the translation is
:func:`~gpgan.functions.translate2d`), so the critic's gradient with respect to the
un-augmented images, and its derivative in turn, pass through them.
"""
import numpy

import gpgan.functions as F
from gpgan.autograd import Variable
from gpgan.backend import get_array_module

__all__ = ["DiffAugment", "DIFFAUGMENT_OPS"]

DIFFAUGMENT_OPS = ("color", "translation", "cutout")


def _as_variable(x):
    return x if isinstance(x, Variable) else Variable(x)


def brightness(x, draws):
    """``x + b`` with ``draws["brightness"]`` (N, 1, 1, 1) = ``u - 0.5``."""
    return x + draws["brightness"]


def saturation(x, draws):
    """``(x - m) * s + m`` with ``m`` the per-pixel mean over channels, ``s = 2u``."""
    mean = F.mean(x, axis=1, keepdims=True)
    return (x - mean) * draws["saturation"] + mean


def contrast(x, draws):
    """``(x - m) * c + m`` with ``m`` each image's mean, ``c = u + 0.5``."""
    mean = F.mean(x, axis=(1, 2, 3), keepdims=True)
    return (x - mean) * draws["contrast"] + mean


def translation(x, draws):
    """Whole-pixel translation by ``draws["translation"]`` (N, 2) (rows, columns), zero padding."""
    return F.translate2d(x, draws["translation"])


def cutout_mask(xp, centres, size, hw, dtype):
    """(N, 1, H, W): 0 inside each image's square of side ``size`` (rows and columns from
    ``centre - size // 2``, clipped to the image), 1 elsewhere."""
    masks = []
    for axis, extent in enumerate(hw):
        start = centres[:, axis:axis + 1] - size[axis] // 2
        i = xp.arange(extent)[None, :]
        masks.append((i >= start) & (i < start + size[axis]))
    inside = masks[0][:, None, :, None] & masks[1][:, None, None, :]
    return (~inside).astype(dtype)


def cutout(x, draws):
    """Zero a square of half the image's size at ``draws["cutout"]`` (N, 2) (as the reference)."""
    hw = tuple(x.shape[2:])
    xp = get_array_module(draws["cutout"])
    return x * cutout_mask(xp, draws["cutout"], _cut_size(hw), hw, x.dtype)


def _cut_size(hw):
    return tuple(int(s * 0.5 + 0.5) for s in hw)


def _shift_range(hw):
    return tuple(int(s * 0.125 + 0.5) for s in hw)


class DiffAugment:
    """DiffAugment with the ops of ``policy`` (a list of :data:`DIFFAUGMENT_OPS`, applied in that
    order); call it as ``augment(x, draws)`` with ``draws = augment.draw(rng, x)``.

    It has no state: :meth:`observe`, :meth:`state_dict` and the rest are there so that a training
    step treats every augmentation alike.
    """

    name = "diffaugment"

    def __init__(self, policy=DIFFAUGMENT_OPS):
        policy = list(policy)
        unknown = [op for op in policy if op not in DIFFAUGMENT_OPS]
        if unknown:
            raise ValueError(f"DiffAugment: unknown op {unknown[0]!r} in policy; accepted: {', '.join(DIFFAUGMENT_OPS)}")
        self.policy = policy

    def draw(self, rng, x):
        """The random numbers of one batch like ``x`` (N, C, H, W; only its shape and dtype are
        read), drawn with ``rng`` on the CPU in a fixed order: a dict of NumPy arrays, each with
        the batch as its first axis."""
        n, hw, dtype = x.shape[0], tuple(x.shape[2:]), x.dtype
        draws = {}
        for op in self.policy:
            if op == "color":
                u = rng.random((3, n, 1, 1, 1))
                draws["brightness"] = (u[0] - 0.5).astype(dtype)
                draws["saturation"] = (u[1] * 2).astype(dtype)
                draws["contrast"] = (u[2] + 0.5).astype(dtype)
            elif op == "translation":
                s = _shift_range(hw)
                draws["translation"] = numpy.stack([rng.integers(-s[k], s[k] + 1, n) for k in range(2)], axis=1)
            elif op == "cutout":
                cut = _cut_size(hw)
                draws["cutout"] = numpy.stack([rng.integers(0, hw[k] + (1 - cut[k] % 2), n) for k in range(2)], axis=1)
        return draws

    def __call__(self, x, draws):
        """``x`` (Variable or array, N, C, H, W) augmented with ``draws`` (on its device)."""
        x = _as_variable(x)
        for op in self.policy:
            if op == "color":
                x = contrast(saturation(brightness(x, draws), draws), draws)
            elif op == "translation":
                x = translation(x, draws)
            else:
                x = cutout(x, draws)
        return x

    # -- the interface of augmentations with state (ADA) ------------------------------------------
    def begin_step(self, step):
        """Nothing: DiffAugment has no probability to schedule."""

    def count(self, d_real):
        """None: DiffAugment counts nothing (so :meth:`adapt` is never called)."""
        return None

    def adapt(self, counts):
        """Nothing: DiffAugment does not adapt."""

    def observe(self, d_real):
        """Nothing: DiffAugment does not adapt."""

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass

    def log_values(self):
        return {}

    def __repr__(self):
        return f"DiffAugment(policy={self.policy})"
