"""Reductions: sum and mean over axes (an int, a tuple, negative allowed, or None), with ``keepdims``."""
from gpgan import kernels
from gpgan.autograd import FunctionNode
from gpgan.functions._args import axis_index
from gpgan.functions.array import broadcast_to, reshape


__all__ = ['sum', 'mean']

def _normalize_axis(axis, ndim, name="sum"):
    """``axis`` (int, tuple/list of ints, or None) as a sorted tuple of non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    out = []
    for a in axes:
        if isinstance(a, bool) or not isinstance(a, int) and not hasattr(a, "__index__"):
            raise TypeError(f"{name}: axis must be an int, a tuple of ints or None, got {axis!r}")
        a = int(a)
        if ndim == 0 and a in (0, -1):
            continue  # a scalar has nothing to reduce; accepted as PyTorch does
        out.append(axis_index(name, a, ndim))
    if len(set(out)) != len(out):
        raise ValueError(f"{name}: axis {axis!r} names the same axis twice")
    return tuple(sorted(out))


class Sum(FunctionNode):
    def __init__(self, axis, keepdims):
        self.axis, self.keepdims = axis, keepdims

    def forward(self, inputs):
        x, = inputs
        self.in_shape = x.shape
        self.axes = _normalize_axis(self.axis, x.ndim)
        return (kernels.array_sum(x, self.axes, self.keepdims),)

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
    axes = _normalize_axis(axis, x.ndim, "mean")
    count = 1
    for a in axes:
        count *= x.shape[a]
    return sum(x, axis, keepdims) * (1.0 / max(count, 1))
