"""Class-conditional wrappers for any generator and any critic with a feature map (every critic
of :data:`gpgan.models.MODELS`: ``features`` is the input of its final linear map).

* :class:`ConditionalGenerator`: ``G(z, y) = G0(concat(z, E y))``, with ``E`` a learned embedding
  of the one-hot label (a bias-free linear map, as R3GAN's ``EmbeddingLayer``) and ``G0`` any
  generator built for ``latent_dim + embedding_dim`` inputs.
* :class:`ProjectionCritic`: the projection discriminator of Miyato and Koyama 2018,
  ``D(x, y) = psi(phi(x)) + <V y, phi(x)>``, with ``phi`` the critic's features and ``psi`` its
  final linear map; the critic provides ``features(x)`` (N, F) and ``logits(phi)`` (N, 1).

Labels are integer arrays (N,) in [0, num_classes), raw arrays on the data's device (never
differentiated). Without labels the generator draws classes in index order, ``y_i = i mod K``,
so every sample, grid and evaluation that calls ``G(z)`` covers all classes evenly; a critic needs
its labels.
"""
import math


import gpgan.functions as F
import gpgan.nn as nn
from gpgan.autograd import Variable
from gpgan.backend import get_array_module
from gpgan.nn import init as nn_init

__all__ = ["ConditionalGenerator", "ProjectionCritic", "one_hot", "supports_projection"]


def one_hot(labels, num_classes, dtype, like):
    """(N, num_classes) one-hot rows of ``labels`` (raw int array or Variable), on ``like``'s device."""
    y = labels.data if isinstance(labels, Variable) else labels
    xp = get_array_module(like.data if isinstance(like, Variable) else like)
    y = xp.asarray(y)
    if y.ndim != 1:
        raise ValueError(f"labels must be a 1-D integer array, got shape {tuple(y.shape)}")
    return (y[:, None] == xp.arange(num_classes)[None, :]).astype(dtype)


def supports_projection(critic):
    """Whether ``critic`` exposes ``features(x)`` and ``logits(phi)`` (a projection can wrap it)."""
    return callable(getattr(critic, "features", None)) and callable(getattr(critic, "logits", None))


class ConditionalGenerator(nn.Module):
    """``G(z, y) = base(concat(z, E onehot(y)))``: z (N, latent_dim), y (N,) ints -> the base's output.

    Args:
        base: a generator whose ``latent_dim`` is this one's plus ``embedding_dim``.
        num_classes: K. embedding_dim: the embedding's width.
        rng: NumPy Generator of the embedding's initialization, N(0, 1 / K) (R3GAN's MSR init).
    """

    def __init__(self, base, num_classes, embedding_dim, rng=None):
        super().__init__()
        if base.latent_dim <= embedding_dim:
            raise ValueError(f"ConditionalGenerator: the base's latent_dim {base.latent_dim} must exceed "
                             f"embedding_dim {embedding_dim}")
        self.base = base
        self.num_classes, self.embedding_dim = int(num_classes), int(embedding_dim)
        self.latent_dim = base.latent_dim - self.embedding_dim
        self.embedding = nn.Linear(self.num_classes, self.embedding_dim, bias=False, rng=rng)
        nn_init.normal_(self.embedding.weight, 0.0, 1.0 / math.sqrt(self.num_classes), rng=rng)

    def default_labels(self, n, like):
        """``i mod K`` for i < n: every class in turn (on ``like``'s device)."""
        xp = get_array_module(like.data if isinstance(like, Variable) else like)
        return xp.arange(n) % self.num_classes

    def forward(self, z, y=None):
        if y is None:
            y = self.default_labels(z.shape[0], z)
        e = self.embedding(one_hot(y, self.num_classes, z.dtype, z))
        return self.base(F.concat([z, e], axis=1))


class ProjectionCritic(nn.Module):
    """``D(x, y) = base.logits(phi) + sum(V[y] * phi)``, ``phi = base.features(x)`` (N, F).

    Args:
        base: a critic with ``features`` and ``logits`` (:func:`supports_projection`).
        num_classes: K. feature_dim: F (the width of ``features``).
        rng: NumPy Generator of V's initialization, N(0, 1 / (K F)) (R3GAN's projection gain).
    """

    def __init__(self, base, num_classes, feature_dim, rng=None):
        super().__init__()
        if not supports_projection(base):
            raise ValueError(f"ProjectionCritic: {type(base).__name__} has no features()/logits() to project on")
        self.base = base
        self.num_classes, self.feature_dim = int(num_classes), int(feature_dim)
        self.embedding = nn.Linear(self.num_classes, self.feature_dim, bias=False, rng=rng)
        nn_init.normal_(self.embedding.weight, 0.0, 1.0 / math.sqrt(self.num_classes * self.feature_dim), rng=rng)

    def forward(self, x, y=None):
        if y is None:
            raise ValueError("a class-conditional critic needs the labels: critic(x, y)")
        phi = self.base.features(x)
        v = self.embedding(one_hot(y, self.num_classes, phi.dtype, phi))
        return self.base.logits(phi) + F.sum(v * phi, axis=1, keepdims=True)


def feature_dim(critic):
    """F of ``critic.features`` (its ``feature_dim`` attribute)."""
    return int(critic.feature_dim)


