"""Weight initializers, in place, seeded by gpgan's global generator or an explicit ``rng``.

Names, arguments and formulas follow ``torch.nn.init`` (``calculate_gain``, fan computation,
Glorot/He bounds, orthogonal via QR with sign correction). One deliberate difference:
:func:`normal_` defaults to ``std=0.02``, the DCGAN initialization (torch's default is 1).

Every function takes a :class:`~gpgan.Parameter`, a Variable or a raw array, writes into it in
place and returns it. Random numbers are drawn on the CPU with NumPy (float64, then cast) and copied
to the tensor's device, so a seed gives the same weights on every device and in every dtype.
"""
import math

import numpy

from gpgan.autograd import Variable
from gpgan.backend import device_of, get_rng, to_device

__all__ = [
    "calculate_gain", "uniform_", "normal_", "constant_", "zeros_", "ones_", "xavier_uniform_",
    "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "orthogonal_",
]

_LINEAR_LIKE = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
                "conv_transpose3d", "sigmoid", "identity")


def calculate_gain(nonlinearity, param=None):
    """The gain torch recommends for ``nonlinearity``: 1 for linear/conv/sigmoid, 5/3 for tanh,
    sqrt(2) for relu, sqrt(2 / (1 + a^2)) for leaky_relu with slope ``param`` (default 0.01),
    3/4 for selu."""
    if nonlinearity in _LINEAR_LIKE:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3.0
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif isinstance(param, (int, float)) and not isinstance(param, bool):
            slope = float(param)
        else:
            raise ValueError(f"calculate_gain: negative_slope {param!r} is not a number")
        return math.sqrt(2.0 / (1.0 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4.0
    raise ValueError(f"calculate_gain: unsupported nonlinearity {nonlinearity!r}; accepted: "
                     + ", ".join(_LINEAR_LIKE + ("tanh", "relu", "leaky_relu", "selu")))


def _array(tensor):
    return tensor.data if isinstance(tensor, Variable) else tensor


def _fill(tensor, values):
    """Write the float64 NumPy ``values`` into ``tensor`` in place (cast, moved to its device)."""
    arr = _array(tensor)
    arr[...] = to_device(numpy.asarray(values).astype(arr.dtype, copy=False), device_of(arr))
    return tensor


def _calculate_fan_in_and_fan_out(tensor):
    """(fan_in, fan_out) as torch: dims 1 and 0 times the receptive field (product of dims 2..)."""
    shape = _array(tensor).shape
    if len(shape) < 2:
        raise ValueError(f"fan in and fan out need a tensor with at least 2 dimensions, got shape {shape}")
    receptive = 1
    for d in shape[2:]:
        receptive *= d
    return shape[1] * receptive, shape[0] * receptive


def _fan(tensor, mode):
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"mode {mode!r} is not supported; accepted: 'fan_in', 'fan_out'")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def uniform_(tensor, a=0.0, b=1.0, rng=None):
    """Fill with U(a, b)."""
    return _fill(tensor, get_rng(rng).uniform(a, b, size=_array(tensor).shape))


def normal_(tensor, mean=0.0, std=0.02, rng=None):
    """Fill with N(mean, std^2); ``std`` defaults to DCGAN's 0.02."""
    return _fill(tensor, get_rng(rng).normal(mean, std, size=_array(tensor).shape))


def constant_(tensor, val):
    """Fill with ``val``."""
    _array(tensor)[...] = val
    return tensor


def zeros_(tensor):
    return constant_(tensor, 0.0)


def ones_(tensor):
    return constant_(tensor, 1.0)


def xavier_uniform_(tensor, gain=1.0, rng=None):
    """Glorot uniform: U(-b, b) with b = gain * sqrt(6 / (fan_in + fan_out))."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(tensor, -bound, bound, rng=rng)


def xavier_normal_(tensor, gain=1.0, rng=None):
    """Glorot normal: N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out))."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)), rng=rng)


def kaiming_uniform_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu", rng=None):
    """He uniform: U(-b, b) with b = gain * sqrt(3 / fan), gain = calculate_gain(nonlinearity, a).

    ``a=sqrt(5)`` gives torch's default Linear/Conv weights, b = 1 / sqrt(fan_in).
    """
    std = calculate_gain(nonlinearity, a) / math.sqrt(_fan(tensor, mode))
    bound = math.sqrt(3.0) * std
    return uniform_(tensor, -bound, bound, rng=rng)


def kaiming_normal_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu", rng=None):
    """He normal: N(0, std^2) with std = gain / sqrt(fan)."""
    std = calculate_gain(nonlinearity, a) / math.sqrt(_fan(tensor, mode))
    return normal_(tensor, 0.0, std, rng=rng)


def orthogonal_(tensor, gain=1.0, rng=None):
    """(Semi-)orthogonal matrix (Saxe et al. 2013) on the (dim 0, rest) flattening, times ``gain``.

    QR of a standard normal matrix, with the signs of R's diagonal folded into Q so the result is
    uniformly distributed (as torch).
    """
    shape = _array(tensor).shape
    if len(shape) < 2:
        raise ValueError(f"orthogonal_ needs a tensor with at least 2 dimensions, got shape {shape}")
    rows = shape[0]
    cols = int(numpy.prod(shape[1:]))
    flat = get_rng(rng).standard_normal((rows, cols))
    if rows < cols:
        flat = flat.T
    q, r = numpy.linalg.qr(flat)
    q = q * numpy.sign(numpy.diag(r))
    if rows < cols:
        q = q.T
    return _fill(tensor, gain * q.reshape(shape))
