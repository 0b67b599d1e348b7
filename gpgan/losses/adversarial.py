"""Adversarial losses computed from critic logits.

Every loss is an object with two methods, both returning a scalar Variable to *minimize*:

* ``critic_loss(real_logits, fake_logits)``: the critic's loss. ``fake_logits`` must come from
  detached generator samples (the caller detaches them), so this loss only reaches the critic.
* ``generator_loss(fake_logits, real_logits=None)``: the generator's loss, through the critic.
  Only a loss with ``pairs_real = True`` (the relativistic pairing loss) reads ``real_logits``:
  the critic's outputs on a real batch, which the caller computes for the generator's step too.

Logits have any shape, usually (N, 1); every loss averages over all entries. The convention is
that a high logit means "real". A pairing loss pairs ``real_logits[i]`` with ``fake_logits[i]``,
so the two must have one shape.
"""
import gpgan.functions as F


class AdversarialLoss:
    """Base class; subclasses set ``name`` and implement both losses."""

    name = None
    #: whether :meth:`generator_loss` needs the critic's logits on real data
    pairs_real = False

    def critic_loss(self, real_logits, fake_logits):
        raise NotImplementedError

    def generator_loss(self, fake_logits, real_logits=None):
        raise NotImplementedError

    def __repr__(self):
        return f"{type(self).__name__}()"


class WGANLoss(AdversarialLoss):
    """Wasserstein loss (Arjovsky et al. 2017): critic ``E[D(fake)] - E[D(real)]``, generator
    ``-E[D(fake)]``. Needs a Lipschitz constraint (a gradient penalty, clipping or spectral norm)."""

    name = "wgan"

    def critic_loss(self, real_logits, fake_logits):
        return F.mean(fake_logits) - F.mean(real_logits)

    def generator_loss(self, fake_logits, real_logits=None):
        return -F.mean(fake_logits)


class NonSaturatingLoss(AdversarialLoss):
    """The standard GAN's cross-entropy with the non-saturating generator loss (Goodfellow et al.
    2014), in softplus form: critic ``E[softplus(-D(real))] + E[softplus(D(fake))]``, generator
    ``E[softplus(-D(fake))]`` (``softplus(-t) = -log sigmoid(t)``)."""

    name = "non_saturating"

    def critic_loss(self, real_logits, fake_logits):
        return F.mean(F.softplus(-real_logits)) + F.mean(F.softplus(fake_logits))

    def generator_loss(self, fake_logits, real_logits=None):
        return F.mean(F.softplus(-fake_logits))


class HingeLoss(AdversarialLoss):
    """Hinge loss (Lim & Ye 2017; Miyato et al. 2018): critic ``E[relu(1 - D(real))] +
    E[relu(1 + D(fake))]``, generator ``-E[D(fake)]``."""

    name = "hinge"

    def critic_loss(self, real_logits, fake_logits):
        return F.mean(F.relu(1.0 - real_logits)) + F.mean(F.relu(1.0 + fake_logits))

    def generator_loss(self, fake_logits, real_logits=None):
        return -F.mean(fake_logits)


class LeastSquaresLoss(AdversarialLoss):
    """Least-squares GAN (Mao et al. 2017) with targets a=0 (fake), b=1 (real), c=1: critic
    ``E[(D(real) - 1)^2] / 2 + E[D(fake)^2] / 2``, generator ``E[(D(fake) - 1)^2] / 2``."""

    name = "least_squares"

    def critic_loss(self, real_logits, fake_logits):
        return 0.5 * F.mean((real_logits - 1.0) ** 2) + 0.5 * F.mean(fake_logits ** 2)

    def generator_loss(self, fake_logits, real_logits=None):
        return 0.5 * F.mean((fake_logits - 1.0) ** 2)


class RelativisticPairingLoss(AdversarialLoss):
    """The relativistic pairing loss, RpGAN (Jolicoeur-Martineau 2019; with R1 and R2 the loss of
    R3GAN, Huang et al. 2024): each real sample is paired with the generated sample of its index,
    and the critic minimizes ``E[softplus(-(D(x_r) - D(x_f)))]``, the generator
    ``E[softplus(-(D(x_f) - D(x_r)))]``. The generator's loss reads the critic on real data
    (``real_logits``); the gradient it sends back reaches only the fakes' side."""

    name = "rpgan"
    pairs_real = True

    @staticmethod
    def _paired(first, second, who):
        if first.shape != second.shape:
            raise ValueError(f"rpgan {who}: real and fake logits are paired by index and must have one "
                             f"shape, got {tuple(first.shape)} and {tuple(second.shape)}")
        return first - second

    def critic_loss(self, real_logits, fake_logits):
        return F.mean(F.softplus(-self._paired(real_logits, fake_logits, "critic_loss")))

    def generator_loss(self, fake_logits, real_logits=None):
        if real_logits is None:
            raise ValueError("rpgan generator_loss: needs real_logits (the critic's outputs on a real batch)")
        return F.mean(F.softplus(-self._paired(fake_logits, real_logits, "generator_loss")))


_LOSS_CLASSES = {cls.name: cls for cls in (WGANLoss, NonSaturatingLoss, HingeLoss, LeastSquaresLoss,
                                           RelativisticPairingLoss)}
LOSSES = tuple(_LOSS_CLASSES)


def make_loss(name):
    """The adversarial loss called ``name`` (one of :data:`LOSSES`)."""
    try:
        return _LOSS_CLASSES[name]()
    except (KeyError, TypeError):
        raise ValueError(f"make_loss: unknown loss {name!r}; accepted: {', '.join(LOSSES)}") from None
