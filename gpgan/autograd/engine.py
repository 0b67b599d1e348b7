"""Reverse-mode traversal: ``backward`` (into leaves' ``.grad``) and ``grad`` (returned).

Functions are visited in decreasing generation, which is a topological order, so each function
runs once, after every gradient flowing into its outputs has been summed. ``grad`` first marks the
functions that lie on a path from the outputs to the requested inputs and asks each for the
gradients of those inputs only: the image gradient of an R1 penalty computes no weight gradients.
With ``create_graph=False`` the backward functions run with recording off (no graph is built), and
each output gradient is dropped as soon as its function has consumed it.

Structural zeros. The gradient of a ReLU network with respect to its input depends on the input
only through the activation masks, whose derivative is zero wherever it is defined. So that a
penalty on that gradient still reaches the input (PyTorch's relu gives zeros; "not used" would be
wrong), a mask's backward node keeps the masked value as an input (Chainer's ReLUGrad does the
same) and its backward returns :data:`~gpgan.autograd.function.STRUCTURAL_ZERO` for it: a
marker, not an array. The traversal treats the marker as follows:

* a node that receives it is marked as reached; a real gradient arriving later replaces it;
* a function whose outputs received only markers (or nothing) is not run: each of its inputs
  on the way to a requested input receives the marker instead, so the forward graph behind a
  mask costs a visit per function, not a pass of zero arrays through every convolution (the R1
  penalty's second backward to the critic weights stays as fast as without the connection).
  A function not run keeps its retained buffers even without ``retain_graph``, so a later
  backward through it still works;
* at the end, a requested input (``grad``) or a leaf (``backward``) whose only gradient is the
  marker gets real zeros of its shape, dtype and device.

A mask node's generation does not count its masked-value input
(:attr:`~gpgan.autograd.function.FunctionNode.structural_inputs`), so the traversal visits
functions, and sums real gradients, in the same order as if the link were absent: results are
bit for bit those of a graph without it. A marker may then reach a function already passed
without any gradient; that function is visited again (a marker carries no value, so nothing is
summed twice).

When no graph is recorded, a function that overrides
:meth:`~gpgan.autograd.function.FunctionNode.backward_accumulate` gets the gradients already summed
for its inputs and returns the new sums (a weight gradient's product adds the earlier terms in
its own pass over the output); every other sum is the engine's, ``earlier + new``.
"""
import heapq

from gpgan.autograd import mode
from gpgan.autograd.function import STRUCTURAL_ZERO, FunctionNode
from gpgan.autograd.variable import Variable
from gpgan.backend import get_array_module


def _add_arrays(a, b):
    return a + b


#: How two gradient arrays of one shape and dtype are added: ``a + b``, unless the functions layer
#: installs a faster pass with the same values (:func:`set_gradient_adder`).
_adder = _add_arrays


def set_gradient_adder(add):
    """Sum gradient arrays with ``add(a, b)``, which must return ``a + b`` as a new array (the same
    values); None restores ``a + b``. :mod:`gpgan.functions` installs its split pass."""
    global _adder
    _adder = _add_arrays if add is None else add


class _Accumulate(FunctionNode):
    """Sum of gradients of equal shape; its backward hands the incoming gradient to every term."""

    def forward(self, inputs):
        return (_adder(inputs[0], inputs[1]),)

    def backward(self, target_input_indexes, grad_outputs):
        return tuple(grad_outputs[0] for _ in target_input_indexes)


def _accumulate(a, b):
    """``a + b`` for a gradient ``a`` (None or the structural zero when nothing real arrived yet)."""
    if a is None or a is STRUCTURAL_ZERO:
        return b
    return _Accumulate().apply((a, b))[0]


_BASE_ACCUMULATE = FunctionNode.backward_accumulate


def _previous_gradients(f, indexes, grads):
    """The real gradients summed so far for ``f``'s inputs at ``indexes`` (None where none, and
    for an input seen earlier in ``indexes``: the engine adds its second term itself), or None
    when there is none at all: what :meth:`FunctionNode.backward_accumulate` gets."""
    previous, seen, some = [], set(), False
    for i in indexes:
        n = f.inputs[i]
        g = grads.get(n)
        if g is STRUCTURAL_ZERO or n in seen:
            g = None
        seen.add(n)
        previous.append(g)
        some = some or g is not None
    return tuple(previous) if some else None


def _zeros_like(variable):
    """The materialized form of a structural zero: constant zeros shaped like ``variable``."""
    return Variable._from_node(get_array_module(variable.data).zeros_like(variable.data), None)


def _as_list(x):
    if x is None:
        return None
    if isinstance(x, (list, tuple)):
        return list(x)
    return [x]


