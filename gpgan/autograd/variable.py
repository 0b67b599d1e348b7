"""``Variable``: an array with the graph information reverse-mode differentiation needs.

A Variable owns its array (``.data``) and, when it takes part in a graph, a
:class:`VariableNode`. Function nodes keep *nodes*, not Variables, so the graph does not keep an
intermediate array alive unless the function that consumes it retains it for its backward.
Arithmetic operators are installed by :mod:`gpgan.functions` (one op, one place).
"""
import weakref

import numpy

from gpgan.backend import array_module


class VariableNode:
    """A vertex of the graph: the creator function, the generation, and (for leaves) the Variable.

    ``generation`` is 0 for leaves and one more than the creator's largest input generation, so
    visiting functions in decreasing generation is a topological order.
    """

    __slots__ = ("creator", "generation", "requires_grad", "shape", "dtype", "_leaf_ref", "__weakref__")

    def __init__(self, shape, dtype, requires_grad, creator=None, generation=0, leaf=None):
        self.creator = creator
        self.generation = generation
        self.requires_grad = requires_grad
        self.shape = shape
        self.dtype = dtype
        # Leaves accumulate into Variable.grad; a weak reference avoids a Variable<->node cycle.
        self._leaf_ref = None if leaf is None else weakref.ref(leaf)

    def leaf_variable(self):
        """The Variable of a leaf node, or None for interior nodes and dead leaves."""
        return None if self._leaf_ref is None else self._leaf_ref()


def as_array(data, dtype=None):
    """``data`` as a NumPy/CuPy array. Arrays keep their dtype; Python numbers and lists become
    float32 (bools stay bool) unless ``dtype`` is given."""
    if isinstance(data, numpy.ndarray):
        return data if dtype is None else data.astype(dtype, copy=False)
    if isinstance(data, numpy.generic):
        return numpy.asarray(data, dtype=dtype)
    if array_module.get_array_module(data) is not numpy:  # a CuPy array
        return data if dtype is None else data.astype(dtype, copy=False)
    arr = numpy.asarray(data)
    if dtype is None and arr.dtype != numpy.bool_:
        dtype = numpy.float32
    return arr if dtype is None else arr.astype(dtype, copy=False)


class Variable:
    """An array that records how it was computed, so gradients can flow back to it.

    Args:
        data: a NumPy or CuPy array (its dtype is kept), or a Python number/list (float32).
        requires_grad: whether this leaf collects a gradient in ``.grad`` on ``backward()``.

    Attributes:
        data: the array, any shape.
        grad: a Variable of ``data``'s shape after ``backward()``, or None.
    """

    __slots__ = ("data", "_node", "grad", "__weakref__")
    # NumPy defers ``ndarray + Variable`` to Variable.__radd__ when this beats ndarray's 0.
    __array_priority__ = 200

    def __init__(self, data, requires_grad=False):
        if isinstance(data, Variable):
            raise TypeError("Variable(data) takes an array, not a Variable; use .detach() to copy the value")
        self.data = as_array(data)
        self.grad = None
        if requires_grad:
            self._check_float("requires_grad=True")
            self._node = VariableNode(self.data.shape, self.data.dtype, True, leaf=self)
        else:
            self._node = None

    @staticmethod
    def _from_node(data, node, _new=object.__new__):
        """A Variable holding the array ``data`` with graph node ``node`` (a function's output, a
        retained value), or None for a constant. No checks: this is on every operation's hot path."""
        var = _new(Variable)
        var.data = data
        var.grad = None
        var._node = node
        return var

    def _check_float(self, what):
        if self.data.dtype.kind != "f":
            raise TypeError(f"{what} needs a floating-point Variable, got dtype {self.data.dtype}")

    # -- graph properties ---------------------------------------------------------------------
    @property
    def node(self):
        """The graph node; created on first use for plain leaves."""
        if self._node is None:
            self._node = VariableNode(self.data.shape, self.data.dtype, False, leaf=self)
        return self._node

    @property
    def requires_grad(self):
        return self._node is not None and self._node.requires_grad

    @requires_grad.setter
    def requires_grad(self, value):
        if self._node is not None and self._node.creator is not None:
            raise RuntimeError(
                "requires_grad can only be set on leaf Variables; this one was computed by "
                f"{type(self._node.creator).__name__}. Use .detach() to make a new leaf."
            )
        if value:
            self._check_float("requires_grad=True")
        self.node.requires_grad = bool(value)

    @property
    def creator(self):
        """The function node that computed this Variable, or None for a leaf."""
        return None if self._node is None else self._node.creator

    @property
    def is_leaf(self):
        return self._node is None or self._node.creator is None

    # -- array properties ---------------------------------------------------------------------
    @property
    def shape(self):
        return self.data.shape

    @property
    def dtype(self):
        return self.data.dtype

    @property
    def ndim(self):
        return self.data.ndim

    @property
    def size(self):
        return self.data.size

    @property
    def device(self):
        """``"cpu"`` or ``"cuda"``."""
        return array_module.device_of(self.data)

    def __len__(self):
        return len(self.data)

    def item(self):
        """The value of a one-element Variable as a Python number."""
        if self.data.size != 1:
            raise ValueError(f"item() needs a Variable with one element, got shape {self.data.shape}")
        return self.data.item()

    def numpy(self):
        """The value as a NumPy array (copied from the GPU when needed; shares memory on CPU)."""
        return array_module.to_device(self.data, "cpu")

    def detach(self):
        """A new leaf sharing this value, cut from the graph (no gradient flows through it)."""
        return Variable._from_node(self.data, None)

    def backward(self, grad_output=None, create_graph=False, retain_graph=None):
        """Accumulate d(self)/d(leaf) into ``leaf.grad`` for every leaf that requires grad.

        Args:
            grad_output: the gradient with respect to ``self`` (same shape); may be omitted only
                when ``self`` has one element.
            create_graph: record the backward pass, so the gradients can be differentiated again.
            retain_graph: keep the buffers functions retained, for another backward through this
                graph. Defaults to ``create_graph``.
        """
        from gpgan.autograd.engine import backward

        backward([self], None if grad_output is None else [grad_output],
                 create_graph=create_graph, retain_graph=retain_graph)

    def __repr__(self):
        body = repr(self.numpy()) if self.data.size <= 64 else f"shape={self.data.shape}"
        extra = []
        if self.requires_grad:
            extra.append("requires_grad=True")
        if self.creator is not None:
            extra.append(f"creator={type(self.creator).__name__}")
        if self.device != "cpu":
            extra.append(f"device={self.device!r}")
        return f"Variable({body}{''.join(', ' + e for e in extra)})"

    def __bool__(self):
        raise TypeError("the truth value of a Variable is ambiguous; compare .item() or .data instead")

    __hash__ = object.__hash__
