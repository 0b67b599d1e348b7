"""Optional: the masked functions against PyTorch to second order, in float64.

Skipped without torch (it is never a dependency of gpgan). Run it with the comparison venv:
``PYTHONPATH=$PWD /work/compare-venv/bin/python -m pytest tests/test_masked_vs_torch.py``.
"""
import numpy as np
import pytest

import gpgan
import gpgan.functions as F
from helpers import MASKED

torch = pytest.importorskip("torch")

# The same functions in PyTorch; every entry of MASKED needs one here.
TORCH = {
    "relu": torch.relu,
    "leaky_relu": lambda x: torch.nn.functional.leaky_relu(x, 0.2),
    "leaky_relu_negative_slope": lambda x: torch.nn.functional.leaky_relu(x, -0.3),
    "abs": torch.abs,
    "clip": lambda x: torch.clamp(x, -0.5, 1.0),
    "clip_max_only": lambda x: torch.clamp(x, max=0.2),
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "max_pool2d": lambda x: torch.nn.functional.max_pool2d(x, 3, 2, 1),
}


def test_every_masked_function_has_a_torch_counterpart():
    assert sorted(TORCH) == sorted(MASKED)


def _numpy(t):
    return t.detach().numpy(force=True)  # force: PyTorch may answer with a ZeroTensor, its own structural zero


def _derivatives(fn, grad, sin, xs, u, v):
    """Values, first and second derivatives of a penalty on the gradient, in either library.

    ``y = fn(*xs)``; ``L = sum(sin(y) * u)``; ``g = dL/dxs`` (with the graph); then the gradient of
    ``P = sum_k sum(g_k * g_k * v)`` with respect to ``xs`` and ``u``. ``g`` reaches ``xs`` through
    ``sin`` and through the masks, and ``u`` through the masks' backward (linear in its input).
    """
    y = fn(*xs)
    gs = grad((sin(y) * u).sum(), xs, create_graph=True)
    penalty = sum((g * g * v).sum() for g in gs)
    second = grad(penalty, list(xs) + [u])
    return [y] + list(gs) + list(second)


@pytest.mark.parametrize("name", sorted(MASKED))
def test_masked_function_matches_torch_to_second_order(name):
    fn, make = MASKED[name]
    rng = np.random.default_rng(2)
    inputs = make(rng)
    out_shape = fn(*(gpgan.Variable(a) for a in inputs)).shape  # u weighs y: pooling shrinks it
    u = rng.standard_normal(out_shape)
    v = rng.standard_normal(np.broadcast_shapes(*(a.shape for a in inputs)))  # v weighs the gradients

    xs = [gpgan.Variable(a, requires_grad=True) for a in inputs]
    ours = _derivatives(fn, lambda out, wrt, **kw: gpgan.grad(out, wrt, **kw), F.sin, xs,
                        gpgan.Variable(u, requires_grad=True), gpgan.Variable(v))

    def torch_grad(out, wrt, **kw):
        # PyTorch leaves clamp's, maximum's and minimum's gradients unconnected to their inputs
        # (gpgan connects them, with zeros): ask it for zeros where it finds no path.
        return torch.autograd.grad(out, wrt, allow_unused=True, materialize_grads=True, **kw)

    ts = [torch.tensor(a, requires_grad=True) for a in inputs]
    theirs = _derivatives(TORCH[name], torch_grad, torch.sin, ts, torch.tensor(u, requires_grad=True),
                          torch.tensor(v))
    assert len(ours) == len(theirs)
    for k, (a, b) in enumerate(zip(ours, theirs)):
        np.testing.assert_allclose(a.data, _numpy(b), rtol=1e-12, atol=1e-12, err_msg=f"result {k}")


@pytest.mark.parametrize("name", ["relu", "leaky_relu", "abs", "max_pool2d"])
def test_mask_only_dependence_gives_zeros_like_torch(name):
    # PyTorch keeps these masks' inputs in the graph: its second derivative is a zero tensor.
    fn, make = MASKED[name]
    x = make(np.random.default_rng(3))[0]
    ours = gpgan.Variable(x, requires_grad=True)
    g, = gpgan.grad(F.sum(fn(ours)), ours, create_graph=True)
    ours_second, = gpgan.grad(F.sum(g * g), ours)
    theirs = torch.tensor(x, requires_grad=True)
    tg, = torch.autograd.grad(TORCH[name](theirs).sum(), theirs, create_graph=True)
    theirs_second, = torch.autograd.grad((tg * tg).sum(), theirs)  # no allow_unused: connected
    np.testing.assert_array_equal(ours_second.data, _numpy(theirs_second))
