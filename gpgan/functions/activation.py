"""Activations: relu, leaky_relu, elu, sigmoid, tanh, softplus, log_sigmoid, softmax, log_softmax.

Every backward is written with gpgan functions, so each activation can be differentiated to any
order. Two rules shape them:

* Piecewise-linear activations (the ReLU family) compute ``gx = gy * mask`` with
  :func:`~gpgan.functions.math.rectified_scale`: the second derivative is zero almost everywhere,
  but the gradient stays a differentiable function of ``gy`` (gradient penalties such as R1 and
  WGAN-GP differentiate exactly that dependence), and stays connected to ``x`` through the mask
  with a zero derivative, so differentiating it with respect to ``x`` gives zeros, not "unused".
* Where the derivative can be written with the output (sigmoid, tanh, elu, softmax,
  log_softmax), the node retains the output rather than the input: the next layer usually keeps
  the output alive anyway, and the double backward then flows through it.

At ``x == 0`` the ReLU family uses the derivative of the ``x < 0`` side (0 for relu, as PyTorch).
The exp-based functions are evaluated in forms that do not overflow for any finite input.
"""
from gpgan import kernels
from gpgan.autograd import FunctionNode, Variable, is_grad_enabled
from gpgan.backend import get_array_module
from gpgan.functions._args import axis_index, scalar_like
from gpgan.functions.math import exp, rectified_scale, where
from gpgan.functions.reduction import sum as _sum


__all__ = ['relu', 'leaky_relu', 'elu', 'sigmoid', 'tanh', 'softplus', 'log_sigmoid', 'softmax',
           'log_softmax']


def _stable_sigmoid(xp, x):
    """1 / (1 + exp(-x)) without overflow: exp is only taken of -|x| <= 0."""
    e = xp.exp(-xp.abs(x))
    return xp.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)


def _softplus_raw(xp, z):
    """log(1 + exp(z)) without overflow, exact as z -> -inf (log1p keeps exp(z)'s precision)."""
    return xp.maximum(z, 0) + xp.log1p(xp.exp(-xp.abs(z)))


# -- the ReLU family -----------------------------------------------------------------------------
def _leaky_array(x, negative_slope):
    """``x`` where ``x > 0``, else ``negative_slope * x``, on an array: one compiled pass for
    0 <= negative_slope <= 1 where the Numba kernels run, else NumPy or CuPy passes."""
    xp, slope = get_array_module(x), scalar_like(negative_slope, x)
    if 0 <= negative_slope <= 1:
        y = kernels.leaky_relu(xp, x, negative_slope)  # one pass
        if y is not None:
            return y

        # max(x, a*x) is leaky ReLU for 0 <= a <= 1, and cheaper than where().
        def leaky(out, x):
            xp.multiply(x, slope, out=out)
            xp.maximum(x, out, out=out)

        return kernels.elementwise(xp, leaky, x)
    return xp.where(x > 0, x, x * slope)


def rectify_array(x, negative_slope=0):
    """The ReLU family's forward on an array ``x``, a new array of its shape and dtype: for
    ``negative_slope`` 0 ``max(x, 0)`` (NumPy ``maximum``'s bits: -0.0 and NaN kept), else ``x``
    where ``x > 0`` and ``negative_slope * x`` elsewhere. One compiled pass where the Numba
    kernels run, else NumPy or CuPy passes."""
    if negative_slope != 0:
        return _leaky_array(x, negative_slope)
    xp = get_array_module(x)
    y = kernels.relu(xp, x)
    if y is not None:
        return y
    zero = scalar_like(0, x)
    return kernels.elementwise(xp, lambda out, x: xp.maximum(x, zero, out=out), x)


class ReLU(FunctionNode):
    def forward(self, inputs):
        self.retain_outputs((0,))
        return (rectify_array(inputs[0]),)

    def backward(self, indexes, grad_outputs):
        y, = self.get_retained_outputs()
        return (rectified_scale(grad_outputs[0], y, 0),)


class LeakyReLU(FunctionNode):
    def __init__(self, negative_slope):
        self.slope = negative_slope

    def forward(self, inputs):
        x, = inputs
        # For a positive slope, y > 0 exactly where x > 0, so the output suffices for the mask.
        self.retain_outputs((0,)) if self.slope > 0 else self.retain_inputs((0,))
        return (_leaky_array(x, self.slope),)

    def backward(self, indexes, grad_outputs):
        ref, = self.get_retained_outputs() if self.slope > 0 else self.get_retained_inputs()
        return (rectified_scale(grad_outputs[0], ref, self.slope),)


class ELU(FunctionNode):
    def __init__(self, alpha):
        self.alpha = alpha

    def forward(self, inputs):
        x, = inputs
        xp = get_array_module(x)
        # With alpha >= 0 the output is positive exactly where x is; otherwise keep x for the mask.
        self.retain_outputs((0,))
        if self.alpha < 0:
            self.retain_inputs((0,))
        neg = xp.expm1(xp.minimum(x, scalar_like(0, x))) * scalar_like(self.alpha, x)
        return (xp.where(x > 0, x, neg),)

    def backward(self, indexes, grad_outputs):
        y, = self.get_retained_outputs()
        ref = self.get_retained_inputs()[0] if self.alpha < 0 else y
        # For x <= 0: d/dx alpha (exp(x) - 1) = alpha exp(x) = y + alpha, a function of the output.
        return (grad_outputs[0] * where(ref.data > 0, 1.0, y + self.alpha),)


