"""The inputs of each training step, drawn on the CPU in one fixed order and moved to the device.

Per generator step, for each of its ``critic_steps`` critic steps: a real batch from the loader,
then the latent noise of the fake batch, then (on penalized critic steps) the penalty's random
numbers, then (with an augmentation) the augmentation's numbers of the real batch and of the fake
batch; after them the generator step's noise and its fake batch's augmentation numbers. Noise and penalty numbers come from one NumPy
generator (saved in checkpoints as ``"trainer"``); the loader has its own state. Drawing a whole
step up front changes nothing in these streams, and lets the step run on the device without
coming back to the host.

Every array has the batch as its first axis, so a data-parallel process can take its slice.
"""
from dataclasses import dataclass, field

import numpy

from gpgan.backend import to_device

__all__ = ["CriticInputs", "StepInputs", "InputFeed", "is_penalized"]


def is_penalized(critic_step, interval):
    """Whether critic step ``critic_step`` (counted over the run from 0) applies the penalty:
    lazy regularization penalizes every ``interval``-th one."""
    return critic_step % interval == 0


@dataclass
class CriticInputs:
    """One critic step's inputs: ``real`` (B, ...) data, ``noise`` (B, latent), the penalty's
    ``draws`` (``penalty.draw``'s dict; None when this critic step is not penalized) and the
    augmentation's numbers of the real and the fake batch (``augment.draw``'s dicts; None without
    an augmentation)."""

    real: object
    noise: object
    draws: dict = None
    augment_real: dict = None
    augment_fake: dict = None

    def arrays(self):
        """``[(name, array)]`` of every input array, in a fixed order."""
        named = [("real", self.real), ("noise", self.noise)]
        for group in ("draws", "augment_real", "augment_fake"):
            named += [(f"{group}/{k}", v) for k, v in sorted((getattr(self, group) or {}).items())]
        return named


@dataclass
class StepInputs:
    """One generator step's inputs: its critic steps', the generator batch's ``noise`` and the
    augmentation's numbers of its fake batch (``augment``; None without an augmentation)."""

    critic: list = field(default_factory=list)
    noise: object = None
    augment: dict = None

    def map(self, fn):
        """A copy with ``fn`` applied to every array (e.g. a move to the device, or a slice)."""
        each = lambda d: None if d is None else {k: fn(v) for k, v in d.items()}  # noqa: E731
        return StepInputs(
            critic=[CriticInputs(fn(c.real), fn(c.noise), each(c.draws), each(c.augment_real), each(c.augment_fake))
                    for c in self.critic],
            noise=fn(self.noise), augment=each(self.augment))


class InputFeed:
    """Draws :class:`StepInputs` for generator step after generator step.

    Args:
        loader: yields float32 CPU batches of ``batch_size`` (``next()``).
        rng: the NumPy generator of noise and penalty numbers.
        penalty: the gradient penalty (``draw(rng, real)``, ``interval``); None: no draws.
        latent_dim: the generator's input size.
        batch_size: critic batch size; generator_batch_size: the generator step's (None: the same).
        critic_steps: critic steps per generator step.
        augment: the augmentation (``draw(rng, x)``); None: none.
    """

    def __init__(self, loader, rng, penalty, latent_dim, batch_size, generator_batch_size, critic_steps,
                 augment=None):
        self.loader = loader
        self.rng = rng
        self.penalty = penalty
        self.latent_dim = int(latent_dim)
        self.batch_size = int(batch_size)
        self.generator_batch_size = int(generator_batch_size or batch_size)
        self.critic_steps = int(critic_steps)
        self.augment = augment

    def noise(self, n):
        return self.rng.standard_normal((n, self.latent_dim)).astype(numpy.float32)

    def draw(self, step):
        """The CPU inputs of generator step ``step`` (0-based: the number of steps done before)."""
        inputs = StepInputs()
        for j in range(self.critic_steps):
            real = self.loader.next()
            noise = self.noise(self.batch_size)
            draws = None
            if self.penalty is not None and is_penalized(step * self.critic_steps + j, self.penalty.interval):
                draws = self.penalty.draw(self.rng, real)
            critic = CriticInputs(real, noise, draws)
            if self.augment is not None:  # the fake batch has the real one's shape and dtype
                critic.augment_real = self.augment.draw(self.rng, real)
                critic.augment_fake = self.augment.draw(self.rng, real)
            inputs.critic.append(critic)
        inputs.noise = self.noise(self.generator_batch_size)
        if self.augment is not None:
            shape = (self.generator_batch_size,) + real.shape[1:]
            inputs.augment = self.augment.draw(self.rng, numpy.empty(shape, dtype=real.dtype))
        return inputs

    def next(self, step, device):
        """:meth:`draw`, moved to ``device``."""
        return self.draw(step).map(lambda a: to_device(a, device))
