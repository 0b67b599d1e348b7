"""The engine itself: traversal order, accumulation, grad vs backward, errors, memory release."""
import gc
import weakref

import numpy as np
import pytest

import gpgan
import gpgan.functions as F
from gpgan.autograd import STRUCTURAL_ZERO, FunctionNode, first_order_only, gradcheck, gradgradcheck


def var(a, requires_grad=True):
    return gpgan.Variable(np.asarray(a, dtype=np.float64), requires_grad=requires_grad)


def test_seed_example_chain_rule_values():
    # x=1, y=2, z=4; r = (z * (x + y^2))^2 -> r = 400, dr/dz = 200, dr/dy = 640, dr/dx = 160
    x, y, z = var(1.0), var(2.0), var(4.0)
    r = (z * (x + y ** 2)) ** 2
    r.backward()
    assert r.item() == 400
    assert (x.grad.item(), y.grad.item(), z.grad.item()) == (160, 640, 200)


def test_seed_example_tenth_derivative_of_sin():
    x = var(np.linspace(-2, 2, 7))
    y = F.sin(x)
    for _ in range(10):
        y, = gpgan.grad(y, x, grad_outputs=np.ones(7), create_graph=True)
    np.testing.assert_allclose(y.data, -np.sin(x.data), rtol=1e-12, atol=1e-12)
    y.backward(np.ones(7))
    np.testing.assert_allclose(x.grad.data, -np.cos(x.data), rtol=1e-12, atol=1e-12)


def test_seed_example_minimize_a_function_that_contains_a_gradient():
    # f(x) = d/dx (x^3 / 3) - 2x + 1 = x^2 - 2x + 1, minimised at x = 1.
    rng = np.random.default_rng(0)
    x = var(rng.random())
    for _ in range(30):
        g, = gpgan.grad(x ** 3 / 3, x, create_graph=True)
        f = g - 2 * x + 1
        x.grad = None
        f.backward()
        x = var(x.data - 0.1 * x.grad.data)
    start_gap = 1.0  # |x0 - 1| <= 1; gradient descent contracts it by 0.8 per step
    assert abs(x.item() - 1) < start_gap * 0.8 ** 30 + 1e-9


def test_gradients_accumulate_over_every_use_and_into_leaf_grad():
    x = var([1.0, 2.0, 3.0])
    y = (x * x + x * 3 + x).sum()
    y.backward()
    np.testing.assert_allclose(x.grad.data, 2 * x.data + 4)
    (x * 2).sum().backward()  # a second backward accumulates
    np.testing.assert_allclose(x.grad.data, 2 * x.data + 6)


def test_diamond_graph_runs_each_function_once_in_topological_order():
    calls = []

    class Spy(FunctionNode):
        def forward(self, inputs):
            return (inputs[0] * 1.0,)

        def backward(self, indexes, gys):
            calls.append(self)
            return (gys[0],)

    x = var(2.0)
    a = Spy().apply((x,))[0]
    b = a * a
    c = a * 3
    (b + c).backward()
    assert len(calls) == 1
    assert x.grad.item() == pytest.approx(2 * 2 + 3)


def test_grad_matches_backward_and_leaves_grad_untouched():
    rng = np.random.default_rng(1)
    x = var(rng.standard_normal((3, 4)))
    w = var(rng.standard_normal((4, 2)))
    out = F.sum(F.exp(x @ w) * 0.5)
    gx, gw = gpgan.grad(out, [x, w], retain_graph=True)
    assert x.grad is None and w.grad is None
    out.backward()
    np.testing.assert_array_equal(gx.data, x.grad.data)
    np.testing.assert_array_equal(gw.data, w.grad.data)


def test_grad_visits_only_the_path_to_the_requested_inputs():
    # The inner gradient of an R1 penalty, with respect to the images, must not compute weight
    # gradients: MatMul's backward is asked for input 0 only.
    asked = []

    class Probe(F.linalg.MatMul):
        def backward(self, indexes, gys):
            asked.append(indexes)
            return super().backward(indexes, gys)

    rng = np.random.default_rng(2)
    x = var(rng.standard_normal((5, 3)))
    w = var(rng.standard_normal((3, 1)))
    y = Probe().apply((x, w))[0]
    gpgan.grad(y.sum(), x)
    assert asked == [(0,)]
    asked.clear()
    y = Probe().apply((x, w))[0]
    y.sum().backward()
    assert asked == [(0, 1)]


