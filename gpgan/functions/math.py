"""Elementwise math: exp, log, sqrt, square, abs, sin, cos, maximum, minimum, where, clip.

Conventions at kinks and ties (the derivative is undefined there; these are the choices made):

* ``abs``: gradient ``sign(x)``, so 0 at ``x == 0`` (as PyTorch).
* ``maximum(a, b)`` / ``minimum(a, b)``: on ties ``a == b`` the whole gradient goes to the
  *first* input ``a``; ``b`` gets zero.
* ``clip(x, min, max)``: the gradient passes where ``min <= x <= max`` (bounds inclusive, as
  PyTorch's ``clamp``) and is zero outside.

The piecewise functions compute their backward as ``gy * mask`` with a constant mask (a
differentiable multiplication), so their gradient stays differentiable with respect to ``gy``:
the second derivative is zero almost everywhere, but a penalty on the gradient still reaches
everything upstream of ``gy``.
"""
import numpy

from gpgan.autograd import FunctionNode, Variable
from gpgan.backend import get_array_module
from gpgan.functions._args import array_of, broadcast_error, constant, scalar_like
from gpgan.functions.array import sum_to


__all__ = ['exp', 'log', 'sin', 'cos', 'sqrt', 'square', 'abs', 'maximum', 'minimum', 'where',
           'clip', 'clamp']


class _MaskNode(FunctionNode):
    """A node whose backward needs a boolean mask computed in forward; freed with the buffers."""

    mask = None

    def get_mask(self):
        if self.mask is None:
            raise self._released_error()
        return self.mask

    def release(self):
        super().release()
        self.mask = None

class Exp(FunctionNode):
    def forward(self, inputs):
        self.retain_outputs((0,))
        return (get_array_module(inputs[0]).exp(inputs[0]),)

    def backward(self, indexes, grad_outputs):
        y, = self.get_retained_outputs()
        return (grad_outputs[0] * y,)


class Log(FunctionNode):
    def forward(self, inputs):
        self.retain_inputs((0,))
        return (get_array_module(inputs[0]).log(inputs[0]),)

    def backward(self, indexes, grad_outputs):
        x, = self.get_retained_inputs()
        return (grad_outputs[0] / x,)


class Sin(FunctionNode):
    def forward(self, inputs):
        self.retain_inputs((0,))
        return (get_array_module(inputs[0]).sin(inputs[0]),)

    def backward(self, indexes, grad_outputs):
        x, = self.get_retained_inputs()
        return (grad_outputs[0] * cos(x),)


class Cos(FunctionNode):
    def forward(self, inputs):
        self.retain_inputs((0,))
        return (get_array_module(inputs[0]).cos(inputs[0]),)

    def backward(self, indexes, grad_outputs):
        x, = self.get_retained_inputs()
        return (-grad_outputs[0] * sin(x),)


def exp(x):
    """Elementwise e**x."""
    return Exp().apply((x,))[0]


def log(x):
    """Elementwise natural logarithm."""
    return Log().apply((x,))[0]


def sin(x):
    """Elementwise sine."""
    return Sin().apply((x,))[0]


def cos(x):
    """Elementwise cosine."""
    return Cos().apply((x,))[0]


class Sqrt(FunctionNode):
    def forward(self, inputs):
        self.retain_outputs((0,))
        return (get_array_module(inputs[0]).sqrt(inputs[0]),)

    def backward(self, indexes, grad_outputs):
        y, = self.get_retained_outputs()
        # d sqrt(x) = 1 / (2 sqrt(x)): written with the output, so the double backward flows through y.
        return (grad_outputs[0] / (y * 2.0),)


class Square(FunctionNode):
    def forward(self, inputs):
        x, = inputs
        self.retain_inputs((0,))
        return (x * x,)

    def backward(self, indexes, grad_outputs):
        x, = self.get_retained_inputs()
        return (grad_outputs[0] * (x * 2.0),)


class Abs(FunctionNode):
    def forward(self, inputs):
        x, = inputs
        self.retain_inputs((0,))
        return (get_array_module(x).abs(x),)

    def backward(self, indexes, grad_outputs):
        x, = self.get_retained_inputs()
        xp = get_array_module(x.data)
        return (grad_outputs[0] * constant(xp.sign(x.data)),)


