"""Learning-rate schedules: they set ``optimizer.lr`` from a step count.

Call ``schedule.step()`` once per training iteration, after ``optimizer.step()`` (torch's order):
the k-th optimizer step then uses ``lr_at(k - 1)``, so the first step uses the base rate.

Schedules counted in images seen (R3GAN's training loop, Huang et al. 2024): :func:`cosine_value`
is its cosine decay with a linear warm-up, :class:`CosineValue` that curve as an object with its
images per step, and :class:`CosineLR` a learning-rate schedule on it that moves Adam's beta2 too.
"""
import math

__all__ = ["LRSchedule", "ConstantLR", "LinearDecayLR", "CosineLR", "CosineValue", "cosine_value", "SCHEDULES",
           "make_schedule"]


def cosine_value(images, base, final, total_images, warmup_images=0, warmup_value=0.0):
    """R3GAN's ``cosine_decay_with_warmup`` at ``images`` seen: from ``warmup_value`` linearly to
    ``base`` over the first ``warmup_images``, then ``final + (base - final) * (1 + cos(pi * u)) / 2``
    with ``u = (images - warmup_images) / (total_images - warmup_images)``, and ``final`` after
    ``total_images``. ``base`` may be below ``final`` (a rise, such as the EMA's half-life)."""
    if images > total_images:
        return float(final)
    if images < warmup_images:
        return float(warmup_value + (base - warmup_value) * images / warmup_images)
    u = (images - warmup_images) / float(total_images - warmup_images)
    return float(base + (final - base) * (1.0 - 0.5 * (1.0 + math.cos(math.pi * u))))


class CosineValue:
    """:func:`cosine_value` of a hyperparameter over generator steps: ``value_at(step)`` is the value
    after ``step`` generator steps of ``images_per_step`` images each.

    Args:
        base, final: the values at 0 images and from ``total_images`` on.
        total_images: the end of the decay (positive); warmup_images: the warm-up's length (0:
            none; less than ``total_images``); warmup_value: where the warm-up starts.
        images_per_step: images seen per generator step (positive).
    """

    def __init__(self, base, final, total_images, warmup_images=0, warmup_value=0.0, images_per_step=1):
        if not total_images > 0 or not images_per_step > 0:
            raise ValueError(f"CosineValue: total_images ({total_images}) and images_per_step "
                             f"({images_per_step}) must be positive")
        if not 0 <= warmup_images < total_images:
            raise ValueError(f"CosineValue: warmup_images must be in [0, total_images={total_images}), "
                             f"got {warmup_images}")
        self.base, self.final = float(base), float(final)
        self.total_images, self.warmup_images = float(total_images), float(warmup_images)
        self.warmup_value, self.images_per_step = float(warmup_value), float(images_per_step)

    def value_at(self, step):
        return cosine_value(step * self.images_per_step, self.base, self.final, self.total_images,
                            self.warmup_images, self.warmup_value)

    def __repr__(self):
        return (f"CosineValue({self.base:g} -> {self.final:g} over {self.total_images:g} images, "
                f"warm-up {self.warmup_images:g}, {self.images_per_step:g} images per step)")


class LRSchedule:
    """Base class: ``lr_at(step)`` is the rate after ``step`` calls of ``step()``.

    Args:
        optimizer: any object with a settable ``lr`` attribute; its value at construction is
            the base rate.

    Attributes:
        base_lr: the rate at step 0.
        last_step: how many times ``step()`` was called.
    """

    def __init__(self, optimizer):
        self.optimizer = optimizer
        self.base_lr = float(optimizer.lr)
        self.last_step = 0
        optimizer.lr = self.lr_at(0)

    def lr_at(self, step):
        raise NotImplementedError

    def step(self):
        """Advance one step and set the optimizer's rate; returns the new rate."""
        self.last_step += 1
        self.optimizer.lr = self.lr_at(self.last_step)
        return self.optimizer.lr

    @property
    def lr(self):
        """The current rate, ``lr_at(last_step)``."""
        return self.lr_at(self.last_step)

    def state_dict(self):
        """``{"type", "base_lr", "last_step"}``."""
        return {"type": type(self).__name__, "base_lr": self.base_lr, "last_step": self.last_step}

    def validate_state_dict(self, state_dict):
        """Raise ValueError if ``state_dict`` is not a state of this kind of schedule."""
        kind = state_dict.get("type", type(self).__name__)
        if kind != type(self).__name__:
            raise ValueError(f"{type(self).__name__}.load_state_dict: the state dict is for a {kind}")
        for key in ("base_lr", "last_step"):
            if key not in state_dict:
                raise ValueError(f"{type(self).__name__}.load_state_dict: missing key {key!r}")

    def load_state_dict(self, state_dict):
        """Restore ``base_lr`` and ``last_step`` and set the optimizer's rate accordingly."""
        self.validate_state_dict(state_dict)
        self.base_lr = float(state_dict["base_lr"])
        self.last_step = int(state_dict["last_step"])
        self.optimizer.lr = self.lr_at(self.last_step)