def _initial_gradients(outputs, grad_outputs, create_graph):
    if grad_outputs is None:
        grad_outputs = [None] * len(outputs)
    if len(grad_outputs) != len(outputs):
        raise ValueError(f"got {len(outputs)} outputs but {len(grad_outputs)} grad_outputs")
    grads = {}
    for k, (y, gy) in enumerate(zip(outputs, grad_outputs)):
        if not isinstance(y, Variable):
            raise TypeError(f"outputs[{k}] must be a Variable, got {type(y).__name__}")
        if not y.requires_grad:
            raise RuntimeError(
                f"outputs[{k}] does not require grad: it was computed from no Variable with "
                "requires_grad=True, or under no_grad()"
            )
        if gy is None:
            if y.data.size != 1:
                raise RuntimeError(
                    f"outputs[{k}] has shape {y.shape}: a non-scalar output needs an output gradient "
                    "of the same shape (grad_outputs= in gpgan.grad, grad_output= in backward); only "
                    "outputs with one element get an implicit gradient of 1"
                )
            gy = Variable._from_node(get_array_module(y.data).ones_like(y.data), None)
        else:
            if not isinstance(gy, Variable):
                gy = Variable(gy) if not hasattr(gy, "dtype") else Variable._from_node(gy, None)
            if gy.shape != y.shape:
                raise ValueError(f"grad_output of shape {gy.shape} does not match output of shape {y.shape}")
            if not create_graph:
                gy = gy.detach()
        node = y._node
        with mode.set_grad_enabled(create_graph):
            grads[node] = _accumulate(grads.get(node), gy)
    return grads


def _needed_functions(output_nodes, target_nodes):
    """Functions that lie on a path from an output node to a target node (a set of nodes).

    Computed by a depth-first walk from the outputs (post-order: a function after the creators
    of its inputs), not by generation, which does not count structural inputs. Nodes and
    functions hash by identity, so the sets hold the objects themselves."""
    needed = set()
    done = set()
    stack = [(n.creator, False) for n in output_nodes if n.creator is not None]
    while stack:
        f, expanded = stack.pop()
        if f in done:
            continue
        if not expanded:
            stack.append((f, True))
            for n in f.inputs:
                if n is not None and n.requires_grad and n.creator is not None and n.creator not in done:
                    stack.append((n.creator, False))
            continue
        done.add(f)
        for n in f.inputs:
            if n is not None and (n in target_nodes or (n.creator is not None and n.creator in needed)):
                needed.add(f)
                break
    return needed


def _run(outputs, grad_outputs, target_nodes, create_graph, retain_graph):
    """The shared traversal. ``target_nodes``: the set of nodes ``grad`` asks for, or None for
    ``backward``.

    Returns the dict node -> gradient holding the gradients of the leaves (``backward``) or the
    target nodes (``grad``); a gradient may be STRUCTURAL_ZERO (see the module docstring).
    """
    grads = _initial_gradients(outputs, grad_outputs, create_graph)
    output_nodes = [y._node for y in outputs]
    needed = None if target_nodes is None else _needed_functions(output_nodes, target_nodes)
    keep = target_nodes if target_nodes is not None else frozenset()

    heap = []
    pushed = set()
    passed = set()  # functions popped before any gradient reached them
    counter = [0]

    def schedule(f):
        if f is None:
            return
        if f in passed:  # a late structural zero (see structural_inputs)
            passed.discard(f)
            pushed.discard(f)
        if f not in pushed and (needed is None or f in needed):
            pushed.add(f)
            counter[0] += 1
            heapq.heappush(heap, (-f.generation, counter[0], f))  # counter: a unique tie-break

    for n in output_nodes:
        schedule(n.creator)

    with mode.set_grad_enabled(create_graph):
        while heap:
            f = heapq.heappop(heap)[2]
            gys = []
            live = zero = False
            for ref in f.outputs:
                node = ref()
                if node is None:
                    g = None
                elif node in keep:
                    g = grads.get(node)
                else:
                    g = grads.pop(node, None)  # consumed: free it now
                if g is STRUCTURAL_ZERO:
                    zero, g = True, None  # a backward function sees no gradient for that output
                elif g is not None:
                    live = True
                gys.append(g)
            if not (live or zero):
                passed.add(f)
                continue
            indexes = []
            for i, n in enumerate(f.inputs):
                if n is None or not n.requires_grad:
                    continue
                if needed is None or n in keep or (n.creator is not None and n.creator in needed):
                    indexes.append(i)
            if not indexes:
                continue
            previous = None
            if live:
                if not create_graph and type(f).backward_accumulate is not _BASE_ACCUMULATE:
                    previous = _previous_gradients(f, indexes, grads)
                gxs = _call_backward(f, indexes, gys, previous)
                if not retain_graph:
                    f.release()
            else:  # only known zeros came in: pass the marker on; f does not run and keeps its buffers
                gxs = (STRUCTURAL_ZERO,) * len(indexes)
            for k, (i, gx) in enumerate(zip(indexes, gxs)):
                if gx is None:
                    continue
                n = f.inputs[i]
                if gx is STRUCTURAL_ZERO:
                    grads.setdefault(n, STRUCTURAL_ZERO)
                else:
                    if gx.shape != n.shape:
                        raise RuntimeError(
                            f"{f.label}.backward returned a gradient of shape {gx.shape} for input {i} "
                            f"of shape {n.shape}"
                        )
                    if previous is not None and previous[k] is not None:
                        grads[n] = gx  # backward_accumulate summed it
                    else:
                        grads[n] = _accumulate(grads.get(n), gx)
                schedule(n.creator)
    return grads


