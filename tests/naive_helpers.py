"""Small helpers shared by the tests: naive (loop-by-loop) references, and the values and gradients
two implementations of an operation are compared on."""
import numpy as np

import gpgan


def pair(v):
    """``(v, v)`` for a number, ``tuple(v)`` for a pair: how the functions read kernel, stride, padding."""
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


def _probed(fn, arrays):
    """Leaf Variables of ``arrays``, fn's output on them, and the fixed weights ``r`` of the scalar
    <fn, r> whose gradients the comparisons take."""
    vs = [gpgan.Variable(a, requires_grad=True) for a in arrays]
    y = fn(*vs)
    r = gpgan.Variable(np.cos(np.arange(y.size, dtype=y.dtype)).reshape(y.shape))
    return vs, y, r


def values_and_grads(fn, arrays):
    """fn's value, the gradient of <fn, r> w.r.t. every input, and the gradient of the squared
    norm of those gradients (second order), as arrays."""
    vs, y, r = _probed(fn, arrays)
    grads = gpgan.grad((y * r).sum(), vs, create_graph=True)
    second = gpgan.grad(sum((g * g).sum() for g in grads), vs, allow_unused=True)  # a bias has none
    return [y.data] + [g.data for g in grads] + [g.data for g in second if g is not None]


def first_order_grads(fn, arrays):
    """fn's value and the gradient of <fn, r> w.r.t. every input, with no graph recorded (the
    backward of a training step's last pass), as arrays."""
    vs, y, r = _probed(fn, arrays)
    return [y.data] + [g.data for g in gpgan.grad((y * r).sum(), vs)]
