"""Reductions: sum and mean over axes, with ``keepdims``."""
from gpgan.autograd import FunctionNode
from gpgan.functions.array import broadcast_to, reshape


__all__ = ['sum', 'mean']

def _normalize_axis(axis, ndim):
    if axis is None:
        return tuple(range(ndim))
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    out = []
    for a in axes:
        if not -ndim <= a < max(ndim, 1):
            raise ValueError(f"sum: axis {a} is out of range for an input with {ndim} dimensions")
        out.append(a % ndim if ndim else 0)
    return tuple(sorted(set(out)))


class Sum(FunctionNode):
    def __init__(self, axis, keepdims):
        self.axis, self.keepdims = axis, keepdims

    def forward(self, inputs):
        x, = inputs
        self.in_shape = x.shape
        self.axes = _normalize_axis(self.axis, x.ndim)
        return (x.sum(axis=self.axes, keepdims=self.keepdims),)

    def backward(self, indexes, grad_outputs):
        gy, = grad_outputs
        if not self.keepdims:
            kept = tuple(1 if i in self.axes else d for i, d in enumerate(self.in_shape))
            gy = reshape(gy, kept)
        return (broadcast_to(gy, self.in_shape),)


def sum(x, axis=None, keepdims=False):
    """Sum over ``axis`` (an int, a tuple, or None for all axes)."""
    return Sum(axis, keepdims).apply((x,))[0]


def mean(x, axis=None, keepdims=False):
    """Mean over ``axis`` (an int, a tuple, or None for all axes)."""
    axes = _normalize_axis(axis, x.ndim)
    count = 1
    for a in axes:
        count *= x.shape[a]
    return sum(x, axis, keepdims) * (1.0 / max(count, 1))