def test_first_order_backward_builds_no_graph_and_frees_retained_buffers():
    x = var(np.ones(3))
    y = F.exp(x) * x
    y.sum().backward()
    assert x.grad.creator is None and not x.grad.requires_grad
    with pytest.raises(RuntimeError, match="second time.*retain_graph=True"):
        y.sum().backward()


def test_retain_graph_allows_a_second_backward():
    x = var(np.ones(3))
    y = (F.exp(x) * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(x.grad.data, 2 * (np.e * 2))


def test_intermediate_arrays_are_not_kept_alive_by_the_graph():
    x = var(np.ones(1000))
    a = x + 1.0       # Add retains nothing
    b = F.exp(a)      # Exp retains its output only, not its input a
    c = a * 2.0       # Mul retains its inputs: this array must stay
    probe_a, probe_c_input = weakref.ref(a.data), None
    del a
    gc.collect()
    assert probe_a() is not None  # still retained by Mul
    y = F.sum(b)
    x2 = var(np.ones(1000))
    a2 = x2 + 1.0
    y2 = F.sum(F.exp(a2))
    probe_a2 = weakref.ref(a2.data)
    del a2
    gc.collect()
    assert probe_a2() is None  # nothing in y2's graph retained a2's array
    y2.backward()
    np.testing.assert_allclose(x2.grad.data, np.exp(2.0))
    (y + c.sum()).backward()
    assert probe_c_input is None


def test_create_graph_gradient_is_differentiable_hessian_vector_product():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((4, 4))
    A = a @ a.T
    x = var(rng.standard_normal(4))
    v = rng.standard_normal(4)
    f = 0.5 * (x @ (gpgan.Variable(A) @ x)) + F.sum(F.sin(x))
    g, = gpgan.grad(f, x, create_graph=True)
    hv, = gpgan.grad(g, x, grad_outputs=v)
    hessian = A - np.diag(np.sin(x.data))
    np.testing.assert_allclose(hv.data, hessian @ v, rtol=1e-12)


def test_backward_of_non_scalar_needs_grad_output():
    x = var(np.ones((2, 3)))
    with pytest.raises(RuntimeError, match=r"outputs\[0\] has shape \(2, 3\): a non-scalar output needs an "
                                           r"output gradient .*grad_outputs= in gpgan.grad, grad_output= in backward"):
        (x * 2).backward()
    with pytest.raises(RuntimeError, match=r"outputs\[0\] has shape \(2, 3\).*grad_outputs="):
        gpgan.grad(x * 2, x)


def test_grad_of_unused_input_raises_unless_allowed():
    x, y = var(1.0), var(2.0)
    out = x * 3
    with pytest.raises(RuntimeError, match="inputs\\[1\\].*not used.*allow_unused=True"):
        gpgan.grad(out, [x, y], retain_graph=True)
    gx, gy = gpgan.grad(out, [x, y], allow_unused=True)
    assert gx.item() == 3 and gy is None


def test_output_that_does_not_require_grad_is_rejected():
    with pytest.raises(RuntimeError, match="does not require grad"):
        gpgan.grad(var(1.0, requires_grad=False) * 2, var(1.0))


def test_shape_mismatch_names_the_function_and_both_shapes():
    with pytest.raises(ValueError, match=r"add: shapes \(2, 3\) and \(4,\) cannot be broadcast"):
        var(np.ones((2, 3))) + var(np.ones(4))
    with pytest.raises(ValueError, match=r"matmul: shapes \(2, 3\) and \(2, 3\) are not aligned"):
        var(np.ones((2, 3))) @ var(np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"matmul: batch dimensions \(2,\) of shape \(2, 2, 3\) and \(3,\) of "
                                         r"shape \(3, 3, 4\) cannot be broadcast"):
        var(np.ones((2, 2, 3))) @ var(np.ones((3, 3, 4)))


def test_backward_that_is_not_differentiable_refuses_double_backward():
    class FirstOrderSquare(FunctionNode):
        def forward(self, inputs):
            self.retain_inputs((0,))
            return (inputs[0] ** 2,)

        def backward(self, indexes, gys):
            x, = self.get_retained_inputs()
            return (first_order_only("FirstOrderSquare", 2 * x.data * gys[0].data, [x, gys[0]]),)

    x = var(np.array([1.5, -2.0]))
    y = FirstOrderSquare().apply((x,))[0]
    g, = gpgan.grad(y.sum(), x, create_graph=True)
    np.testing.assert_allclose(g.data, 2 * x.data)  # first order still works
    with pytest.raises(RuntimeError, match="backward of FirstOrderSquare is not differentiable"):
        g.sum().backward()


def test_no_grad_records_nothing():
    x = var(np.ones(3))
    with gpgan.no_grad():
        y = x * 2
        with gpgan.enable_grad():
            z = x * 2
    assert not y.requires_grad and y.creator is None
    assert z.requires_grad


def test_float32_is_the_default_and_float64_is_kept():
    assert gpgan.Variable([1, 2]).dtype == np.float32
    assert gpgan.Variable(2.5).dtype == np.float32
    x = var(np.ones(2))
    assert (x * 2 + 1).dtype == np.float64
    x32 = gpgan.Variable(np.ones(2, dtype=np.float32), requires_grad=True)
    assert (x32 * 2.5).dtype == np.float32
    (x32 * 2.5).sum().backward()
    assert x32.grad.dtype == np.float32


def test_variable_api_basics():
    x = gpgan.Variable(np.arange(6, dtype=np.float32).reshape(2, 3), requires_grad=True)
    assert x.shape == (2, 3) and x.ndim == 2 and x.dtype == np.float32 and len(x) == 2
    assert x.T.shape == (3, 2) and x.reshape(3, 2).shape == (3, 2) and x.transpose(1, 0).shape == (3, 2)
    assert x.sum().item() == 15 and x.mean().item() == 2.5
    assert x[1, 1:].numpy().tolist() == [4, 5]
    d = x.detach()
    assert d.is_leaf and not d.requires_grad and d.data is x.data
    assert (2 - x).numpy()[0, 0] == 2 and (2 / (x + 1)).numpy()[0, 0] == 2 and (-x).numpy()[0, 1] == -1
    assert (np.ones((2, 3), dtype=np.float32) + x).creator is not None  # ndarray defers to Variable
    assert x.to("cpu") is x
    assert "requires_grad=True" in repr(x)
    with pytest.raises(TypeError, match="ambiguous"):
        bool(x)
    with pytest.raises(RuntimeError, match="only be set on leaf"):
        (x * 2).requires_grad = False


def test_cuda_without_cupy_raises_a_clear_error():
    from gpgan.backend import cupy_available

    if cupy_available():
        pytest.skip("CuPy with a GPU is present")
    with pytest.raises(RuntimeError, match="device 'cuda'"):
        gpgan.Variable(np.ones(2)).to("cuda")
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        gpgan.Variable(np.ones(2)).to("tpu")


@pytest.mark.parametrize("fn", [
    lambda a, b: a + b, lambda a, b: a - b, lambda a, b: a * b, lambda a, b: a / (b * b + 1.0),
    lambda a, b: (a * a + 1.0) ** (b * 0.5), lambda a, b: F.pow(a, 3) - F.pow(b, 2.5 if False else 2),
    lambda a, b: a @ b.T, lambda a, b: F.exp(a) * F.log(b * b + 1.0), lambda a, b: F.sin(a) * F.cos(b),
])
def test_arithmetic_first_and_second_order(fn):
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    assert gradcheck(fn, [a, b])
    assert gradgradcheck(fn, [a, b])


@pytest.mark.parametrize("shapes", [((3, 1), (1, 4)), ((2, 3, 4), (4,)), ((), (2, 2)), ((5, 1, 2), (3, 1))])
def test_broadcasting_gradients(shapes):
    rng = np.random.default_rng(8)
    a, b = rng.standard_normal(shapes[0]), rng.standard_normal(shapes[1])
    for fn in (lambda a, b: a * b + a, lambda a, b: a / (b * b + 2.0) - b):
        assert gradcheck(fn, [a, b])
        assert gradgradcheck(fn, [a, b])


def test_gradcheck_detects_a_wrong_backward():
    class WrongSquare(FunctionNode):
        def forward(self, inputs):
            self.retain_inputs((0,))
            return (inputs[0] ** 2,)

        def backward(self, indexes, gys):
            x, = self.get_retained_inputs()
            return (gys[0] * x * 3.0,)  # should be 2x

    with pytest.raises(AssertionError, match="gradcheck failed for input 0"):
        gradcheck(lambda x: WrongSquare().apply((x,))[0], [np.array([1.0, 2.0])])


def test_gradgradcheck_detects_a_backward_that_is_wrong_only_at_second_order():
    class DetachedSquare(FunctionNode):
        # Right first derivative, but built from a constant so its own derivative in x is lost.
        def forward(self, inputs):
            self.retain_inputs((0,))
            return (inputs[0] ** 2,)

        def backward(self, indexes, gys):
            x, = self.get_retained_inputs()
            return (gys[0] * x.detach() * 2.0,)

    f = lambda x: DetachedSquare().apply((x,))[0]  # noqa: E731
    assert gradcheck(f, [np.array([1.0, 2.0])])
    with pytest.raises(AssertionError, match="gradcheck failed"):
        gradgradcheck(f, [np.array([1.0, 2.0])])


def test_first_order_backward_frees_each_gradient_once_consumed():
    """With create_graph=False, the gradient flowing into a node is dropped as soon as that node's
    backward has used it: a chain x -> n1 -> n2 -> n3 holds at most the gradients in flight."""
    probes, alive_when_called = [], []

    class Probe(FunctionNode):
        def forward(self, inputs):
            return (inputs[0] * 1.0,)

        def backward(self, indexes, grad_outputs):
            gc.collect()
            alive_when_called.append([p() is not None for p in probes])
            probes.append(weakref.ref(grad_outputs[0].data))
            return (grad_outputs[0] * 1.0,)

    x = var(np.ones(1000))
    h = x
    for _ in range(4):
        h, = Probe().apply((h,))
    F.sum(h).backward()  # every gradient below the sum is the engine's own, none is the caller's
    # Each backward ran after the previous node's incoming gradient had been released.
    assert alive_when_called == [[], [False], [False, False], [False, False, False]]
    assert x.grad is not None and not x.grad.requires_grad


# -- structural zeros ---------------------------------------------------------------------------
class _Gate(FunctionNode):
    """``y = gy * (ref > 0)`` built by hand: STRUCTURAL_ZERO for ``ref``, like a ReLU mask's node."""

    def forward(self, inputs):
        gy, ref = inputs
        self.mask = ref > 0
        return (gy * self.mask,)

    def backward(self, indexes, grad_outputs):
        return tuple(grad_outputs[0] * gpgan.Variable(self.mask.astype(np.float64)) if i == 0
                     else STRUCTURAL_ZERO for i in indexes)


class _MustNotRun(FunctionNode):
    """The identity, with a backward that fails the test if the engine calls it."""

    calls = 0

    def forward(self, inputs):
        return (inputs[0].copy(),)

    def backward(self, indexes, grad_outputs):
        type(self).calls += 1
        return (grad_outputs[0],)


def test_an_input_reached_only_through_a_structural_zero_gets_zeros_of_its_shape_and_dtype():
    x = gpgan.Variable(np.array([[-1.0, 2.0, 3.0]], dtype=np.float32), requires_grad=True)
    u = gpgan.Variable(np.array([[0.5, -1.0, 2.0]], dtype=np.float32), requires_grad=True)
    out = F.sum(_Gate().apply((u, x))[0])  # depends on x only through the mask
    gx, gu = gpgan.grad(out, [x, u], retain_graph=True)
    assert gx.shape == (1, 3) and gx.dtype == np.float32 and not gx.data.any()
    np.testing.assert_array_equal(gu.data, [[0.0, 1.0, 1.0]])
    # backward(): the leaf reached only through the marker gets zeros in .grad, and an existing
    # .grad is kept as it is.
    out.backward(retain_graph=True)
    assert x.grad.shape == (1, 3) and x.grad.dtype == np.float32 and not x.grad.data.any()
    x.grad = gpgan.Variable(np.full((1, 3), 7.0, dtype=np.float32))
    out.backward()
    np.testing.assert_array_equal(x.grad.data, np.full((1, 3), 7.0))


def test_functions_that_receive_only_structural_zeros_are_not_run_and_keep_their_buffers():
    _MustNotRun.calls = 0
    x = var([-1.0, 2.0, 3.0])
    w = var([0.5, -1.0, 2.0])
    h = F.square(_MustNotRun().apply((x,))[0])     # forward graph behind the mask
    out = F.sum(_Gate().apply((w, h))[0])
    gx, gw = gpgan.grad(out, [x, w])
    assert _MustNotRun.calls == 0 and not gx.data.any()
    np.testing.assert_array_equal(gw.data, [1.0, 1.0, 1.0])
    # Not run, hence not released: a real backward through the same graph still works.
    g, = gpgan.grad(F.sum(h), x)
    np.testing.assert_allclose(g.data, 2 * x.data)
    assert _MustNotRun.calls == 1


def test_a_real_gradient_replaces_the_structural_zero_whichever_arrives_first():
    x = var([-1.0, 2.0, 3.0])
    w = var([0.5, -1.0, 2.0])
    for out in (F.sum(_Gate().apply((w, x))[0]) + F.sum(x * x),
                F.sum(x * x) + F.sum(_Gate().apply((w, F.sin(x)))[0])):
        gx, = gpgan.grad(out, x)
        np.testing.assert_allclose(gx.data, 2 * x.data)


def test_allow_unused_still_applies_to_inputs_no_path_reaches():
    # The gradient of a linear function does not depend on its input at all: unused, as in PyTorch.
    x, w, z = var([1.0, -2.0]), var([3.0, 4.0]), var([5.0])
    g, = gpgan.grad(F.sum(x * w), x, create_graph=True)
    with pytest.raises(RuntimeError, match=r"inputs\[0\] .* is not used to compute the outputs"):
        gpgan.grad(F.sum(g * g), x, retain_graph=True)
    gx, gw, gz = gpgan.grad(F.sum(g * g), [x, w, z], allow_unused=True)
    assert gx is None and gz is None
    np.testing.assert_allclose(gw.data, 2 * w.data)


# -- backward_accumulate ------------------------------------------------------------------------
class _SummingProduct(FunctionNode):
    """``y = a * b`` elementwise, whose first-order backward adds into the earlier sums it is given
    and logs what it got: ``None`` or the earlier sum's values, per requested input."""

    log = []

    def forward(self, inputs):
        self.retain_inputs((0, 1))
        return (inputs[0] * inputs[1],)

    def backward(self, indexes, grad_outputs):
        a, b = self.get_retained_inputs()
        return tuple(grad_outputs[0] * (b if i == 0 else a) for i in indexes)

    def backward_accumulate(self, indexes, grad_outputs, grad_inputs):
        type(self).log.append([None if g is None else g.data.copy() for g in grad_inputs])
        # A marker the plain sum could not produce, so the test sees whose sum the engine kept.
        return tuple(g if earlier is None else gpgan.Variable(earlier.data + g.data + 1000.0)
                     for g, earlier in zip(self.backward(indexes, grad_outputs), grad_inputs))


def test_a_function_that_sums_into_earlier_gradients_gets_them_and_its_sums_are_kept():
    # x and w feed two products. The one the engine visits first finds no earlier gradient (plain
    # backward); the other gets the sums so far, aligned with the inputs, and its sums are kept.
    _SummingProduct.log = []
    x, w = var([1.0, 2.0]), var([3.0, -1.0])
    out = F.sum(_SummingProduct().apply((x, w))[0]) + F.sum(_SummingProduct().apply((x, w))[0]) * 2.0
    gx, gw = gpgan.grad(out, [x, w])
    (earlier_x, earlier_w), = _SummingProduct.log
    c = earlier_x[0] / w.data[0]  # 1 or 2, the factor of the term visited first
    assert c in (1.0, 2.0)
    np.testing.assert_allclose(earlier_x, c * w.data)
    np.testing.assert_allclose(earlier_w, c * x.data)
    np.testing.assert_allclose(gx.data, 3 * w.data + 1000.0)
    np.testing.assert_allclose(gw.data, 3 * x.data + 1000.0)
    # A graph being recorded (create_graph=True): backward only, and the engine's own sum.
    _SummingProduct.log = []
    out = F.sum(_SummingProduct().apply((x, w))[0]) + F.sum(_SummingProduct().apply((x, w))[0])
    gx, = gpgan.grad(out, x, create_graph=True)
    assert _SummingProduct.log == [] and gx.requires_grad
    np.testing.assert_allclose(gx.data, 2 * w.data)


def test_an_input_used_twice_by_one_function_gets_the_earlier_sum_once():
    # y = x * x after another use of x: the earlier sum goes to the first of the two entries only,
    # and the engine adds the second entry's term.
    _SummingProduct.log = []
    x = var([1.5, -2.0])
    out = F.sum(F.sin(x)) + F.sum(_SummingProduct().apply((x, x))[0])  # sin's node visited first
    gx, = gpgan.grad(out, x)
    (first, second), = _SummingProduct.log
    np.testing.assert_allclose(first, np.cos(x.data))
    assert second is None
    np.testing.assert_allclose(gx.data, np.cos(x.data) + 2 * x.data + 1000.0)
