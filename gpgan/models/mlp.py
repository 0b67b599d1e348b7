"""MLP generator and critic for 2-D toy data (8 Gaussians, 25 Gaussians, Swiss roll).

Defaults follow the toy experiments of WGAN-GP (Gulrajani et al. 2017, ``gan_toy.py``): latent
size 2, three hidden layers of width 512 with ReLU, a linear output (2 numbers for the generator,
one logit for the critic), no normalization.
"""
import gpgan.nn as nn
from gpgan.models._common import (
    ACTIVATIONS, CRITIC_NORMS, GENERATOR_NORMS, activation, declares_options, spectral_norm_all,
)
from gpgan.schema import Field

__all__ = ["MLPGenerator", "MLPCritic"]

WIDTH = Field("int", 512, "the hidden layers' width", minimum=1)
DEPTH = Field("int", 3, "the number of hidden layers", minimum=1)
ACTIVATION = Field("str", "relu", "the hidden layers' activation (leaky_relu: slope 0.2)", choices=list(ACTIVATIONS))


def _hidden_stack(in_dim, width, depth, act, norm, rng):
    layers = []
    for i in range(depth):
        layers.append(nn.Linear(in_dim if i == 0 else width, width, rng=rng))
        if norm == "batch":
            layers.append(nn.BatchNorm1d(width))
        elif norm == "layer":
            layers.append(nn.LayerNorm(width))
        layers.append(activation(act))
    return layers


@declares_options
class MLPGenerator(nn.Module):
    """z (N, latent_dim) -> points (N, out_dim): ``depth`` x [Linear(width), (BatchNorm1d), act], Linear.

    Args:
        latent_dim: size of z (default 2, as WGAN-GP's toy generator).
        out_dim: dimension of the generated points (2).
        width: hidden width (512).
        depth: number of hidden layers (3).
        activation: one of relu, leaky_relu (slope 0.2), tanh, elu, softplus.
        norm: "none" (default) or "batch" (BatchNorm1d after each hidden Linear).
        rng: NumPy Generator for the initialization (None: gpgan's global generator).
    """

    options = {
        "latent_dim": Field("int", 2, "size of z", minimum=1),
        "out_dim": Field("int", 2, "the generated points' dimension", minimum=1),
        "width": WIDTH,
        "depth": DEPTH,
        "activation": ACTIVATION,
        "norm": Field("str", "none", "none; batch: BatchNorm1d after each hidden Linear",
                      choices=list(GENERATOR_NORMS)),
    }

    def __init__(self, latent_dim=2, out_dim=2, width=512, depth=3, activation="relu", norm="none", rng=None):
        super().__init__()
        self.latent_dim = latent_dim
        layers = _hidden_stack(latent_dim, width, depth, activation, norm, rng)
        self.net = nn.Sequential(*layers, nn.Linear(width, out_dim, rng=rng))

    def forward(self, z):
        return self.net(z)


@declares_options
class MLPCritic(nn.Module):
    """points (N, in_dim) -> logits (N, 1): ``depth`` x [Linear(width), (LayerNorm), act], Linear(1).

    Args:
        in_dim: dimension of the points (2).
        width, depth, activation: as :class:`MLPGenerator` (512, 3, relu).
        norm: "none" (default, as WGAN-GP), "layer" (LayerNorm after each hidden Linear) or
            "spectral" (spectral_norm on every Linear, Miyato et al. 2018). No batch norm: a
            gradient penalty is taken per sample.
        rng: NumPy Generator for the initialization (None: gpgan's global generator).
    """

    options = {
        "in_dim": Field("int", 2, "the points' dimension", minimum=1),
        "width": WIDTH,
        "depth": DEPTH,
        "activation": ACTIVATION,
        "norm": Field("str", "none", "none (WGAN-GP); layer: LayerNorm after each hidden Linear; spectral: spectral "
                      "norm on every Linear (no batch norm: the penalty is per sample)", choices=list(CRITIC_NORMS)),
    }

    def __init__(self, in_dim=2, width=512, depth=3, activation="relu", norm="none", rng=None):
        super().__init__()
        layers = _hidden_stack(in_dim, width, depth, activation, norm, rng)
        self.net = nn.Sequential(*layers, nn.Linear(width, 1, rng=rng))
        if norm == "spectral":
            spectral_norm_all(self, rng)

    @property
    def feature_dim(self):
        """The width of :meth:`features` (what a projection critic projects on)."""
        return self.net[-1].in_features

    def features(self, x):
        """The input of the final Linear: (N, feature_dim)."""
        return self.net[:-1](x)

    def logits(self, phi):
        return self.net[-1](phi)

    def forward(self, x):
        return self.net(x)