class _Select(_MaskNode):
    """Two inputs broadcast together; ``mask`` marks where the output took the first one."""

    name = "select"

    def select(self, xp, a, b, shape):
        raise NotImplementedError

    def broadcast_error(self, a, b):
        return broadcast_error(self.name, a, b)

    def forward(self, inputs):
        a, b = inputs
        self.shapes = (a.shape, b.shape)
        try:
            shape = numpy.broadcast_shapes(*self.operand_shapes(a, b))
        except ValueError:
            raise self.broadcast_error(a, b) from None
        xp = get_array_module(a, b)
        self.mask = self.select(xp, a, b, shape)
        return (self.value(xp, a, b),)

    def value(self, xp, a, b):
        return xp.where(self.mask, a, b)

    def operand_shapes(self, a, b):
        return a.shape, b.shape

    def backward(self, indexes, grad_outputs):
        gy, = grad_outputs
        mask = self.get_mask()
        out = []
        for i in indexes:
            m = mask if i == 0 else ~mask
            out.append(sum_to(gy * constant(m), self.shapes[i]))
        return tuple(out)


class Maximum(_Select):
    name = "maximum"

    def select(self, xp, a, b, shape):
        return a >= b  # ties go to the first input

    def value(self, xp, a, b):
        return xp.maximum(a, b)  # propagates NaN like NumPy


class Minimum(_Select):
    name = "minimum"

    def select(self, xp, a, b, shape):
        return a <= b  # ties go to the first input

    def value(self, xp, a, b):
        return xp.minimum(a, b)


class Where(_Select):
    name = "where"

    def __init__(self, condition):
        self.condition = condition

    def operand_shapes(self, a, b):
        return self.condition.shape, a.shape, b.shape

    def broadcast_error(self, a, b):
        return ValueError(f"where: condition of shape {self.condition.shape} and values of shapes {a.shape} "
                          f"and {b.shape} cannot be broadcast together")

    def select(self, xp, a, b, shape):
        return xp.broadcast_to(xp.asarray(self.condition), shape)


class Clip(_MaskNode):
    def __init__(self, lo, hi):
        self.lo, self.hi = lo, hi

    def forward(self, inputs):
        x, = inputs
        xp = get_array_module(x)
        lo = None if self.lo is None else scalar_like(self.lo, x)
        hi = None if self.hi is None else scalar_like(self.hi, x)
        inside = xp.ones(x.shape, dtype=bool)
        y = x
        if lo is not None:
            inside &= x >= lo
            y = xp.maximum(y, lo)
        if hi is not None:
            inside &= x <= hi
            y = xp.minimum(y, hi)  # after the lower bound: with min > max every entry is max, as NumPy
        self.mask = inside
        return (y,)

    def backward(self, indexes, grad_outputs):
        return (grad_outputs[0] * constant(self.get_mask()),)


def sqrt(x):
    """Elementwise square root (``x >= 0``; the gradient is infinite at 0)."""
    return Sqrt().apply((x,))[0]


def square(x):
    """Elementwise ``x * x``."""
    return Square().apply((x,))[0]


def abs(x):
    """Elementwise absolute value; its gradient is ``sign(x)`` (0 at ``x == 0``)."""
    return Abs().apply((x,))[0]


def maximum(a, b):
    """Elementwise maximum of ``a`` and ``b`` (broadcast). On ties the gradient goes to ``a``."""
    return Maximum().apply((a, b))[0]


def minimum(a, b):
    """Elementwise minimum of ``a`` and ``b`` (broadcast). On ties the gradient goes to ``a``."""
    return Minimum().apply((a, b))[0]


def _condition_array(condition):
    data = array_of(condition)
    if not hasattr(data, "dtype"):
        data = numpy.asarray(data)
    if data.dtype.kind != "b":
        raise TypeError(f"where: condition must be a boolean array or Variable, got dtype {data.dtype}; "
                        "compare first, e.g. where(x.data > 0, x, y)")
    return data


def where(condition, x, y):
    """``x`` where ``condition`` is true, else ``y``; all three are broadcast together.

    Args:
        condition: a boolean array or Variable (no gradient flows into it).
        x, y: Variables, arrays or numbers; each gets the gradient of the entries it supplied,
            summed back to its own shape.
    """
    return Where(_condition_array(condition)).apply((x, y))[0]


def clip(x, min=None, max=None):
    """Limit ``x`` to ``[min, max]`` elementwise (PyTorch's ``clamp``).

    ``min``/``max`` are numbers, arrays (constants) or None (no bound). The gradient passes where
    ``min <= x <= max`` (inclusive) and is zero elsewhere. When a bound is a Variable, the result
    is ``minimum``/``maximum`` of the operands, so the bound gets its gradient too.
    """
    if min is None and max is None:
        raise ValueError("clip: at least one of min and max must be given")
    if isinstance(min, Variable) or isinstance(max, Variable):
        y = x
        if max is not None:
            y = minimum(y, max)
        if min is not None:
            y = maximum(y, min)
        return y
    return Clip(min, max).apply((x,))[0]


clamp = clip
