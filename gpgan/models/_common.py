"""Helpers shared by the model families: declared options, normalization choices, initialization.

Each model class declares the keyword options its constructor takes in ``options`` ({name:
:class:`~gpgan.schema.Field`}: type, default, bounds or choices, one line of doc), and
:func:`declares_options` checks them before the constructor runs; :func:`gpgan.models.make_model`
and the config's ``model.generator_options`` / ``model.critic_options`` check against the same
declarations. What ties options together (an image size the layers divide, R3GAN's stage lists)
stays in the constructors.
"""
import functools
import inspect

import gpgan.nn as nn
from gpgan.nn import init as nn_init
from gpgan.schema import Field, check_options, problems_line

CRITIC_NORMS = ("none", "layer", "spectral")
GENERATOR_NORMS = ("batch", "none")
ACTIVATIONS = ("relu", "leaky_relu", "tanh", "elu", "softplus")

OUT_CHANNELS = Field("int", 3, "channels of the generated images", minimum=1)
IN_CHANNELS = Field("int", 3, "channels of the images the critic reads", minimum=1)


def declares_options(cls):
    """Class decorator: the options given to ``cls``'s constructor that ``cls.options`` declares are
    checked and converted by their Fields (8.0 to 8, "1e-4" to 0.0001) before it runs. A value a
    Field refuses is a ValueError naming the class, the option and what is accepted."""
    init = cls.__init__
    signature = inspect.signature(init)

    @functools.wraps(init)
    def checked_init(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        given = {name: value for name, value in bound.arguments.items() if name in cls.options}
        checked, errors = check_options(cls.options, given, cls.__name__)
        if errors:
            raise ValueError(f"{cls.__name__}: {problems_line(errors)}")
        bound.arguments.update(checked)
        init(*bound.args, **bound.kwargs)

    cls.__init__ = checked_init
    return cls


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
