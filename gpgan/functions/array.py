"""Shape functions: reshape, transpose, broadcast_to, sum_to, getitem, concat, stack, split, pad.

Each backward is another function of this module (reshape <-> reshape, broadcast_to <-> sum_to,
getitem <-> scatter-add, concat <-> split, pad -> slicing), so every order of derivative stays
inside the graph.
"""
import numbers
import numpy

from gpgan import kernels
from gpgan.autograd import FunctionNode, Variable
from gpgan.backend import get_array_module
from gpgan.functions._args import array_of, axis_index, constant


__all__ = ['broadcast_to', 'flatten', 'getitem', 'reshape', 'sum_to', 'transpose', 'concat', 'cat', 'stack',
           'split', 'pad']

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
        y = kernels.array_sum(x, axes, keepdims=True) if axes else x
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
    lead = len(x.shape) - len(shape)
    if lead < 0 or any(t != 1 and t != d for t, d in zip(shape, x.shape[lead:])):
        raise ValueError(f"sum_to: shape {tuple(x.shape)} cannot be summed down to {shape} "
                         f"({shape} does not broadcast to {tuple(x.shape)})")
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
        else:
            kernels.add_at(xp, gx, self.index, gy)  # repeated integer indices must add up
        return (gx,)

    def backward(self, indexes, grad_outputs):
        return (getitem(grad_outputs[0], self.index),)


def _is_basic_index(index):
    parts = index if isinstance(index, tuple) else (index,)
    return all(isinstance(p, (int, slice)) or p is None or p is Ellipsis for p in parts)


def _to_host_index(index):
    if isinstance(index, tuple):
        return tuple(array_of(i) for i in index)
    return array_of(index)


def getitem(x, index):
    """``x[index]`` with NumPy's basic and advanced indexing; repeated indices accumulate gradients."""
    return GetItem(_to_host_index(index)).apply((x,))[0]


class Concat(FunctionNode):
    def __init__(self, axis):
        self.axis = axis

    def forward(self, inputs):
        shapes = [x.shape for x in inputs]
        ndim = len(shapes[0])
        if ndim == 0:
            raise ValueError("concat: zero-dimensional inputs cannot be concatenated; use stack")
        axis = self.axis = axis_index("concat", self.axis, ndim)
        for s in shapes:
            if len(s) != ndim or s[:axis] + s[axis + 1:] != shapes[0][:axis] + shapes[0][axis + 1:]:
                raise ValueError(f"concat: input shapes {shapes} must agree except along axis {axis}")
        self.sizes = [s[axis] for s in shapes]
        return (get_array_module(*inputs).concatenate(inputs, axis=axis),)

    def backward(self, indexes, grad_outputs):
        bounds = list(numpy.cumsum(self.sizes[:-1]))
        pieces = split(grad_outputs[0], bounds, axis=self.axis)
        return tuple(pieces[i] for i in indexes)


def concat(xs, axis=0):
    """Join Variables along an existing ``axis`` (``torch.cat`` / ``numpy.concatenate``).

    All inputs have the same shape except along ``axis``; the result's size there is the sum.
    """
    xs = tuple(xs)
    if not xs:
        raise ValueError("concat: needs at least one input")
    if len(xs) == 1 and isinstance(xs[0], Variable):
        return xs[0]
    return Concat(axis).apply(xs)[0]


cat = concat


class Stack(FunctionNode):
    def __init__(self, axis):
        self.axis = axis

    def forward(self, inputs):
        shape = inputs[0].shape
        if any(x.shape != shape for x in inputs):
            raise ValueError(f"stack: all inputs must have the same shape, got {[x.shape for x in inputs]}")
        self.axis = axis_index("stack", self.axis, len(shape) + 1)
        self.shape, self.count = shape, len(inputs)
        return (get_array_module(*inputs).stack(inputs, axis=self.axis),)

    def backward(self, indexes, grad_outputs):
        pieces = split(grad_outputs[0], self.count, axis=self.axis)
        return tuple(reshape(pieces[i], self.shape) for i in indexes)


