"""Elementwise arithmetic with NumPy broadcasting: add, sub, mul, div, neg, pow.

Broadcast inputs get their gradients summed back to their own shapes with ``sum_to``.
"""
from gpgan.autograd import FunctionNode
from gpgan.functions._args import broadcast_error
from gpgan.functions.array import sum_to
from gpgan.functions.math import log


__all__ = ['add', 'sub', 'mul', 'div', 'neg', 'pow']


class Add(FunctionNode):
    def forward(self, inputs):
        a, b = inputs
        self.shapes = (a.shape, b.shape)
        try:
            return (a + b,)
        except ValueError:
            raise broadcast_error("add", a, b) from None

    def backward(self, indexes, grad_outputs):
        gy, = grad_outputs
        return tuple(sum_to(gy, self.shapes[i]) for i in indexes)


class Sub(FunctionNode):
    def forward(self, inputs):
        a, b = inputs
        self.shapes = (a.shape, b.shape)
        try:
            return (a - b,)
        except ValueError:
            raise broadcast_error("sub", a, b) from None

    def backward(self, indexes, grad_outputs):
        gy, = grad_outputs
        return tuple(sum_to(gy if i == 0 else -gy, self.shapes[i]) for i in indexes)


class Mul(FunctionNode):
    def forward(self, inputs):
        a, b = inputs
        self.retain_inputs((0, 1))
        try:
            return (a * b,)
        except ValueError:
            raise broadcast_error("mul", a, b) from None

    def backward(self, indexes, grad_outputs):
        a, b = self.get_retained_inputs()
        gy, = grad_outputs
        return tuple(sum_to(gy * b, a.shape) if i == 0 else sum_to(gy * a, b.shape) for i in indexes)


class Div(FunctionNode):
    def forward(self, inputs):
        a, b = inputs
        self.retain_inputs((0, 1))
        try:
            return (a / b,)
        except ValueError:
            raise broadcast_error("div", a, b) from None

    def backward(self, indexes, grad_outputs):
        a, b = self.get_retained_inputs()
        gy, = grad_outputs
        ga = gy / b
        out = []
        for i in indexes:
            if i == 0:
                out.append(sum_to(ga, a.shape))
            else:
                out.append(sum_to(-ga * a / b, b.shape))
        return tuple(out)


class Neg(FunctionNode):
    def forward(self, inputs):
        return (-inputs[0],)

    def backward(self, indexes, grad_outputs):
        return (-grad_outputs[0],)


class PowScalar(FunctionNode):
    """``x ** p`` for a constant number ``p``."""

    def __init__(self, exponent):
        self.exponent = exponent

    def forward(self, inputs):
        x, = inputs
        self.retain_inputs((0,))
        return (x ** x.dtype.type(self.exponent) if x.dtype.kind == "f" else x ** self.exponent,)

    def backward(self, indexes, grad_outputs):
        x, = self.get_retained_inputs()
        p = self.exponent
        if p == 0:
            return (grad_outputs[0] * 0.0,)
        return (grad_outputs[0] * p * x ** (p - 1),)


class Pow(FunctionNode):
    """``a ** b`` for two Variables (``a > 0`` wherever the gradient for ``b`` is needed)."""

    def forward(self, inputs):
        a, b = inputs
        self.retain_inputs((0, 1))
        self.retain_outputs((0,))
        try:
            return (a ** b,)
        except ValueError:
            raise broadcast_error("pow", a, b) from None

    def backward(self, indexes, grad_outputs):
        a, b = self.get_retained_inputs()
        y, = self.get_retained_outputs()
        gy, = grad_outputs
        out = []
        for i in indexes:
            if i == 0:
                out.append(sum_to(gy * b * a ** (b - 1.0), a.shape))
            else:
                out.append(sum_to(gy * y * log(a), b.shape))
        return tuple(out)


def add(a, b):
    """``a + b`` with broadcasting."""
    return Add().apply((a, b))[0]


def sub(a, b):
    """``a - b`` with broadcasting."""
    return Sub().apply((a, b))[0]


def mul(a, b):
    """``a * b`` with broadcasting."""
    return Mul().apply((a, b))[0]


def div(a, b):
    """``a / b`` with broadcasting."""
    return Div().apply((a, b))[0]


def neg(x):
    """``-x``."""
    return Neg().apply((x,))[0]


def pow(x, exponent):
    """``x ** exponent``; ``exponent`` may be a number or a Variable (then ``x`` must be positive)."""
    if isinstance(exponent, (int, float)):
        return PowScalar(exponent).apply((x,))[0]
    return Pow().apply((x, exponent))[0]
