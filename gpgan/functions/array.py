"""Shape functions: reshape, transpose, broadcast_to, sum_to, getitem and their kin.

Each backward is another function of this module (reshape <-> reshape, broadcast_to <-> sum_to,
getitem <-> scatter-add), so every order of derivative stays inside the graph.
"""
from gpgan.autograd import FunctionNode, Variable
from gpgan.backend import get_array_module


__all__ = ['broadcast_to', 'flatten', 'getitem', 'reshape', 'sum_to', 'transpose']

def _normalize_shape(shape):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        return tuple(shape[0])
    return tuple(shape)


class Reshape(FunctionNode):
    def __init__(self, shape):
        self.shape = shape

    def forward(self, inputs):
        x, = inputs
        self.in_shape = x.shape
        try:
            return (x.reshape(self.shape),)
        except ValueError:
            raise ValueError(f"reshape: cannot reshape input of shape {x.shape} into shape {self.shape}") from None

    def backward(self, indexes, grad_outputs):
        return (reshape(grad_outputs[0], self.in_shape),)


def reshape(x, *shape):
    """``x`` with a new shape of the same size (one entry may be -1). Accepts ``reshape(x, (a, b))``."""
    shape = _normalize_shape(shape)
    if isinstance(x, Variable) and x.shape == shape:
        return x
    return Reshape(shape).apply((x,))[0]


def flatten(x, start_dim=1, end_dim=-1):
    """Merge dimensions ``start_dim..end_dim`` into one: (N, C, H, W) -> (N, C*H*W) by default."""
    shape = x.shape
    nd = len(shape)
    s, e = start_dim % nd if nd else 0, end_dim % nd if nd else 0
    size = 1
    for d in shape[s:e + 1]:
        size *= d
    return reshape(x, shape[:s] + (size,) + shape[e + 1:])


class Transpose(FunctionNode):
    def __init__(self, axes):
        self.axes = axes

    def forward(self, inputs):
        x, = inputs
        if self.axes is not None and sorted(a % x.ndim for a in self.axes) != list(range(x.ndim)):
            raise ValueError(f"transpose: axes {self.axes} are not a permutation for input of shape {x.shape}")
        return (x.transpose(self.axes),)

    def backward(self, indexes, grad_outputs):
        gy, = grad_outputs
        if self.axes is None:
            return (transpose(gy),)
        inverse = tuple(sorted(range(len(self.axes)), key=lambda i: self.axes[i] % len(self.axes)))
        return (transpose(gy, inverse),)


def transpose(x, *axes):
    """Permute axes; with no axes, reverse them (as ``numpy.transpose``)."""
    axes = _normalize_shape(axes) if axes else None
    return Transpose(axes).apply((x,))[0]


def _sum_axes_for(shape, target):
    """Axes to sum (and axes to keep) to reduce an array of ``shape`` to broadcast-source ``target``."""
    lead = len(shape) - len(target)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, t in enumerate(target) if t == 1 and shape[lead + i] != 1
    )
    return axes, lead


class BroadcastTo(FunctionNode):
    def __init__(self, shape):
        self.shape = shape

    def forward(self, inputs):
        x, = inputs
        self.in_shape = x.shape
        xp = get_array_module(x)
        try:
            return (xp.broadcast_to(x, self.shape),)
        except ValueError:
            raise ValueError(f"broadcast_to: input of shape {x.shape} cannot be broadcast to {self.shape}") from None

    def backward(self, indexes, grad_outputs):
        return (sum_to(grad_outputs[0], self.in_shape),)


def broadcast_to(x, shape):
    """``x`` broadcast to ``shape`` (NumPy rules)."""
    shape = tuple(shape)
    if isinstance(x, Variable) and x.shape == shape:
        return x
    return BroadcastTo(shape).apply((x,))[0]


class SumTo(FunctionNode):
    def __init__(self, shape):
        self.shape = shape

    def forward(self, inputs):
        x, = inputs
        self.in_shape = x.shape
        axes, lead = _sum_axes_for(x.shape, self.shape)
        y = x.sum(axis=axes, keepdims=True) if axes else x
        if lead:
            y = y.reshape(self.shape)
        return (y,)

    def backward(self, indexes, grad_outputs):
        return (broadcast_to(grad_outputs[0], self.in_shape),)


def sum_to(x, shape):
    """Sum ``x`` down to ``shape``, the inverse of broadcasting ``shape`` to ``x.shape``."""
    shape = tuple(shape)
    if x.shape == shape:
        return x
    return SumTo(shape).apply((x,))[0]


class GetItem(FunctionNode):
    def __init__(self, index):
        self.index = index

    def forward(self, inputs):
        x, = inputs
        self.in_shape, self.in_dtype = x.shape, x.dtype
        y = x[self.index]
        xp = get_array_module(x)
        return (xp.asarray(y),)

    def backward(self, indexes, grad_outputs):
        return (ScatterAdd(self.index, self.in_shape).apply((grad_outputs[0],))[0],)


class ScatterAdd(FunctionNode):
    """Gradient of ``getitem``: zeros of the input's shape with ``gy`` added at ``index``."""

    def __init__(self, index, shape):
        self.index, self.shape = index, shape

    def forward(self, inputs):
        gy, = inputs
        xp = get_array_module(gy)
        gx = xp.zeros(self.shape, dtype=gy.dtype)
        if _is_basic_index(self.index):
            gx[self.index] = gy  # slices and integers cannot select an element twice
        elif xp.__name__ == "numpy":
            xp.add.at(gx, self.index, gy)  # repeated integer indices must add up
        else:
            gx.scatter_add(self.index, gy)
        return (gx,)

    def backward(self, indexes, grad_outputs):
        return (getitem(grad_outputs[0], self.index),)


def _is_basic_index(index):
    parts = index if isinstance(index, tuple) else (index,)
    return all(isinstance(p, (int, slice)) or p is None or p is Ellipsis for p in parts)


def _to_host_index(index):
    if isinstance(index, Variable):
        return index.data
    if isinstance(index, tuple):
        return tuple(i.data if isinstance(i, Variable) else i for i in index)
    return index


def getitem(x, index):
    """``x[index]`` with NumPy's basic and advanced indexing; repeated indices accumulate gradients."""
    return GetItem(_to_host_index(index)).apply((x,))[0]
