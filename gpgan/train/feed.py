"""The inputs of each training step, drawn on the CPU in one fixed order and moved to the device.

Per generator step, for each of its ``critic_steps`` critic steps: a real batch from the loader,
then the latent noise of the fake batch, then (on penalized critic steps) the penalty's random
numbers, then (with an augmentation) the augmentation's numbers of the real batch and of the fake
batch; after them, for a loss that pairs the generator's fakes with reals (rpgan), a real batch
of the generator step's own (as R3GAN's loop fetches one for each phase), then the generator
step's noise, its fake batch's augmentation numbers and (rpgan with an augmentation) those of its
real batch. A class-conditional run takes each real batch's labels from the loader and draws the
labels of each fake batch uniformly over the classes right after its noise. Noise and penalty numbers come from one NumPy
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
    ``draws`` (``penalty.draw``'s dict; None when this critic step is not penalized), in a
    conditional run the int64 (B,) ``labels`` of the reals and ``fake_labels`` of the fakes, and
    the augmentation's numbers of the real and the fake batch (``augment.draw``'s dicts; None
    without an augmentation)."""

    real: object
    noise: object
    draws: dict = None
    labels: object = None
    fake_labels: object = None
    augment_real: dict = None
    augment_fake: dict = None

    def named_arrays(self):
        """``[(name, array)]`` of every input array (None skipped), in a fixed order."""
        named = [("real", self.real), ("noise", self.noise), ("labels", self.labels),
                 ("fake_labels", self.fake_labels)]
        for group in ("draws", "augment_real", "augment_fake"):
            named += [(f"{group}/{k}", v) for k, v in sorted((getattr(self, group) or {}).items())]
        return [(name, a) for name, a in named if a is not None]


@dataclass
class StepInputs:
    """One generator step's inputs: its critic steps', the generator batch's ``noise``, for a
    pairing loss the generator step's ``real`` batch (None otherwise), in a conditional run the
    fakes' ``labels`` and the reals' ``real_labels``, and the augmentation's numbers of its fake
    batch (``augment``) and of its real batch (``augment_real``; None without them)."""

    critic: list = field(default_factory=list)
    noise: object = None
    real: object = None
    labels: object = None
    real_labels: object = None
    augment: dict = None
    augment_real: dict = None

    def map(self, fn):
        """A copy with ``fn`` applied to every array (e.g. a move to the device, or a slice)."""
        opt = lambda a: None if a is None else fn(a)  # noqa: E731
        each = lambda d: None if d is None else {k: fn(v) for k, v in d.items()}  # noqa: E731
        return StepInputs(
            critic=[CriticInputs(fn(c.real), fn(c.noise), each(c.draws), opt(c.labels), opt(c.fake_labels),
                                 each(c.augment_real), each(c.augment_fake))
                    for c in self.critic],
            noise=fn(self.noise), real=opt(self.real), labels=opt(self.labels), real_labels=opt(self.real_labels),
            augment=each(self.augment), augment_real=each(self.augment_real))

    def named_arrays(self):
        """``[(name, array)]`` of every array (None skipped), in one fixed order: for copying into
        a captured step's inputs, and for what a captured step depends on (their shapes)."""
        named = [("noise", self.noise), ("real", self.real), ("labels", self.labels),
                 ("real_labels", self.real_labels)]
        for group in ("augment", "augment_real"):
            named += [(f"{group}/{k}", v) for k, v in sorted((getattr(self, group) or {}).items())]
        named = [(name, a) for name, a in named if a is not None]
        for i, c in enumerate(self.critic):
            named += [(f"critic{i}/{name}", a) for name, a in c.named_arrays()]
        return named

    def arrays(self):
        """Every array, in :meth:`named_arrays`' order."""
        return [a for _, a in self.named_arrays()]


class InputFeed:
    """Draws :class:`StepInputs` for generator step after generator step.

    Args:
        loader: yields float32 CPU batches of ``batch_size`` (``next()``).
        rng: the NumPy generator of noise and penalty numbers.
        penalty: the gradient penalty (``draw(rng, real)``, ``interval``); None: no draws.
        latent_dim: the generator's input size.
        batch_size: critic batch size; generator_batch_size: the generator step's (None: the same).
        critic_steps: critic steps per generator step.
        generator_reals: draw a real batch for the generator step too (a pairing loss).
        num_classes: None, or the classes of a conditional run (the loader gives labels). The
            fakes' classes are drawn uniformly, except under a pairing loss: there each fake takes
            the class of the real it is paired with, in the critic's steps and the generator's, so
            that each pair is compared within one class (R3GAN's training code).
        augment: the augmentation (``draw(rng, x)``); None: none.
    """

    def __init__(self, loader, rng, penalty, latent_dim, batch_size, generator_batch_size, critic_steps,
                 generator_reals=False, num_classes=None, augment=None):
        self.loader = loader
        self.rng = rng
        self.penalty = penalty
        self.latent_dim = int(latent_dim)
        self.batch_size = int(batch_size)
        self.generator_batch_size = int(generator_batch_size or batch_size)
        self.critic_steps = int(critic_steps)
        self.generator_reals = bool(generator_reals)
        self.num_classes = num_classes
        self.augment = augment

    def _real(self):
        """A real batch and its labels (None when unconditional)."""
        if self.num_classes is None:
            return self.loader.next(), None
        return self.loader.next_with_labels()

    def _labels(self, n):
        """Uniform class labels for n fakes (None when unconditional)."""
        return None if self.num_classes is None else self.rng.integers(self.num_classes, size=n, dtype=numpy.int64)

    def noise(self, n):
        return self.rng.standard_normal((n, self.latent_dim)).astype(numpy.float32)

    def draw(self, step):
        """The CPU inputs of generator step ``step`` (0-based: the number of steps done before)."""
        inputs = StepInputs()
        for j in range(self.critic_steps):
            real, labels = self._real()
            noise = self.noise(self.batch_size)
            fake_labels = labels if self.generator_reals else self._labels(self.batch_size)
            draws = None
            if self.penalty is not None and is_penalized(step * self.critic_steps + j, self.penalty.interval):
                draws = self.penalty.draw(self.rng, real)
            critic = CriticInputs(real, noise, draws, labels, fake_labels)
            if self.augment is not None:  # the fake batch has the real one's shape and dtype
                critic.augment_real = self.augment.draw(self.rng, real)
                critic.augment_fake = self.augment.draw(self.rng, real)
            inputs.critic.append(critic)
        if self.generator_reals:
            inputs.real, inputs.real_labels = self._real()
        inputs.noise = self.noise(self.generator_batch_size)
        inputs.labels = inputs.real_labels if self.generator_reals else self._labels(self.generator_batch_size)
        if self.augment is not None:
            shape = (self.generator_batch_size,) + real.shape[1:]
            inputs.augment = self.augment.draw(self.rng, numpy.empty(shape, dtype=real.dtype))
            if inputs.real is not None:
                inputs.augment_real = self.augment.draw(self.rng, inputs.real)
        return inputs

    def next(self, step, device):
        """:meth:`draw`, moved to ``device``."""
        return self.draw(step).map(lambda a: to_device(a, device))