# -- sigmoid-like ----------------------------------------------------------------------------
class Sigmoid(FunctionNode):
    def forward(self, inputs):
        x, = inputs
        self.retain_outputs((0,))
        return (_stable_sigmoid(get_array_module(x), x),)

    def backward(self, indexes, grad_outputs):
        y, = self.get_retained_outputs()
        return (grad_outputs[0] * (y * (1.0 - y)),)


class Tanh(FunctionNode):
    def forward(self, inputs):
        x, = inputs
        self.retain_outputs((0,))
        return (get_array_module(x).tanh(x),)

    def backward(self, indexes, grad_outputs):
        y, = self.get_retained_outputs()
        return (grad_outputs[0] * (1.0 - y * y),)


class Softplus(FunctionNode):
    def __init__(self, beta, threshold):
        self.beta, self.threshold = beta, threshold

    def forward(self, inputs):
        x, = inputs
        xp = get_array_module(x)
        # The input, not the output: 1 - exp(-beta y) would lose sigmoid(beta x)'s precision when
        # it is tiny.
        self.retain_inputs((0,))
        z = x * scalar_like(self.beta, x)
        y = _softplus_raw(xp, z) / scalar_like(self.beta, x)
        return (xp.where(z > self.threshold, x, y).astype(x.dtype, copy=False),)

    def backward(self, indexes, grad_outputs):
        x, = self.get_retained_inputs()
        z = x.data * scalar_like(self.beta, x.data)
        linear = z > self.threshold  # PyTorch's switch to the identity
        if not is_grad_enabled():  # first order: the same operations on arrays, without nodes
            xp = get_array_module(z)
            slope = xp.where(linear, scalar_like(1.0, z), _stable_sigmoid(xp, z))
            return (Variable._from_node(xp.asarray(grad_outputs[0].data * slope), None),)
        return (grad_outputs[0] * where(linear, 1.0, sigmoid(x * self.beta)),)


class LogSigmoid(FunctionNode):
    def forward(self, inputs):
        x, = inputs
        self.retain_inputs((0,))
        return (-_softplus_raw(get_array_module(x), -x),)

    def backward(self, indexes, grad_outputs):
        x, = self.get_retained_inputs()
        # d/dx log sigmoid(x) = sigmoid(-x); from the input, since 1 - exp(y) cancels for large x.
        return (grad_outputs[0] * sigmoid(-x),)


# -- softmax -------------------------------------------------------------------------------------
class Softmax(FunctionNode):
    def __init__(self, dim):
        self.dim = dim

    def forward(self, inputs):
        x, = inputs
        xp = get_array_module(x)
        axis = axis_index("softmax", self.dim, x.ndim, "dim")
        e = xp.exp(x - x.max(axis=axis, keepdims=True))  # exponents <= 0: no overflow
        self.retain_outputs((0,))
        return (e / e.sum(axis=axis, keepdims=True),)

    def backward(self, indexes, grad_outputs):
        y, = self.get_retained_outputs()
        gy, = grad_outputs
        gyy = gy * y
        return (gyy - y * _sum(gyy, axis=self.dim, keepdims=True),)


class LogSoftmax(FunctionNode):
    def __init__(self, dim):
        self.dim = dim

    def forward(self, inputs):
        x, = inputs
        xp = get_array_module(x)
        axis = axis_index("log_softmax", self.dim, x.ndim, "dim")
        shifted = x - x.max(axis=axis, keepdims=True)
        self.retain_outputs((0,))
        return (shifted - xp.log(xp.exp(shifted).sum(axis=axis, keepdims=True)),)

    def backward(self, indexes, grad_outputs):
        y, = self.get_retained_outputs()
        gy, = grad_outputs
        return (gy - exp(y) * _sum(gy, axis=self.dim, keepdims=True),)


# -- public functions ----------------------------------------------------------------------------
def relu(x):
    """``max(x, 0)`` elementwise; gradient 0 at ``x == 0``."""
    return ReLU().apply((x,))[0]


def leaky_relu(x, negative_slope=0.01):
    """``x`` for ``x > 0``, ``negative_slope * x`` otherwise."""
    return LeakyReLU(negative_slope).apply((x,))[0]


def elu(x, alpha=1.0):
    """``x`` for ``x > 0``, ``alpha * (exp(x) - 1)`` otherwise."""
    return ELU(alpha).apply((x,))[0]


def sigmoid(x):
    """``1 / (1 + exp(-x))``, without overflow for large ``|x|``."""
    return Sigmoid().apply((x,))[0]


def tanh(x):
    """Hyperbolic tangent."""
    return Tanh().apply((x,))[0]


def softplus(x, beta=1.0, threshold=20.0):
    """``log(1 + exp(beta * x)) / beta``; the identity where ``beta * x > threshold`` (as PyTorch).

    Computed as ``(max(z, 0) + log1p(exp(-|z|))) / beta`` with ``z = beta * x``: no overflow, and
    exact (``exp(z) / beta``) as ``x -> -inf``.
    """
    if beta <= 0:
        raise ValueError(f"softplus: beta must be positive, got {beta}")
    return Softplus(beta, threshold).apply((x,))[0]


def log_sigmoid(x):
    """``log(sigmoid(x)) = -softplus(-x)``, stable for large ``|x|`` (equals ``x`` as ``x -> -inf``)."""
    return LogSigmoid().apply((x,))[0]


def softmax(x, dim=-1):
    """``exp(x) / sum(exp(x))`` along ``dim``, computed after subtracting the maximum."""
    return Softmax(dim).apply((x,))[0]


def log_softmax(x, dim=-1):
    """``x - logsumexp(x)`` along ``dim``, computed after subtracting the maximum."""
    return LogSoftmax(dim).apply((x,))[0]
