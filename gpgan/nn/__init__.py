"""Neural-network building blocks with torch.nn's names, shapes and state_dict keys.

Owns stateful building blocks (parameters, buffers, hooks, state_dict, device moves) and their
initialization; the computation of each layer is a call into :mod:`gpgan.functions`, and whole
architectures live in :mod:`gpgan.models`.

``Module`` / ``Parameter`` / ``ForwardPreHook`` / ``Sequential`` / ``ModuleList``; layers
``Linear``, ``Conv2d``, ``ConvTranspose2d``, ``BatchNorm1d``, ``BatchNorm2d``, ``LayerNorm``,
activations as modules, ``Flatten``, ``AvgPool2d``, ``Upsample``, ``Dropout``; ``spectral_norm``;
initializers in :mod:`gpgan.nn.init`.
"""
from gpgan.nn import init
from gpgan.nn.layers import (
    ELU, AvgPool2d, BatchNorm1d, BatchNorm2d, Conv2d, ConvTranspose2d, Dropout, Flatten, Identity, LayerNorm,
    LeakyReLU, Linear, ReLU, Sigmoid, Softplus, Tanh, Upsample,
)
from gpgan.nn.module import (
    ForwardPreHook, IncompatibleKeys, Module, ModuleList, Parameter, Sequential, StateDictError, count_parameters,
    functional_call,
)
from gpgan.nn.spectral_norm import SpectralNorm, remove_spectral_norm, spectral_norm

__all__ = [
    "init", "Module", "Parameter", "ForwardPreHook", "Sequential", "ModuleList", "IncompatibleKeys", "StateDictError",
    "count_parameters", "functional_call",
    "Linear", "Conv2d", "ConvTranspose2d", "BatchNorm1d", "BatchNorm2d", "LayerNorm",
    "ReLU", "LeakyReLU", "Tanh", "Sigmoid", "ELU", "Softplus", "Identity", "Flatten", "AvgPool2d",
    "Upsample", "Dropout",
    "spectral_norm", "remove_spectral_norm", "SpectralNorm",
]
