"""Matrix products: matmul (batched, NumPy semantics) and linear (``x @ W.T + b``)."""
import numpy

from gpgan import kernels
from gpgan.autograd import FunctionNode, Variable, is_grad_enabled
from gpgan.functions.activation import rectify_array
from gpgan.functions.array import reshape, sum_to, transpose
from gpgan.functions.math import rectified_gradient_array, rectified_scale


__all__ = ['matmul', 'linear']


def _const(array):
    return Variable._from_node(array, None)


def _product(a, b):
    """``a @ b`` of arrays, for every product of this module. An inner dimension of 1 makes it an
    outer product, which BLAS does badly (the last layer of every critic has one output): then it
    is that multiply, which gives the same numbers (one rounded product per element)."""
    if _is_outer(a, b):
        return _outer(a, b)
    return kernels.matmul(a, b)


def _outer(a, b):
    """``a * b`` for ``a`` (M, 1) and ``b`` (1, N): :func:`gpgan.kernels.outer` where it takes
    the product (NumPy's broadcast multiply runs on one core, and slowly), else NumPy's or CuPy's;
    the same products."""
    out = kernels.outer(a, b)
    return a * b if out is None else out


def _product_plus(a, b, addend):
    """``addend + a @ b`` of arrays (``a @ b`` for None): where oneDNN runs the product it adds
    ``addend`` in its own pass over the output, else :func:`_product` and :func:`add_arrays`,
    with the same values (one rounded sum per element)."""
    if addend is None:
        return _product(a, b)
    total = _fused_product(a, b, addend=addend)
    return kernels.add_arrays(addend, _product(a, b)) if total is None else total


def _is_outer(a, b):
    """True when ``a @ b`` is an outer product (2-D, inner dimension 1), which :func:`_product`
    computes as a multiply."""
    return a.ndim == 2 and b.ndim == 2 and a.shape[1] == 1


def _fused_product(a, b, bias=None, negative_slope=None, addend=None):
    """:func:`gpgan.kernels.fused_affine` for a product that :func:`_product` would not compute as
    a multiply (an outer product keeps its multiply); None where the caller runs the parts."""
    return None if _is_outer(a, b) else kernels.fused_affine(a, b, bias, negative_slope, addend)


def _swap_last(x):
    axes = list(range(x.ndim))
    axes[-1], axes[-2] = axes[-2], axes[-1]
    return transpose(x, axes)


class MatMul(FunctionNode):
    def forward(self, inputs):
        a, b = inputs
        if a.ndim < 1 or b.ndim < 1 or a.shape[-1] != b.shape[-2 if b.ndim > 1 else 0]:
            raise ValueError(f"matmul: shapes {a.shape} and {b.shape} are not aligned for a @ b")
        if a.ndim > 2 and b.ndim > 2:
            batch_a, batch_b = a.shape[:-2], b.shape[:-2]
            try:
                numpy.broadcast_shapes(batch_a, batch_b)
            except ValueError:
                raise ValueError(f"matmul: batch dimensions {batch_a} of shape {a.shape} and {batch_b} of "
                                 f"shape {b.shape} cannot be broadcast together") from None
        self.retain_inputs((0, 1))
        return (_product(a, b),)

    def backward(self, indexes, grad_outputs):
        a, b = self.get_retained_inputs()
        gy, = grad_outputs
        if a.ndim == 2 and b.ndim == 2 and not is_grad_enabled():
            # No graph recorded (first order): the two products on arrays, without building nodes.
            return tuple(_const(_product(gy.data, b.data.T) if i == 0 else _product(a.data.T, gy.data))
                         for i in indexes)
        # Promote vectors to matrices so one rule covers every case.
        a2 = reshape(a, (1, a.shape[0])) if a.ndim == 1 else a
        b2 = reshape(b, (b.shape[0], 1)) if b.ndim == 1 else b
        gy2 = gy
        if a.ndim == 1:
            gy2 = reshape(gy2, gy.shape[:-1] + (1,) + gy.shape[-1:]) if b.ndim > 1 else reshape(gy2, (1,))
        if b.ndim == 1:
            gy2 = reshape(gy2, gy2.shape + (1,))
        out = []
        for i in indexes:
            if i == 0:
                ga = matmul(gy2, _swap_last(b2))
                out.append(reshape(sum_to(ga, a2.shape), a.shape))
            else:
                gb = matmul(_swap_last(a2), gy2)
                out.append(reshape(sum_to(gb, b2.shape), b.shape))
        return tuple(out)


def matmul(a, b):
    """``a @ b`` with NumPy's matmul rules (batched, broadcast leading dimensions)."""
    return MatMul().apply((a, b))[0]


