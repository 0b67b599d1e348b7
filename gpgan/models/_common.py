"""Helpers shared by the model families: option checks, normalization choices, initialization."""
import gpgan.nn as nn
from gpgan.nn import init as nn_init

CRITIC_NORMS = ("none", "layer", "spectral")
GENERATOR_NORMS = ("batch", "none")
ACTIVATIONS = ("relu", "leaky_relu", "tanh", "elu", "softplus")


def check_choice(model, option, value, choices):
    if value not in choices:
        raise ValueError(f"{model}: {option}={value!r} is not supported; accepted: "
                         + ", ".join(repr(c) for c in choices))
    return value


def check_positive_int(model, option, value):
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{model}: {option} must be a positive int, got {value!r}")
    return value


def activation(name):
    """A fresh activation module; leaky_relu uses slope 0.2 as common in GAN critics."""
    if name == "relu":
        return nn.ReLU()
    if name == "leaky_relu":
        return nn.LeakyReLU(0.2)
    if name == "tanh":
        return nn.Tanh()
    if name == "elu":
        return nn.ELU()
    return nn.Softplus()


def spectral_norm_all(module, rng=None):
    """Wrap every Linear / Conv2d / ConvTranspose2d of ``module`` with spectral_norm (after init:
    the wrapped weight is ``weight_orig``, the same array)."""
    for m in list(module.modules()):
        if isinstance(m, (nn.Linear, nn.Conv2d, nn.ConvTranspose2d)):
            nn.spectral_norm(m, rng=rng)
    return module


def dcgan_init(module, rng=None):
    """DCGAN (Radford et al. 2016): conv/linear weights N(0, 0.02), biases 0, BatchNorm scale N(1, 0.02)."""
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Conv2d, nn.ConvTranspose2d)):
            nn_init.normal_(m.weight, 0.0, 0.02, rng=rng)
            if m.bias is not None:
                nn_init.zeros_(m.bias)
        elif isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)) and m.weight is not None:
            nn_init.normal_(m.weight, 1.0, 0.02, rng=rng)
            nn_init.zeros_(m.bias)


def xavier_init(layer, gain, rng=None):
    """Glorot-uniform weight with ``gain``, zero bias (SNGAN's initialization)."""
    nn_init.xavier_uniform_(layer.weight, gain=gain, rng=rng)
    if layer.bias is not None:
        nn_init.zeros_(layer.bias)
    return layer
