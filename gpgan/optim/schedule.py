"""Learning-rate schedules: they set ``optimizer.lr`` from a step count.

Call ``schedule.step()`` once per training iteration, after ``optimizer.step()`` (torch's order):
the k-th optimizer step then uses ``lr_at(k - 1)``, so the first step uses the base rate.
"""
__all__ = ["LRSchedule", "ConstantLR", "LinearDecayLR", "SCHEDULES", "make_schedule"]


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


SCHEDULES = ("constant", "linear")


def make_schedule(name, optimizer, total_steps=None):
    """The schedule called ``name`` (one of :data:`SCHEDULES`) for ``optimizer``.

    ``total_steps`` is needed by ``"linear"`` (the rate decays to exactly 0 at that step).
    """
    if name == "constant":
        return ConstantLR(optimizer)
    if name == "linear":
        if total_steps is None:
            raise ValueError("make_schedule('linear', ...) needs total_steps")
        return LinearDecayLR(optimizer, total_steps)
    raise ValueError(f"unknown learning-rate schedule {name!r}; accepted: {', '.join(SCHEDULES)}")
