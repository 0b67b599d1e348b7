"""``FunctionNode``: one differentiable operation, its forward on arrays and its backward on Variables.

Subclasses implement

* ``forward(self, inputs)``: a tuple of arrays in, a tuple of arrays out. It calls
  ``self.retain_inputs(indexes)`` / ``self.retain_outputs(indexes)`` for exactly the values the
  backward needs; nothing else is kept alive by the graph.
* ``backward(self, target_input_indexes, grad_outputs)``: Variables in (``None`` for an output
  that received no gradient), and the gradients for the inputs listed in
  ``target_input_indexes`` out (a tuple aligned with that list, or one entry per input).
  The backward is written with gpgan's differentiable functions, so under
  ``create_graph=True`` it is recorded like any forward pass and can be differentiated again.
  Under ``create_graph=False`` it runs with recording off and builds no graph.
  An entry may be ``None`` (the input gets no gradient from this function) or
  :data:`STRUCTURAL_ZERO` (the output depends on the input, but with a derivative that is zero
  wherever it is defined, like a ReLU mask's; see :mod:`gpgan.autograd.engine`).

and may implement ``backward_accumulate`` (Chainer's name), which adds each gradient to the one
already summed for that input, where that saves a pass (a product that adds in its own pass).

This follows Chainer's FunctionNode; nnabla calls the same idea forward graph expansion.
"""
import sys
import weakref

import numpy

from gpgan.autograd import mode
from gpgan.autograd.variable import Variable, VariableNode
from gpgan.backend import array_module

_mode = mode._mode
_RELEASED = object()


class _StructuralZero:
    """The type of :data:`STRUCTURAL_ZERO`; one instance, compared with ``is``."""

    __slots__ = ()

    def __repr__(self):
        return "STRUCTURAL_ZERO"


STRUCTURAL_ZERO = _StructuralZero()
"""A gradient known to be zero without computing it, for an input an output truly depends on.

A backward returns it for an input that reaches the output only through a locally constant
function (a ReLU's mask, the argmax of a max): the input stays connected (``grad`` returns zeros
for it rather than refusing it as unused), while the engine neither materializes the zeros nor
runs backward functions that receive nothing else.
"""
# Module-level names: apply() reads them on every call, and a global lookup is the cheapest.
_sys_modules = sys.modules
_new_variable = Variable._from_node


