"""Adversarial losses and gradient penalties.

Owns the values a training step minimizes, as differentiable scalars (a penalty includes its
weight and lazy-regularization interval); it computes no parameter gradient and takes no
optimizer step, which belong to the trainer.

* :func:`make_loss` / :data:`LOSSES`: wgan, non_saturating, hinge, least_squares, rpgan
  (``critic_loss(real_logits, fake_logits)``, ``generator_loss(fake_logits, real_logits=None)``).
* :func:`make_penalty` / :data:`PENALTIES`: none, wgan_gp, r1, r2, r1r2, dragan, zero_gp, lp
  (``penalty(critic, real, fake, rng=None) -> (value, stats)``, attribute ``.interval``).
* :func:`gradient_norm`: mean ``||dD/dx||`` for logging.
"""
from gpgan.losses.adversarial import (
    LOSSES,
    AdversarialLoss,
    HingeLoss,
    LeastSquaresLoss,
    NonSaturatingLoss,
    RelativisticPairingLoss,
    WGANLoss,
    make_loss,
)
from gpgan.losses.penalties import (
    DRAGAN,
    LP,
    PENALTIES,
    R1,
    R1R2,
    R2,
    WGANGP,
    GradientPenalty,
    NoPenalty,
    ZeroGP,
    gradient_norm,
    input_gradient,
    make_penalty,
)

__all__ = [
    "LOSSES", "AdversarialLoss", "WGANLoss", "NonSaturatingLoss", "HingeLoss", "LeastSquaresLoss",
    "RelativisticPairingLoss", "make_loss",
    "PENALTIES", "GradientPenalty", "NoPenalty", "WGANGP", "R1", "R2", "R1R2", "DRAGAN", "ZeroGP", "LP",
    "make_penalty", "gradient_norm", "input_gradient",
]