class Linear(FunctionNode):
    """``x @ W.T + b`` as one node: one GEMM forward, and a backward that skips unused gradients.

    With ``negative_slope`` the node is also the ReLU family's activation after it (0: ReLU;
    else leaky ReLU, for 0 <= slope <= 1): oneDNN adds the bias and rectifies in the product's
    own pass over its output where it runs the product, and the node keeps its output for the
    activation's gradient, as ReLU's node does.
    """

    def __init__(self, negative_slope=None):
        if negative_slope is not None and not 0 <= negative_slope <= 1:
            raise ValueError(f"linear: negative_slope must be between 0 and 1 (0 is ReLU), got {negative_slope}")
        self.slope = negative_slope

    def forward(self, inputs):
        x, w = inputs[0], inputs[1]
        b = inputs[2] if len(inputs) == 3 else None
        if w.ndim != 2:
            raise ValueError(f"linear: weight must be 2-D (out_features, in_features), got shape {w.shape}")
        if x.ndim < 1 or x.shape[-1] != w.shape[1]:
            raise ValueError(f"linear: input of shape {x.shape} does not match weight of shape {w.shape}; "
                             f"the input's last dimension must be in_features = {w.shape[1]}")
        if b is not None and b.shape != (w.shape[0],):
            raise ValueError(f"linear: bias must have shape ({w.shape[0]},) to match weight of shape "
                             f"{w.shape}, got {b.shape}")
        self.retain_inputs((0, 1))
        if self.slope is not None:
            self.retain_outputs((0,))
        # Fold leading dimensions into one, so the product is a single 2-D GEMM.
        x2 = x.reshape(-1, w.shape[1])
        y = _fused_product(x2, w.T, b, self.slope)
        if y is None:
            y = _product(x2, w.T)
            if b is not None:
                y += b
            if self.slope is not None:
                y = rectify_array(y, self.slope)
        return (y.reshape(x.shape[:-1] + (w.shape[0],)),)

    def backward(self, indexes, grad_outputs):
        x, w = self.get_retained_inputs()
        gy, = grad_outputs
        if not is_grad_enabled():
            return tuple(_const(g) for g in self._array_gradients(indexes, gy.data, x.data, w.data))
        if self.slope is not None:  # through the activation first (a node of its own when recording)
            gy = rectified_scale(gy, self.get_retained_outputs()[0], self.slope)
        out_features, in_features = w.shape
        gy2 = reshape(gy, (-1, out_features))
        out = []
        for i in indexes:
            if i == 0:
                out.append(reshape(matmul(gy2, w), x.shape))
            elif i == 1:
                out.append(matmul(transpose(gy2), reshape(x, (-1, in_features))))
            else:
                out.append(sum_to(gy2, (out_features,)))
        return tuple(out)

    def backward_accumulate(self, indexes, grad_outputs, grad_inputs):
        """The engine calls this instead of :meth:`backward` when no graph is recorded and an
        input already has a gradient: the weight's earlier gradient is added in the weight
        gradient's own product (a linear layer used twice in a step, as a critic on real and fake
        data, saves a pass over each weight gradient)."""
        x, w = self.get_retained_inputs()
        gy, = grad_outputs
        earlier = [None if g is None else g.data for g in grad_inputs]
        return tuple(_const(g) for g in self._array_gradients(indexes, gy.data, x.data, w.data, earlier))

    def _array_gradients(self, indexes, gy, x, w, earlier=None):
        """The gradients ``indexes`` asks for, as arrays, when no graph is recorded (first order):
        the products without building nodes. ``earlier``: None, or arrays
        aligned with ``indexes`` (or None) to add each gradient to (:meth:`backward_accumulate`)."""
        out_features, in_features = w.shape
        g, gb = gy.reshape(-1, out_features), None
        if self.slope is not None:
            y = self.get_retained_outputs()[0].data.reshape(-1, out_features)
            g = rectified_gradient_array(g, y, self.slope)
        if 2 in indexes:
            gb = kernels.array_sum(g, (0,))
        earlier = dict(zip(indexes, earlier)) if earlier is not None else {}

        def plus_earlier(i, gradient):
            return gradient if earlier.get(i) is None else kernels.add_arrays(earlier[i], gradient)

        raw = {0: lambda: plus_earlier(0, _product(g, w).reshape(x.shape)),
               1: lambda: _product_plus(g.T, x.reshape(-1, in_features), earlier.get(1)),
               2: lambda: plus_earlier(2, gb)}
        return [raw[i]() for i in indexes]


def linear(x, weight, bias=None, negative_slope=None):
    """``x @ weight.T + bias``, and with ``negative_slope`` rectified in the same node:
    ``leaky_relu(x @ weight.T + bias, negative_slope)``, or ``relu(...)`` for 0.

    Args:
        x: (..., in_features).
        weight: (out_features, in_features).
        bias: (out_features,) or None.
        negative_slope: None (no activation) or a number in [0, 1].

    Returns:
        (..., out_features).
    """
    inputs = (x, weight) if bias is None else (x, weight, bias)
    return Linear(negative_slope).apply(inputs)[0]
