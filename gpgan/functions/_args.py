"""Argument checks and constant helpers shared by gpgan.functions and gpgan.nn's layers.

Each check takes the public function's name first (``fn``), then the argument's name and value,
and raises a ValueError that names all three and what is accepted, e.g.
``conv2d: stride must be an int >= 1 or a pair of them, got 0``.
"""
import numbers

from gpgan.autograd import Variable
from gpgan.backend import get_array_module, scalar_array


def is_int(value):
    """True for Python and NumPy integers; False for booleans (``True`` is not a size)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_int(fn, name, value, minimum):
    """``value`` as an int, or ValueError unless it is an integer ``>= minimum``."""
    if not is_int(value) or value < minimum:
        raise ValueError(f"{fn}: {name} must be an int >= {minimum}, got {value!r}")
    return int(value)


def pair(fn, name, value, minimum):
    """``value`` (an int, or a pair of ints for height and width) as a tuple ``(h, w)``.

    ValueError unless both are integers ``>= minimum``.
    """
    both = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
    if len(both) != 2 or not all(is_int(v) and v >= minimum for v in both):
        raise ValueError(f"{fn}: {name} must be an int >= {minimum} or a pair of them, got {value!r}")
    return (int(both[0]), int(both[1]))


def check_4d(fn, name, value, layout="(N, C, H, W)"):
    """ValueError unless ``value`` (a Variable or array) has 4 dimensions, as ``layout`` names them."""
    if len(value.shape) != 4:
        raise ValueError(f"{fn}: {name} must have 4 dimensions {layout}, got shape {tuple(value.shape)}")


def axis_index(fn, axis, ndim, word="axis"):
    """``axis`` (negative counts from the end) as an index in ``range(ndim)``.

    ``word`` is what the caller calls it ("axis", "dim"). ValueError naming the accepted range.
    """
    if not -ndim <= axis < ndim:
        accepted = f"{-ndim} to {ndim - 1}" if ndim else "none"
        raise ValueError(f"{fn}: {word} {axis} is out of range for an input with {ndim} dimensions "
                         f"(accepted: {accepted})")
    return axis % ndim


def broadcast_error(fn, a, b):
    """The ValueError for operands whose shapes do not broadcast together."""
    return ValueError(f"{fn}: shapes {a.shape} and {b.shape} cannot be broadcast together")


def array_of(value):
    """The raw array of a Variable; anything else as it is."""
    return value.data if isinstance(value, Variable) else value


def constant(array):
    """A raw array as a constant Variable: no graph node, so no gradient flows into it."""
    return Variable._from_node(array, None)


def scalar_like(value, like):
    """``value`` as a 0-d array of ``like``'s dtype on its device (float32 math stays float32)."""
    return scalar_array(get_array_module(like), value, like.dtype)
