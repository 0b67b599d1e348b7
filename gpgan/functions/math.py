"""Elementwise math: exp, log, sqrt, square, abs, sin, cos, maximum, minimum, where, clip.

Conventions at kinks and ties (the derivative is undefined there; these are the choices made):

* ``abs``: gradient ``sign(x)``, so 0 at ``x == 0`` (as PyTorch).
* ``maximum(a, b)`` / ``minimum(a, b)``: on ties ``a == b`` the whole gradient goes to the
  *first* input ``a``; ``b`` gets zero.
* ``clip(x, min, max)``: the gradient passes where ``min <= x <= max`` (bounds inclusive, as
  PyTorch's ``clamp``) and is zero outside.

The piecewise functions compute their backward as ``gy * mask`` with :func:`mask_scale` (relu and
leaky_relu in :mod:`gpgan.functions.activation` with :func:`rectified_scale`, whose mask of two
factors is read from the activation's value instead of stored): linear in ``gy``, so a penalty
on the gradient still reaches everything upstream of ``gy``, and connected to the masked value
with the zero derivative the mask has (a structural zero, which costs nothing), so a penalty on
the gradient also reaches the function's input, with a zero gradient, as in PyTorch.
"""
import numpy

from gpgan import kernels
from gpgan.autograd import STRUCTURAL_ZERO, FunctionNode, Variable
from gpgan.backend import get_array_module
from gpgan.functions._args import array_of, broadcast_error, scalar_like
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


class MaskScale(_MaskNode):
    """``gy * mask`` for inputs ``(gy,)`` or ``(gy, ref)``; ``mask`` is a constant array.

    ``ref``, when given, is the value the mask was computed from (a function's retained input or
    output): the mask is a locally constant function of it. The node is linear in ``gy``, with
    ``MaskScale`` again as its gradient, so it differentiates to any order; in ``ref`` its
    derivative is zero almost everywhere, and the backward returns STRUCTURAL_ZERO for it.
    """

    structural_inputs = 1  # ref only ever gets STRUCTURAL_ZERO

    def __init__(self, mask):
        self.mask = mask

    def forward(self, inputs):
        if len(inputs) == 2:
            self.retain_inputs((1,))  # for the link of the gradient's own backward
        gy, mask = inputs[0], self.mask
        if getattr(mask, "shape", None) != gy.shape:
            return (gy * mask,)
        xp = get_array_module(gy)
        # The product's dtype: gy's for a boolean mask or one of gy's dtype (every mask gpgan makes).
        dtype = gy.dtype if mask.dtype == bool or mask.dtype == gy.dtype else xp.result_type(gy, mask)
        return (kernels.elementwise(xp, lambda out, g, m: xp.multiply(g, m, out=out), gy, mask, dtype=dtype),)

    def backward(self, indexes, grad_outputs):
        mask = self.get_mask()
        ref = self.get_retained_inputs()[0] if len(self.inputs) == 2 else None
        return tuple(mask_scale(grad_outputs[0], mask, ref) if i == 0 else STRUCTURAL_ZERO for i in indexes)


class RectifiedScale(FunctionNode):
    """``gy * (1 where ref > 0, else slope)`` for inputs ``(gy, ref)``: the gradient of the ReLU
    family (slope 0: ReLU), a :class:`MaskScale` whose mask is never stored but read from ``ref``
    (retained) each time. Where the Numba kernels run, one compiled pass (one read of ``gy`` and
    ``ref``, one write); else NumPy or CuPy passes. Both take the factor 1 as ``(1 - slope) +
    slope`` in ``gy``'s dtype (1, or next to it), so they give the same values. Linear in ``gy``
    with itself as its gradient; zero derivative in ``ref``.
    """

    structural_inputs = 1  # ref only ever gets STRUCTURAL_ZERO

    def __init__(self, slope):
        self.slope = slope

    def forward(self, inputs):
        self.retain_inputs((1,))
        return (rectified_gradient_array(*inputs, self.slope),)

    def backward(self, indexes, grad_outputs):
        ref, = self.get_retained_inputs()
        return tuple(rectified_scale(grad_outputs[0], ref, self.slope) if i == 0 else STRUCTURAL_ZERO
                     for i in indexes)


def rectified_gradient_array(gy, ref, slope):
    """``gy * (1 where ref > 0, else slope)`` on arrays of one shape, a new array: the forward of
    :class:`RectifiedScale`. One compiled pass where the Numba kernels run, else NumPy or CuPy
    passes, with the same values."""
    xp = get_array_module(gy)
    out = kernels.rectified_gradient(xp, gy, ref, slope)
    if out is not None:
        return out
    rise, slope = scalar_like(1 - slope, gy), scalar_like(slope, gy)

    def scale(out, g, r):
        xp.multiply(r > 0, rise, out=out)  # where positive: rise, then rise + slope
        out += slope
        out *= g

    return kernels.elementwise(xp, scale, gy, ref)


def rectified_scale(gy, ref, slope):
    """``gy * (1 where ref > 0, else slope)``, differentiable in ``gy`` (any order), with a zero
    derivative in the Variable ``ref`` of ``gy``'s shape (see :class:`RectifiedScale`)."""
    return RectifiedScale(slope).apply((gy, ref))[0]


def mask_scale(gy, mask, ref=None):
    """``gy * mask``, differentiable in ``gy``; ``mask`` a constant array (boolean or factors).

    Args:
        gy: the incoming gradient, a Variable.
        mask: an array broadcastable to ``gy``'s shape; its entries are treated as constants.
        ref: the Variable ``mask`` was computed from, or None when it depends on no Variable.
            With ``ref``, the result depends on ``ref`` with derivative zero (a structural zero):
            differentiating the result with respect to anything upstream of ``ref`` gives zeros
            rather than "unused".
    """
    return MaskScale(mask).apply((gy,) if ref is None else (gy, ref))[0]


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
        return (mask_scale(grad_outputs[0], get_array_module(x.data).sign(x.data), x),)


class _Select(_MaskNode):
    """Two inputs broadcast together; ``mask`` marks where the output took the first one.

    When the mask is computed from the inputs (maximum, minimum), the output is retained as the
    value the mask depends on (see :func:`mask_scale`); where's condition is a constant.
    """

    name = "select"
    mask_from_inputs = True

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
        if self.mask_from_inputs:
            self.retain_outputs((0,))
        return (self.value(xp, a, b),)

    def value(self, xp, a, b):
        return xp.where(self.mask, a, b)

    def operand_shapes(self, a, b):
        return a.shape, b.shape

    def backward(self, indexes, grad_outputs):
        gy, = grad_outputs
        mask = self.get_mask()
        ref = self.get_retained_outputs()[0] if self.mask_from_inputs else None
        out = []
        for i in indexes:
            m = mask if i == 0 else ~mask
            out.append(sum_to(mask_scale(gy, m, ref), self.shapes[i]))
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
    mask_from_inputs = False

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
        self.retain_outputs((0,))  # the value the mask depends on, for mask_scale
        return (y,)

    def backward(self, indexes, grad_outputs):
        y, = self.get_retained_outputs()
        return (mask_scale(grad_outputs[0], self.get_mask(), y),)


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
