"""Shape functions, reductions and linear: values against NumPy, first and second derivatives
against finite differences, and the error messages."""
import numpy as np
import pytest

import gpgan
import gpgan.functions as F
from gpgan.autograd import gradcheck, gradgradcheck


def check(fn, inputs):
    assert gradcheck(fn, inputs)
    assert gradgradcheck(fn, inputs)


@pytest.fixture
def r():
    return np.random.default_rng(42)


# -- reductions --------------------------------------------------------------------------------------
@pytest.mark.parametrize("axis", [None, 0, -1, (0, 2), (-1, -3), (1,)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_sum_and_mean_values_and_derivatives(r, axis, keepdims):
    x = r.standard_normal((2, 3, 4))
    np_axis = tuple(axis) if isinstance(axis, tuple) else axis
    np.testing.assert_allclose(F.sum(gpgan.Variable(x), axis, keepdims).data, x.sum(np_axis, keepdims=keepdims))
    np.testing.assert_allclose(F.mean(gpgan.Variable(x), axis, keepdims).data, x.mean(np_axis, keepdims=keepdims))
    # multiply by the input so the second derivative is not identically zero
    check(lambda v: F.sum(v * v, axis=axis, keepdims=keepdims), [x])
    check(lambda v: F.mean(v * v, axis=axis, keepdims=keepdims), [x])


@pytest.mark.parametrize("layout", ["nchw", "channels_last", "strided"])
@pytest.mark.parametrize("kept", [0, 1, 3])
@pytest.mark.parametrize("keepdims", [False, True])
def test_sum_over_all_axes_but_one_in_any_layout(r, layout, kept, keepdims):
    # Sums over all axes but one (a bias gradient) take one einsum pass: the same values as
    # NumPy's sum in every memory layout, float64 and float32.
    x = r.standard_normal((6, 5, 7, 4)) + 2.0
    if layout == "channels_last":
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    elif layout == "strided":
        x = np.repeat(x, 2, axis=2)[:, :, ::2]
    axes = tuple(a for a in range(4) if a != kept)
    ref = x.sum(axis=axes, keepdims=keepdims)
    got = F.sum(gpgan.Variable(x), axes, keepdims).data
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-13)
    got32 = F.sum(gpgan.Variable(x.astype(np.float32)), axes, keepdims).data
    assert got32.dtype == np.float32
    np.testing.assert_allclose(got32, ref, rtol=2e-6)


def test_sum_of_a_scalar_and_bad_axes():
    x = gpgan.Variable(np.array(3.0), requires_grad=True)
    assert F.sum(x, axis=0).item() == 3.0
    with pytest.raises(ValueError, match="sum: axis 3 is out of range"):
        F.sum(gpgan.Variable(np.ones((2, 3))), axis=3)
    with pytest.raises(ValueError, match="mean: axis -3 is out of range"):
        F.mean(gpgan.Variable(np.ones((2, 3))), axis=-3)
    with pytest.raises(ValueError, match="same axis twice"):
        F.sum(gpgan.Variable(np.ones((2, 3))), axis=(1, -1))


def test_variable_methods_reduce_like_functions(r):
    x = r.standard_normal((3, 4))
    v = gpgan.Variable(x)
    np.testing.assert_allclose(v.sum(axis=-1, keepdims=True).data, x.sum(-1, keepdims=True))
    np.testing.assert_allclose(v.mean(axis=0).data, x.mean(0))


# -- reshape, transpose, broadcast, getitem --------------------------------------------------------
def test_reshape_transpose_flatten_broadcast_sum_to(r):
    x = r.standard_normal((2, 3, 4))
    check(lambda v: F.reshape(v, (4, -1)) * F.reshape(v, 4, 6), [x])
    check(lambda v: F.transpose(v, (2, 0, 1)) ** 2, [x])
    check(lambda v: F.transpose(v, (-1, 0, -2)) ** 2, [x])
    check(lambda v: F.transpose(v) * F.transpose(v), [x])
    check(lambda v: F.flatten(v) ** 2, [x])
    np.testing.assert_array_equal(F.flatten(gpgan.Variable(x), 0, -2).shape, (6, 4))
    check(lambda v: F.broadcast_to(v, (2, 2, 3, 4)) ** 2, [x])
    check(lambda v: F.sum_to(v * v, (3, 1)), [x])
    np.testing.assert_allclose(F.sum_to(gpgan.Variable(x), (3, 1)).data, x.sum(axis=(0, 2))[:, None])
    np.testing.assert_array_equal(F.transpose(gpgan.Variable(x), (-1, 0, -2)).data, x.transpose(2, 0, 1))


def test_sum_to_rejects_shapes_that_do_not_broadcast():
    with pytest.raises(ValueError, match=r"sum_to: shape \(2, 3\) cannot be summed down to \(4,\)"):
        F.sum_to(gpgan.Variable(np.ones((2, 3))), (4,))
    with pytest.raises(ValueError, match="sum_to"):
        F.sum_to(gpgan.Variable(np.ones((3,))), (2, 3))


@pytest.mark.parametrize("index", [
    (slice(1, None), 0),
    (Ellipsis, slice(None, None, -2)),
    (None, 1),
    ([0, 2, 0, 0],),  # repeated rows: gradients add up
    (slice(None), [3, 1, 3]),
    ([0, 0, 1], [1, 1, 2]),  # the same element picked twice
    (np.array([True, False, True]),),
])
def test_getitem_basic_and_advanced_indexing(r, index):
    x = r.standard_normal((3, 4))
    np.testing.assert_array_equal(F.getitem(gpgan.Variable(x), index).data, x[index])
    check(lambda v: F.getitem(v, index) * F.getitem(v, index), [x])


def test_getitem_with_repeated_indices_accumulates_gradient():
    x = gpgan.Variable(np.arange(4.0), requires_grad=True)
    F.sum(x[[1, 1, 1, 3]]).backward()
    np.testing.assert_array_equal(x.grad.data, [0, 3, 0, 1])


# -- concat, stack, split, pad --------------------------------------------------------------------
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat_values_and_derivatives(r, axis):
    shapes = [(2, 3, 4), (2, 3, 4), (2, 3, 4)]
    shapes = [tuple(d + k if i == axis % 3 else d for i, d in enumerate(s)) for k, s in enumerate(shapes)]
    xs = [r.standard_normal(s) for s in shapes]
    np.testing.assert_array_equal(F.concat([gpgan.Variable(x) for x in xs], axis=axis).data,
                                  np.concatenate(xs, axis=axis))
    check(lambda a, b, c: F.cat([a, b * b, c], axis=axis) ** 2, xs)


def test_concat_gradient_only_for_some_inputs():
    a = gpgan.Variable(np.ones((2, 2)), requires_grad=True)
    b = gpgan.Variable(np.ones((1, 2)))
    y = F.concat([a, b])
    g, = gpgan.grad(y, a, grad_outputs=np.arange(6.0).reshape(3, 2))
    np.testing.assert_array_equal(g.data, [[0, 1], [2, 3]])


def test_concat_and_stack_errors_name_the_function_and_shapes():
    with pytest.raises(ValueError, match=r"concat: input shapes \[\(2, 3\), \(2, 4\)\] must agree except along axis 0"):
        F.concat([gpgan.Variable(np.ones((2, 3))), gpgan.Variable(np.ones((2, 4)))])
    with pytest.raises(ValueError, match="stack: all inputs must have the same shape"):
        F.stack([gpgan.Variable(np.ones((2, 3))), gpgan.Variable(np.ones((3, 2)))])
    with pytest.raises(ValueError, match="concat: axis 2 is out of range"):
        F.concat([gpgan.Variable(np.ones((2, 3)))] * 2, axis=2)


@pytest.mark.parametrize("call, message", [
    (lambda v: F.sum(v, axis=-4), r"sum: axis -4 is out of range .*\(accepted: -3 to 2\)"),
    (lambda v: F.concat([v, v], axis=3), r"concat: axis 3 is out of range .*\(accepted: -3 to 2\)"),
    (lambda v: F.split(v, 2, axis=5), r"split: axis 5 is out of range .*\(accepted: -3 to 2\)"),
    (lambda v: F.stack([v, v], axis=4), r"stack: axis 4 is out of range .*\(accepted: -4 to 3\)"),
    (lambda v: F.softmax(v, dim=3), r"softmax: dim 3 is out of range .*\(accepted: -3 to 2\)"),
])
def test_axis_errors_name_the_accepted_range(call, message):
    with pytest.raises(ValueError, match=message):
        call(gpgan.Variable(np.ones((2, 4, 4))))


@pytest.mark.parametrize("axis", [0, 2, -1, -3])
def test_stack_values_and_derivatives(r, axis):
    xs = [r.standard_normal((2, 3)) for _ in range(3)]
    np.testing.assert_array_equal(F.stack([gpgan.Variable(x) for x in xs], axis=axis).data, np.stack(xs, axis))
    check(lambda a, b, c: F.stack([a, b * b, c * a], axis=axis) ** 2, xs)


@pytest.mark.parametrize("sections,axis", [(2, 0), (3, -1), ([1, 3], 1), ([2], -1), ([0, 5], 1)])
def test_split_values_and_derivatives(r, sections, axis):
    x = r.standard_normal((4, 6))
    pieces = F.split(gpgan.Variable(x), sections, axis=axis)
    expected = np.split(x, sections, axis=axis)
    assert isinstance(pieces, tuple) and len(pieces) == len(expected)
    for p, e in zip(pieces, expected):
        np.testing.assert_array_equal(p.data, e)
    check(lambda v: tuple(p * p for p in F.split(v, sections, axis=axis)), [x])


def test_split_with_unused_outputs_gets_zeros_for_them(r):
    x = r.standard_normal((6, 2))
    # only the middle piece is used: the other two get no gradient (None) and count as zeros
    check(lambda v: F.split(v, 3)[1] ** 3, [x])
    v = gpgan.Variable(x, requires_grad=True)
    a, b, c = F.split(v, 3)
    g, = gpgan.grad(F.sum(b), v)
    np.testing.assert_array_equal(g.data, [[0, 0], [0, 0], [1, 1], [1, 1], [0, 0], [0, 0]])


def test_split_unequal_sections_error():
    with pytest.raises(ValueError, match=r"split: an input of shape \(5, 2\) cannot be split into 2 equal"):
        F.split(gpgan.Variable(np.ones((5, 2))), 2)


# torch's pad: (before, after) pairs from the last dimension backwards; the NumPy widths they mean.
PAD_CASES = [
    ((1, 2), ((0, 0), (0, 0), (1, 2))),
    ((1, 0, 0, 2), ((0, 0), (0, 2), (1, 0))),
    ((0, 1, 2, 1, 1, 0), ((1, 0), (2, 1), (0, 1))),
]


@pytest.mark.parametrize("pad,numpy_widths", PAD_CASES)
def test_pad_values_and_derivatives(r, pad, numpy_widths):
    x = r.standard_normal((2, 3, 2))
    np.testing.assert_array_equal(F.pad(gpgan.Variable(x), pad, value=0.5).data,
                                  np.pad(x, numpy_widths, constant_values=0.5))
    check(lambda v: F.pad(v * v, pad, value=-1.0) ** 2, [x])


def test_pad_follows_torch_shapes():
    # torch.nn.functional.pad's documented examples on a (3, 3, 4, 2) input.
    x = gpgan.Variable(np.zeros((3, 3, 4, 2)))
    assert F.pad(x, (1, 1)).shape == (3, 3, 4, 4)
    assert F.pad(x, (1, 1, 2, 2)).shape == (3, 3, 8, 4)
    assert F.pad(x, pad=(0, 1, 2, 1, 3, 3)).shape == (3, 9, 7, 3)


def test_pad_errors():
    x = gpgan.Variable(np.ones((2, 3)))
    with pytest.raises(ValueError, match="pad: mode 'reflect' is not supported"):
        F.pad(x, (1, 1), mode="reflect")
    with pytest.raises(ValueError, match="pad: pad widths must be non-negative"):
        F.pad(x, (-1, 0))
    with pytest.raises(ValueError, match=r"pad: pad \(1, 1, 1, 1, 1, 1\) must hold an even number .* \(2 dimensions\)"):
        F.pad(x, (1, 1, 1, 1, 1, 1))
    with pytest.raises(ValueError, match="pad: pad must be a sequence of ints"):
        F.pad(x, 1)


# -- matmul and linear -------------------------------------------------------------------------------
@pytest.mark.parametrize("x_shape", [(4, 3), (2, 2, 3), (3,)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_linear_values_and_derivatives(r, x_shape, with_bias):
    x, w, b = r.standard_normal(x_shape), r.standard_normal((5, 3)), r.standard_normal(5)
    expected = x @ w.T + (b if with_bias else 0)
    args = [x, w, b] if with_bias else [x, w]
    np.testing.assert_allclose(F.linear(*[gpgan.Variable(a) for a in args]).data, expected, rtol=1e-13)
    # tanh makes the second derivative with respect to every input non-trivial
    check(lambda *v: F.tanh(F.linear(*v)), args)


@pytest.mark.parametrize("slope", [0.0, 0.2, 1.0])
@pytest.mark.parametrize("with_bias", [True, False])
def test_linear_with_a_rectifier_values_and_derivatives(r, slope, with_bias):
    # One node for x @ W.T + b and the ReLU family's activation after it (0: ReLU): the
    # activation's values, and first and second derivatives against finite differences.
    x, w, b = r.standard_normal((6, 3)), r.standard_normal((5, 3)), r.standard_normal(5)
    pre = x @ w.T + (b if with_bias else 0)
    args = [x, w, b] if with_bias else [x, w]
    y = F.linear(*[gpgan.Variable(a, requires_grad=True) for a in args], negative_slope=slope)
    np.testing.assert_allclose(y.data, np.where(pre > 0, pre, slope * pre), rtol=1e-13)
    assert type(y.creator).__name__ == "Linear"  # one node, not two
    # x * y makes the second derivative with respect to every input non-trivial
    check(lambda *v: F.linear(*v, negative_slope=slope) * F.linear(*v), args)


def test_linear_refuses_a_slope_outside_0_1():
    x, w = gpgan.Variable(np.ones((2, 3))), gpgan.Variable(np.ones((5, 3)))
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match=rf"linear: negative_slope must be between 0 and 1 \(0 is ReLU\), got {bad}"):
            F.linear(x, w, negative_slope=bad)


def test_linear_skips_weight_gradient_when_only_the_input_is_asked(r):
    x = gpgan.Variable(r.standard_normal((4, 3)), requires_grad=True)
    w = gpgan.Variable(r.standard_normal((5, 3)), requires_grad=True)
    y = F.linear(x, w)
    calls = []
    node = y.creator
    original = node.backward
    node.backward = lambda indexes, gys: calls.append(indexes) or original(indexes, gys)
    gpgan.grad(F.sum(y), x)
    assert calls == [(0,)]


def test_linear_shape_errors():
    with pytest.raises(ValueError, match=r"linear: input of shape \(2, 4\) does not match weight of shape \(5, 3\)"):
        F.linear(gpgan.Variable(np.ones((2, 4))), gpgan.Variable(np.ones((5, 3))))
    with pytest.raises(ValueError, match=r"linear: bias must have shape \(5,\)"):
        F.linear(gpgan.Variable(np.ones((2, 3))), gpgan.Variable(np.ones((5, 3))), gpgan.Variable(np.ones(4)))
    with pytest.raises(ValueError, match="linear: weight must be 2-D"):
        F.linear(gpgan.Variable(np.ones((2, 3))), gpgan.Variable(np.ones(3)))


def test_linear_keeps_float32(r):
    x = gpgan.Variable(r.standard_normal((4, 3)).astype(np.float32), requires_grad=True)
    w = gpgan.Variable(r.standard_normal((5, 3)).astype(np.float32), requires_grad=True)
    b = gpgan.Variable(np.zeros(5, dtype=np.float32), requires_grad=True)
    y = F.linear(x, w, b)
    F.sum(y).backward()
    assert y.dtype == x.grad.dtype == w.grad.dtype == b.grad.dtype == np.float32


@pytest.mark.parametrize("shapes", [((3, 4), (4, 2)), ((2, 3, 4), (4, 2)), ((4,), (4, 2)), ((3, 4), (4,)),
                                    ((2, 1, 3, 4), (3, 4, 2))])
def test_matmul_derivatives(r, shapes):
    a, b = r.standard_normal(shapes[0]), r.standard_normal(shapes[1])
    np.testing.assert_allclose(F.matmul(gpgan.Variable(a), gpgan.Variable(b)).data, a @ b, rtol=1e-13)
    check(F.matmul, [a, b])


def test_a_broadcast_operand_is_multiplied_by_blas(r):
    """A broadcast operand (zero strides: the gradient of a sum, transposed for a weight gradient)
    is made contiguous before NumPy's matmul, which otherwise runs its own loop, not BLAS: the
    product of the contiguous copy, bit for bit, and the float64 product to float32 rounding."""
    from gpgan.kernels import matmul

    ones = np.broadcast_to(np.float32(0.37), (1, 256))
    b = r.standard_normal((256, 512)).astype(np.float32)
    assert ones.strides == (0, 0)
    got = matmul(ones, b)
    np.testing.assert_array_equal(got, np.matmul(np.ascontiguousarray(ones), b))
    np.testing.assert_allclose(got, 0.37 * b.astype(np.float64).sum(0, keepdims=True), rtol=1e-5, atol=1e-4)
    rows = np.broadcast_to(r.standard_normal((1, 5)).astype(np.float32), (3, 5))
    np.testing.assert_array_equal(matmul(b[:3].T, rows), np.matmul(b[:3].T, np.ascontiguousarray(rows)))


def test_products_with_inner_dimension_one_are_exact_and_differentiable(r):
    """An inner dimension of 1 (a critic's last layer: out_features 1) takes a broadcast multiply
    instead of BLAS: the same numbers bit for bit, in float32 too, and the same derivatives."""
    a, b = r.standard_normal((6, 1)), r.standard_normal((1, 5))
    check(F.matmul, [a, b])
    x, w = r.standard_normal((6, 4)), r.standard_normal((1, 4))
    check(lambda *v: F.tanh(F.linear(*v)), [x, w])
    # One input feature (the forward's product) and a batch of one (the weight gradient's).
    check(lambda *v: F.tanh(F.linear(*v)), [r.standard_normal((6, 1)), r.standard_normal((3, 1))])
    check(lambda *v: F.tanh(F.linear(*v)), [r.standard_normal((1, 4)), r.standard_normal((3, 4))])
    x1, w1 = r.standard_normal((6, 1)).astype(np.float32), r.standard_normal((3, 1)).astype(np.float32)
    np.testing.assert_array_equal(F.linear(gpgan.Variable(x1), gpgan.Variable(w1)).data, x1 @ w1.T)
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    product = F.matmul(gpgan.Variable(a32), gpgan.Variable(b32)).data
    assert product.dtype == np.float32 and product.flags.c_contiguous
    np.testing.assert_array_equal(product, a32 @ b32)
    # The input gradient of a one-output linear layer, first order (no graph) and recorded.
    xv = gpgan.Variable(x.astype(np.float32), requires_grad=True)
    wv = gpgan.Variable(w.astype(np.float32), requires_grad=True)
    gy = r.standard_normal((6, 1)).astype(np.float32)
    first, = gpgan.grad(F.linear(xv, wv), xv, grad_outputs=gy)
    recorded, = gpgan.grad(F.linear(xv, wv), xv, grad_outputs=gy, create_graph=True)
    np.testing.assert_array_equal(first.data, gy @ wv.data)
    np.testing.assert_array_equal(recorded.data, gy @ wv.data)