class FunctionNode:
    """Base class of every differentiable operation (see the module docstring)."""

    inputs = ()        # tuple of VariableNode or None (constants), set when recorded
    outputs = ()       # tuple of weakrefs to the output nodes
    generation = 0
    _retain_in = None  # indexes asked for by forward
    _retain_out = None
    _retained_inputs = None
    _retained_outputs = None
    #: None, or k: inputs from index k on receive only STRUCTURAL_ZERO from this function's
    #: backward. They do not count towards its generation, so the traversal visits (and sums
    #: real gradients) in the order it would without those links; the engine revisits a
    #: function whose only gradient, a structural zero, arrives after it was passed.
    structural_inputs = None

    @property
    def label(self):
        return type(self).__name__

    # -- called by forward ------------------------------------------------------------------
    def retain_inputs(self, indexes):
        """Keep the input arrays at ``indexes`` for the backward (call from ``forward``)."""
        self._retain_in = tuple(indexes)

    def retain_outputs(self, indexes):
        """Keep the output arrays at ``indexes`` for the backward (call from ``forward``)."""
        self._retain_out = tuple(indexes)

    # -- called by backward -----------------------------------------------------------------
    def get_retained_inputs(self):
        """The retained inputs as Variables attached to the original graph nodes."""
        data = self._retained_inputs
        if data is _RELEASED:
            raise self._released_error()
        if data is None:
            raise RuntimeError(f"{self.label}.backward asked for retained inputs, but its forward retained none")
        return tuple(Variable._from_node(data[k], self.inputs[i]) for k, i in enumerate(self._retain_in))

    def get_retained_outputs(self):
        """The retained outputs as Variables attached to this function's output nodes."""
        data = self._retained_outputs
        if data is _RELEASED:
            raise self._released_error()
        if data is None:
            raise RuntimeError(f"{self.label}.backward asked for retained outputs, but its forward retained none")
        result = []
        for k, i in enumerate(self._retain_out):
            node = self.outputs[i]()
            if node is None:  # the output Variable and its node are gone: give it a fresh node
                arr = data[k]
                node = VariableNode(arr.shape, arr.dtype, True, creator=self, generation=self.generation)
                self.outputs = self.outputs[:i] + (weakref.ref(node),) + self.outputs[i + 1:]
            result.append(Variable._from_node(data[k], node))
        return tuple(result)

    def _released_error(self):
        return RuntimeError(
            f"{self.label}: trying to backward through the graph a second time, but the values its "
            "backward needs were freed by the first backward. Pass retain_graph=True (or "
            "create_graph=True) to the first backward()/grad() to backward twice."
        )

    def release(self):
        """Free the retained arrays; a later backward through this node raises a clear error."""
        if self._retain_in is not None:
            self._retained_inputs = _RELEASED
        if self._retain_out is not None:
            self._retained_outputs = _RELEASED

    # -- the one entry point ------------------------------------------------------------------
    def apply(self, inputs):
        """Run forward on ``inputs`` (Variables, arrays or numbers) and record the node if needed.

        Returns a tuple of Variables, one per output. This is every operation's hot path, so it
        is written for speed: one pass over the inputs, no per-call allocations beyond the
        result Variables and nodes.
        """
        record = False
        constants = False
        grad_on = _mode.grad_enabled
        for x in inputs:
            if isinstance(x, Variable):
                if grad_on and not record:
                    node = x._node
                    if node is not None and node.requires_grad:
                        record = True
            else:
                constants = True
        if constants:
            inputs = _with_constants(inputs)
        in_data = tuple([v.data for v in inputs])
        if "cupy" in _sys_modules:
            array_module.check_same_device(self.label, in_data)

        out_data = self.forward(in_data)
        if out_data.__class__ is not tuple:
            out_data = tuple(out_data) if isinstance(out_data, list) else (out_data,)
        for y in out_data:
            if isinstance(y, numpy.generic):  # NumPy reductions return scalars, not arrays
                out_data = tuple([numpy.asarray(y) for y in out_data])
                break

        if not record:
            return tuple([_new_variable(y, None) for y in out_data])

        in_nodes = tuple([v._node for v in inputs])
        self.inputs = in_nodes
        gen = 0
        for n in in_nodes if self.structural_inputs is None else in_nodes[:self.structural_inputs]:
            if n is not None and n.generation > gen:
                gen = n.generation
        self.generation = gen = gen + 1
        outputs = tuple([_new_variable(y, VariableNode(y.shape, y.dtype, True, self, gen)) for y in out_data])
        self.outputs = tuple([weakref.ref(v._node) for v in outputs])
        if self._retain_in is not None:
            self._retained_inputs = tuple([in_data[i] for i in self._retain_in])
        if self._retain_out is not None:
            self._retained_outputs = tuple([out_data[i] for i in self._retain_out])
        return outputs

    def forward(self, inputs):
        raise NotImplementedError(f"{self.label} does not implement forward")

    def backward(self, target_input_indexes, grad_outputs):
        raise NotImplementedError(f"{self.label} does not implement backward")

    def backward_accumulate(self, target_input_indexes, grad_outputs, grad_inputs):
        """``backward``, with each gradient added to the gradient already summed for its input.

        ``grad_inputs`` is aligned with ``target_input_indexes``: a Variable (the sum so far, not
        to be modified in place: other inputs' sums may share its array) or None (nothing summed
        yet). Returns what ``backward`` returns, except that an entry whose ``grad_inputs`` entry
        is a Variable is that Variable's value plus the gradient, as a new Variable (or None,
        leaving the sum as it is). The engine calls it only when no graph is recorded, and only on
        functions that override it; the base class has no general way to do it better than the
        engine's own sum.
        """
        raise NotImplementedError(f"{self.label} does not implement backward_accumulate")

    def __repr__(self):
        return f"<{self.label} generation={self.generation}>"


def _with_constants(inputs):
    """Turn non-Variable operands into constant Variables matching the first Variable operand."""
    ref = None
    for x in inputs:
        if isinstance(x, Variable):
            ref = x.data
            break
    if ref is None:
        return tuple(Variable(x) for x in inputs)
    return tuple(x if isinstance(x, Variable) else _constant(x, ref) for x in inputs)


def _constant(value, like):
    """A number (or array) used as a constant operand, in the dtype and on the device of ``like``."""
    xp = array_module.get_array_module(like)
    if isinstance(value, (int, float, bool)) or isinstance(value, numpy.generic):
        dtype = like.dtype if like.dtype.kind == "f" else None
        return Variable._from_node(array_module.scalar_array(xp, value, dtype), None)
    return Variable._from_node(xp.asarray(value), None)


class FirstOrderOnly(FunctionNode):
    """Stands for a gradient computed by a backward that cannot be differentiated again.

    A function whose backward works on raw arrays returns its result through
    :func:`first_order_only`; the result is then connected to the graph through this node, and a
    later attempt to differentiate through it raises instead of silently returning zeros.
    """

    def __init__(self, owner):
        self.owner = owner

    def forward(self, inputs):
        return (inputs[0],)

    def backward(self, target_input_indexes, grad_outputs):
        raise RuntimeError(
            f"the backward of {self.owner} is not differentiable, so it cannot be differentiated "
            "again (double backward through it is not supported)"
        )


def first_order_only(owner, gradient_array, depends_on):
    """Wrap ``gradient_array`` as a Variable that refuses to be differentiated again.

    ``depends_on`` are the Variables (incoming gradients, retained inputs) the gradient was
    computed from; when any of them is in a graph, the result is too, through
    :class:`FirstOrderOnly`.
    """
    if not _mode.grad_enabled or not any(v is not None and v.requires_grad for v in depends_on):
        return Variable._from_node(gradient_array, None)
    live = [v for v in depends_on if v is not None]
    # Record the dependency by applying the node to the gradient plus the inputs it depends on.
    return FirstOrderOnly(owner).apply([Variable._from_node(gradient_array, None)] + live)[0]
