"""Numerical checks of analytic derivatives: ``gradcheck`` (first order) and ``gradgradcheck``.

Both compare against central finite differences in float64, contracting the outputs with random
(seeded) output gradients so every entry of the Jacobian matters.
"""
import numpy

from gpgan.autograd import engine
from gpgan.autograd.mode import enable_grad, no_grad
from gpgan.autograd.variable import Variable
from gpgan.backend import get_array_module


def _as_tuple(x):
    return tuple(x) if isinstance(x, (list, tuple)) else (x,)


def _to_variables(inputs, caller):
    out = []
    for x in inputs:
        data = x.data if isinstance(x, Variable) else x
        if not hasattr(data, "dtype"):
            data = numpy.asarray(data, dtype=numpy.float64)
        # A private contiguous copy: finite differences perturb it in place.
        data = get_array_module(data).array(data, copy=True, order="C")
        differentiable = data.dtype.kind == "f"
        if differentiable and data.dtype != numpy.float64:
            # A float32 step of 1e-6 is below the input's own rounding: the finite differences
            # would be noise, and the failure would blame a correct backward.
            raise TypeError(f"{caller}: input {len(out)} is {data.dtype}; finite differences need float64 "
                            "inputs (pass x.astype(numpy.float64), or Module.double() for a module)")
        out.append(Variable(data, requires_grad=differentiable) if differentiable else Variable(data))
    return out


def _random_like(rng, arr):
    xp = get_array_module(arr)
    return xp.asarray(rng.standard_normal(arr.shape).astype(arr.dtype))


def _arrays(values):
    """The raw arrays of a Variable / array or a sequence of them, as a list."""
    return [v.data if isinstance(v, Variable) else v for v in _as_tuple(values)]


def _output_gradients(rng, outputs, given):
    """``given`` as arrays, or random normal ones shaped like ``outputs`` when None."""
    return [_random_like(rng, y.data) for y in outputs] if given is None else _arrays(given)


def gradcheck(fn, inputs, grad_outputs=None, eps=1e-6, atol=1e-5, rtol=1e-4, seed=0, raise_exception=True):
    """Check ``fn``'s analytic vector-Jacobian products against central finite differences.

    Args:
        fn: maps Variables to a Variable or a tuple of Variables.
        inputs: arrays or Variables; floating ones are checked and must be float64 (TypeError
            otherwise), others (integers, booleans) are passed through.
        grad_outputs: output gradients; random normal (seeded by ``seed``) when None.
        eps, atol, rtol: finite-difference step and tolerances (``|a - n| <= atol + rtol * |n|``).

    Returns:
        True when every entry matches; otherwise raises AssertionError naming the input, the
        index and both values (or returns False with ``raise_exception=False``).
    """
    rng = numpy.random.default_rng(seed)
    variables = _to_variables(_as_tuple(inputs), "gradcheck")
    checked = [k for k, v in enumerate(variables) if v.requires_grad]
    outputs = _as_tuple(fn(*variables))
    grad_outputs = _output_gradients(rng, outputs, grad_outputs)
    live = [k for k, y in enumerate(outputs) if y.requires_grad]
    analytic = {k: None for k in checked}
    if live:
        result = engine.grad([outputs[k] for k in live], [variables[k] for k in checked],
                             [grad_outputs[k] for k in live], allow_unused=True)
        analytic = {k: (None if g is None else g.data) for k, g in zip(checked, result)}

    def contracted():
        with no_grad():
            ys = _as_tuple(fn(*variables))
        return sum(float((y.data * g).sum()) for y, g in zip(ys, grad_outputs))

    for k in checked:
        data = variables[k].data
        xp = get_array_module(data)
        numeric = numpy.zeros(data.shape, dtype=numpy.float64)
        flat = data.reshape(-1)  # a view: writing it perturbs the input in place
        for j in range(flat.size):
            original = flat[j].item()
            flat[j] = original + eps
            plus = contracted()
            flat[j] = original - eps
            minus = contracted()
            flat[j] = original
            numeric.reshape(-1)[j] = (plus - minus) / (2 * eps)
        got = analytic[k]
        got = numpy.zeros_like(numeric) if got is None else numpy.asarray(xp.asnumpy(got) if xp is not numpy else got, dtype=numpy.float64)
        bad = numpy.abs(got - numeric) > atol + rtol * numpy.abs(numeric)
        if bad.any():
            idx = tuple(int(i) for i in numpy.argwhere(bad)[0])
            msg = (f"gradcheck failed for input {k} at index {idx}: analytic {got[idx]!r}, numerical "
                   f"{numeric[idx]!r} ({int(bad.sum())} of {bad.size} entries differ; "
                   f"max abs error {numpy.abs(got - numeric).max():.3g})")
            if raise_exception:
                raise AssertionError(msg)
            return False
    return True


def gradgradcheck(fn, inputs, grad_outputs=None, grad_grad_inputs=None, eps=1e-6, atol=1e-5, rtol=1e-4,
                  seed=0, raise_exception=True):
    """Check second derivatives: ``gradcheck`` of the first-order gradient function.

    The function checked is ``(x..., gy...) -> grad(fn(x...), x..., gy, create_graph=True)``,
    differentiated with respect to both the inputs and the output gradients ``gy``, with random
    second-order output gradients. So both the backward's dependence on the inputs (the Hessian)
    and its linearity in ``gy`` are verified.
    """
    rng = numpy.random.default_rng(seed + 1)
    xs = _to_variables(_as_tuple(inputs), "gradgradcheck")
    n_in = len(xs)
    differentiable = [k for k, v in enumerate(xs) if v.requires_grad]
    with no_grad():
        ys = _as_tuple(fn(*xs))
    grad_outputs = _output_gradients(rng, ys, grad_outputs)

    def first_order(*args):
        x_vars, gy_vars = args[:n_in], args[n_in:]
        # gradcheck evaluates this under no_grad for finite differences; the inner gradient
        # still needs its graph.
        with enable_grad():
            outs = _as_tuple(fn(*x_vars))
            live = [j for j, y in enumerate(outs) if y.requires_grad]
            gxs = engine.grad([outs[j] for j in live], [x_vars[k] for k in differentiable],
                              [gy_vars[j] for j in live], create_graph=True, allow_unused=True)
        # An unused input's gradient is a constant zero.
        return tuple(g if g is not None else Variable(get_array_module(x_vars[k].data).zeros_like(x_vars[k].data))
                     for k, g in zip(differentiable, gxs))

    gg = None if grad_grad_inputs is None else _arrays(grad_grad_inputs)
    return gradcheck(first_order, list(xs) + list(grad_outputs), grad_outputs=gg, eps=eps, atol=atol,
                     rtol=rtol, seed=seed + 2, raise_exception=raise_exception)