class ConstantLR(LRSchedule):
    """The base rate at every step."""

    def lr_at(self, step):
        return self.base_lr


class LinearDecayLR(LRSchedule):
    """``base_lr * (total_steps - step) / total_steps``: the base rate at step 0, exactly 0 at
    ``total_steps`` and after.

    Args:
        optimizer: object with a settable ``lr``.
        total_steps: the step at which the rate reaches 0 (a positive int).
    """

    def __init__(self, optimizer, total_steps):
        if int(total_steps) != total_steps or total_steps <= 0:
            raise ValueError(f"LinearDecayLR: total_steps must be a positive integer, got {total_steps!r}")
        self.total_steps = int(total_steps)
        super().__init__(optimizer)

    def lr_at(self, step):
        remaining = max(self.total_steps - step, 0)
        return self.base_lr * remaining / self.total_steps


class CosineLR(LRSchedule):
    """The rate (and optionally Adam's beta2) along :class:`CosineValue` curves counted in images:
    the optimizer's rate at construction down to ``final_lr``; with ``final_beta2``, ``beta2`` from
    the optimizer's own to it over the same images (R3GAN: 0.9 -> 0.99). The warm-up raises the
    rate from 0; beta2 has none (it starts at its base).

    Args:
        optimizer: an object with settable ``lr`` (and ``beta2`` when ``final_beta2`` is given).
        final_lr: the rate from ``total_images`` on.
        total_images, warmup_images, images_per_step: as :class:`CosineValue`.
        final_beta2: None (beta2 constant) or its final value.
    """

    def __init__(self, optimizer, final_lr, total_images, warmup_images=0, images_per_step=1, final_beta2=None):
        self.curve = CosineValue(float(optimizer.lr), final_lr, total_images, warmup_images, 0.0, images_per_step)
        self.beta2_curve = None
        if final_beta2 is not None:
            self.beta2_curve = CosineValue(float(optimizer.beta2), final_beta2, total_images, 0, 0.0, images_per_step)
        super().__init__(optimizer)
        self._set_beta2()

    def lr_at(self, step):
        return self.curve.value_at(step) * self.base_lr / self.curve.base if self.curve.base else 0.0

    def beta2_at(self, step):
        """Adam's beta2 after ``step`` steps (None when beta2 is not scheduled)."""
        return None if self.beta2_curve is None else self.beta2_curve.value_at(step)

    def _set_beta2(self):
        if self.beta2_curve is not None:
            self.optimizer.beta2 = self.beta2_at(self.last_step)

    def step(self):
        lr = super().step()
        self._set_beta2()
        return lr

    def load_state_dict(self, state_dict):
        super().load_state_dict(state_dict)
        self._set_beta2()


SCHEDULES = ("constant", "linear", "cosine")


def make_schedule(name, optimizer, total_steps=None, **cosine):
    """The schedule called ``name`` (one of :data:`SCHEDULES`) for ``optimizer``.

    ``total_steps`` is needed by ``"linear"`` (the rate decays to exactly 0 at that step);
    ``"cosine"`` takes :class:`CosineLR`'s keywords (``final_lr``, ``total_images``, ...).
    """
    if name == "constant":
        return ConstantLR(optimizer)
    if name == "linear":
        if total_steps is None:
            raise ValueError("make_schedule('linear', ...) needs total_steps")
        return LinearDecayLR(optimizer, total_steps)
    if name == "cosine":
        return CosineLR(optimizer, **cosine)
    raise ValueError(f"unknown learning-rate schedule {name!r}; accepted: {', '.join(SCHEDULES)}")