def _call_backward(f, indexes, gys, previous=None):
    """``f.backward`` for the inputs at ``indexes``, as a tuple aligned with ``indexes``; with
    ``previous`` (see :func:`_previous_gradients`), ``f.backward_accumulate``."""
    if previous is None:
        gxs = f.backward(tuple(indexes), tuple(gys))
    else:
        gxs = f.backward_accumulate(tuple(indexes), tuple(gys), previous)
    if type(gxs) is not tuple:
        gxs = tuple(gxs) if isinstance(gxs, list) else (gxs,)
    if len(gxs) == len(f.inputs) and len(gxs) != len(indexes):
        gxs = tuple(gxs[i] for i in indexes)
    if len(gxs) != len(indexes):
        raise RuntimeError(
            f"{f.label}.backward returned {len(gxs)} gradients for {len(indexes)} requested inputs"
        )
    return gxs


def backward(outputs, grad_outputs=None, create_graph=False, retain_graph=None):
    """Accumulate the gradients of ``outputs`` into the ``.grad`` of every leaf requiring grad.

    Args:
        outputs: a Variable or a sequence of Variables.
        grad_outputs: matching gradients (arrays or Variables); None for one-element outputs.
        create_graph: record the backward pass so ``.grad`` can be differentiated again.
        retain_graph: keep retained buffers for another backward; defaults to ``create_graph``.
    """
    outputs = _as_list(outputs)
    grad_outputs = _as_list(grad_outputs)
    if retain_graph is None:
        retain_graph = create_graph
    grads = _run(outputs, grad_outputs, None, create_graph, retain_graph)
    with mode.set_grad_enabled(create_graph):
        for node, g in grads.items():
            if node.creator is not None:
                continue
            leaf = node.leaf_variable()
            if leaf is None:
                continue
            if g is STRUCTURAL_ZERO:
                if leaf.grad is None:
                    leaf.grad = _zeros_like(leaf)
                continue
            leaf.grad = g if leaf.grad is None else _accumulate(leaf.grad, g)


def grad(outputs, inputs, grad_outputs=None, create_graph=False, retain_graph=None, allow_unused=False):
    """Gradients of ``outputs`` with respect to ``inputs``, returned instead of accumulated.

    For each input, the sum over outputs of the vector-Jacobian product
    ``sum_k grad_outputs[k] . d outputs[k] / d input``. Only the functions between the outputs and
    the inputs run, and only the gradients of the requested inputs are computed.

    Args:
        outputs: a Variable or a sequence of Variables.
        inputs: a Variable or a sequence of Variables (leaves or intermediate results).
        grad_outputs: matching output gradients; None for one-element outputs (gradient 1).
        create_graph: make the results part of the graph, so they can be differentiated again
            (to any order).
        retain_graph: keep retained buffers for another backward; defaults to ``create_graph``.
        allow_unused: when an input does not influence the outputs, return None for it instead of
            raising. An input that influences them only through locally constant functions (ReLU
            masks) is used, and gets zeros.

    Returns:
        A list of Variables (or None for unused inputs with ``allow_unused``), one per input, of
        the inputs' shapes. ``.grad`` of leaves is not touched.
    """
    outputs = _as_list(outputs)
    inputs = _as_list(inputs)
    grad_outputs = _as_list(grad_outputs)
    if retain_graph is None:
        retain_graph = create_graph
    target_nodes = set()
    for k, x in enumerate(inputs):
        if not isinstance(x, Variable):
            raise TypeError(f"inputs[{k}] must be a Variable, got {type(x).__name__}")
        if not x.requires_grad:
            raise RuntimeError(f"inputs[{k}] does not require grad; set requires_grad=True on it")
        target_nodes.add(x._node)
    grads = _run(outputs, grad_outputs, target_nodes, create_graph, retain_graph)
    result = []
    for k, x in enumerate(inputs):
        g = grads.get(x._node)
        if g is STRUCTURAL_ZERO:
            g = _zeros_like(x)
        if g is None and not allow_unused:
            raise RuntimeError(
                f"inputs[{k}] (shape {x.shape}) is not used to compute the outputs, so it has no "
                "gradient; pass allow_unused=True to get None for it"
            )
        result.append(g)
    return result