def stack(xs, axis=0):
    """Join same-shaped Variables along a new ``axis``: n inputs of shape S give (..., n, ...)."""
    xs = tuple(xs)
    if not xs:
        raise ValueError("stack: needs at least one input")
    return Stack(axis).apply(xs)[0]


class Split(FunctionNode):
    def __init__(self, indices_or_sections, axis):
        self.indices_or_sections, self.axis = indices_or_sections, axis

    def forward(self, inputs):
        x, = inputs
        if x.ndim == 0:
            raise ValueError("split: cannot split a zero-dimensional input")
        self.axis = axis_index("split", self.axis, x.ndim)
        sections = self.indices_or_sections
        if isinstance(sections, int) and (sections <= 0 or x.shape[self.axis] % sections):
            raise ValueError(f"split: an input of shape {x.shape} cannot be split into {sections} equal "
                             f"sections along axis {self.axis}; pass a list of split indices instead")
        ys = get_array_module(x).split(x, sections, axis=self.axis)
        self.out_shapes = [y.shape for y in ys]
        self.dtype = x.dtype
        return tuple(ys)

    def backward(self, indexes, grad_outputs):
        live = next(g for g in grad_outputs if g is not None)
        xp = get_array_module(live.data)
        # An output nobody used has no gradient: it contributes zeros of its shape.
        parts = [g if g is not None else constant(xp.zeros(s, dtype=live.dtype))
                 for g, s in zip(grad_outputs, self.out_shapes)]
        return (concat(parts, axis=self.axis),)


def split(x, indices_or_sections, axis=0):
    """Split ``x`` along ``axis`` with NumPy's semantics; returns a tuple of Variables.

    Args:
        indices_or_sections: an int ``n`` (``n`` equal parts; the size along ``axis`` must be
            divisible by ``n``) or a sorted list of indices where the pieces start.
    """
    if not isinstance(indices_or_sections, int):
        indices_or_sections = [int(i) for i in indices_or_sections]
    return Split(indices_or_sections, axis).apply((x,))


def _pad_widths(pad, ndim):
    """torch's flat ``pad`` (last axis first) as NumPy's ``((before, after), ...)`` per axis."""
    if isinstance(pad, numbers.Integral) or not all(isinstance(v, numbers.Integral) and not isinstance(v, bool)
                                                   for v in pad):
        raise ValueError(f"pad: pad must be a sequence of ints (left, right, top, bottom, ...), got {pad!r}")
    pad = [int(v) for v in pad]
    if len(pad) % 2 or len(pad) // 2 > ndim:
        raise ValueError(f"pad: pad {tuple(pad)!r} must hold an even number of ints, at most 2 per dimension "
                         f"of the input ({ndim} dimensions), the last dimension first")
    if any(v < 0 for v in pad):
        raise ValueError(f"pad: pad widths must be non-negative, got {tuple(pad)!r}")
    pairs = [(pad[2 * i], pad[2 * i + 1]) for i in range(len(pad) // 2)]  # last axis first
    return tuple([(0, 0)] * (ndim - len(pairs)) + pairs[::-1])


class Pad(FunctionNode):
    def __init__(self, pad, value):
        self.pad, self.value = pad, value

    def forward(self, inputs):
        x, = inputs
        self.widths = _pad_widths(self.pad, x.ndim)
        self.in_shape = x.shape
        return (get_array_module(x).pad(x, self.widths, mode="constant", constant_values=self.value),)

    def backward(self, indexes, grad_outputs):
        index = tuple(slice(b, b + n) for (b, _), n in zip(self.widths, self.in_shape))
        return (getitem(grad_outputs[0], index),)


def pad(input, pad, mode="constant", value=0.0):
    """Pad ``input`` with a constant, as ``torch.nn.functional.pad``: ``pad`` lists
    ``(before, after)`` widths from the last dimension backwards, ``(left, right)`` pads W only,
    ``(left, right, top, bottom)`` pads W and H of an (N, C, H, W) batch. Only ``mode="constant"``
    is supported, with non-negative widths."""
    if mode != "constant":
        raise ValueError(f"pad: mode {mode!r} is not supported; accepted: 'constant'")
    return Pad(pad, value).apply((input,))[0]
