"""Installs Python operators and array-like methods on :class:`gpgan.Variable`.

The engine (``gpgan.autograd``) knows no functions; this module, one layer up, gives Variables
``+ - * / ** @``, indexing and ``.sum()`` style methods that call the functions of this package,
and gives the engine the split pass it sums gradients with (:func:`gpgan.kernels.add_arrays`).
"""
from gpgan.autograd import Variable
from gpgan.autograd.engine import set_gradient_adder
from gpgan.functions import arithmetic, array, linalg, reduction
from gpgan.kernels import add_arrays


def _rsub(self, other):
    return arithmetic.sub(other, self)


def _rdiv(self, other):
    return arithmetic.div(other, self)


def _rpow(self, other):
    return arithmetic.Pow().apply((other, self))[0]


def _reshape(self, *shape):
    return array.reshape(self, *shape)


def _transpose(self, *axes):
    return array.transpose(self, *axes)


def _to(self, device):
    from gpgan.functions.device import to_device

    return to_device(self, device)


def install():
    set_gradient_adder(add_arrays)
    Variable.__add__ = arithmetic.add
    Variable.__radd__ = lambda self, other: arithmetic.add(other, self)
    Variable.__sub__ = arithmetic.sub
    Variable.__rsub__ = _rsub
    Variable.__mul__ = arithmetic.mul
    Variable.__rmul__ = lambda self, other: arithmetic.mul(other, self)
    Variable.__truediv__ = arithmetic.div
    Variable.__rtruediv__ = _rdiv
    Variable.__neg__ = arithmetic.neg
    Variable.__pos__ = lambda self: self
    Variable.__pow__ = arithmetic.pow
    Variable.__rpow__ = _rpow
    Variable.__matmul__ = linalg.matmul
    Variable.__rmatmul__ = lambda self, other: linalg.matmul(other, self)
    Variable.__getitem__ = array.getitem
    Variable.sum = reduction.sum
    Variable.mean = reduction.mean
    Variable.reshape = _reshape
    Variable.transpose = _transpose
    Variable.T = property(lambda self: array.transpose(self))
    Variable.to = _to
