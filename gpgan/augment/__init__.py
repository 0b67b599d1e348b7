"""Augmentations of every image the critic sees (real and generated, in the critic's and the
generator's steps), differentiable in the images: DiffAugment and ADA.

An augmentation ``aug`` is used as ``aug(x, aug.draw(rng, x))``: :meth:`draw` takes the random
numbers of a batch on the CPU (NumPy, the run's generator: the same on every device) and the call
applies them on the images' device. ``begin_step(step)`` (``step``: a callable giving the
generator steps done, read again before each CUDA-graph replay), ``count(d_real)`` and
``adapt(counts)`` (``observe(d_real)``: both, in one process), ``state_dict()``,
``load_state_dict()`` and ``log_values()`` serve ADA's probability; DiffAugment has them as no-ops.
"""
from gpgan.augment.ada import ADA, P_MODES, SCHEDULED_MODES
from gpgan.augment.diffaugment import DIFFAUGMENT_OPS, DiffAugment

__all__ = ["ADA", "DiffAugment", "AUGMENTS", "DIFFAUGMENT_OPS", "P_MODES", "SCHEDULED_MODES", "PENALTY_POINTS",
           "make_augment"]

AUGMENTS = ("none", "diffaugment", "ada")
#: where a gradient penalty on real (or generated) images differentiates the critic: at the
#: augmented images (DiffAugment's default), or at the un-augmented ones through the augmentation
#: (ADA's and R3GAN's)
PENALTY_POINTS = ("augmented", "unaugmented")


def make_augment(section, device="cpu", p_curve=None):
    """The augmentation a config's ``augment:`` section describes, or None for type none.

    ``p_curve``: ADA's p in ``p_mode: cosine``, an object whose ``value_at(step)`` is p after
    ``step`` generator steps (the trainer builds it from the schedule section: the rule of the
    schedules in images has one owner, :mod:`gpgan.optim.schedule`)."""
    kind = section["type"]
    if kind == "none":
        return None
    if kind == "diffaugment":
        return DiffAugment(section["policy"])
    if kind == "ada":
        return ADA(p=section["p"], mode=section["p_mode"], target=section["target"], interval=section["interval"],
                   speed_kimg=section["speed_kimg"], p_end=section["p_end"], ramp_steps=section["ramp_steps"],
                   p_curve=p_curve, color_multiplier=section["color_multiplier"],
                   cutout_multiplier=section["cutout_multiplier"], device=device)
    raise ValueError(f"make_augment: unknown augment type {kind!r}; accepted: {', '.join(AUGMENTS)}")
