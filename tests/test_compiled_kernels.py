"""The optional Numba kernels of the convolutions and the ReLU family: bit for bit the NumPy path's results.

Every convolution geometry of test_functions_conv, and relu and leaky_relu, run twice, with the
compiled kernels and with NumPy only, in float32 and float64, in several memory layouts, split over
threads and not: values and first- and second-order gradients must be identical, and the compiled
kernels must have run.

Batch norm's kernels sum in float64 (NumPy sums float32 pairwise): they agree with the NumPy passes
to the dtype's rounding, and give the same bits for any input layout and thread count.
"""
import os
import subprocess
import sys

import numpy as np
import pytest

import gpgan
import gpgan.functions as F
from gpgan.backend import threads
from gpgan.kernels import switches as compiled
from gpgan.kernels.cpu import passes as _split
from helpers import (
    CONV_CASES,
    CONVT_CASES,
    FEW_OUTPUTS_CASES,
    KERNEL_CASES,
    first_order_grads as _first_order_grads,
    in_layout,
    pair,
    values_and_grads as _values_and_grads,
)

numba_kernels = pytest.importorskip("gpgan.kernels.cpu.numba_kernels", reason="needs Numba")

KERNEL_NAMES = ("window_columns", "col2im_channels_last", "col2im_planes", "add", "outer", "relu", "leaky_relu",
                "rectified_gradient")
BATCH_NORM_KERNELS = ("channel_moments", "channel_gradient_sums", "channel_affine", "channel_input_gradient")
SUM_KERNELS = ("channel_sums",)


@pytest.fixture(autouse=True)
def own_convolutions():
    """These tests exercise gpgan's own kernels: oneDNN, which would take the float32
    convolutions, is off (its own tests are in test_onednn.py)."""
    before = compiled.onednn_switch.enabled()
    compiled.onednn_switch.set(False)
    yield
    compiled.onednn_switch.set(before)


@pytest.fixture
def counted(monkeypatch):
    """Counts the calls of each compiled kernel (which run on arrays of any size here); restores the
    switch afterwards."""
    monkeypatch.setattr(_split, "COMPILED_MIN_BYTES", 0)
    before = compiled.compiled_kernels_enabled()
    calls = dict.fromkeys(KERNEL_NAMES + BATCH_NORM_KERNELS + SUM_KERNELS, 0)
    for name in calls:
        original = getattr(numba_kernels, name)

        def counting(*args, _name=name, _original=original):
            calls[_name] += 1
            return _original(*args)

        monkeypatch.setattr(numba_kernels, name, counting)
    yield calls
    compiled.set_compiled_kernels(before)


@pytest.fixture(params=["one thread", "split"])
def thread_split(request, monkeypatch):
    before = threads.get_num_threads()
    if request.param == "split":
        monkeypatch.setattr(threads, "MIN_BYTES_PER_THREAD", 0)
        threads.set_num_threads(3)
    else:
        threads.set_num_threads(1)
    yield
    threads.set_num_threads(before)


def _both_paths(fn, arrays, counted):
    compiled.set_compiled_kernels(False)
    plain = _values_and_grads(fn, arrays)
    assert sum(counted.values()) == 0
    compiled.set_compiled_kernels(True)
    fast = _values_and_grads(fn, arrays)
    for a, b in zip(plain, fast):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    return counted


DTYPES = [np.float32, np.float64]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CONV_CASES + [(3, 3, 9, 8, 5, 4, 2, 1, 1, 1), (2, 6, 5, 5, 2, 3, 1, 1, 1, 1)])
def test_conv2d_identical_with_and_without_kernels(case, dtype, counted, thread_split, rng):
    N, C, H, W, O, k, s, p, d, g = case
    kH, kW = pair(k)
    x = in_layout(rng.standard_normal((N, C, H, W)).astype(dtype), "channels_last")
    w = rng.standard_normal((O, C // g, kH, kW)).astype(dtype)
    b = rng.standard_normal(O).astype(dtype)
    calls = _both_paths(lambda *v: F.conv2d(*v, stride=s, padding=p, dilation=d, groups=g), [x, w, b], counted)
    if g == 1:
        assert calls["window_columns"] > 0


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CONVT_CASES + KERNEL_CASES)
def test_conv_transpose2d_identical_with_and_without_kernels(case, dtype, counted, thread_split, rng):
    N, Cin, H, W, Cout, k, s, p, op, g, d = case
    kH, kW = pair(k)
    x = rng.standard_normal((N, Cin, H, W)).astype(dtype)
    w = rng.standard_normal((Cin, Cout // g, kH, kW)).astype(dtype)
    b = rng.standard_normal(Cout).astype(dtype)
    calls = _both_paths(lambda *v: F.conv_transpose2d(*v, stride=s, padding=p, output_padding=op, groups=g,
                                                      dilation=d), [x, w, b], counted)
    if g == 1:
        assert calls["window_columns"] > 0


@pytest.mark.parametrize("layout", ["nchw", "channels_last", "cnhw"])
@pytest.mark.parametrize("case", FEW_OUTPUTS_CASES)
def test_few_output_channels_identical_with_and_without_kernels(case, layout, counted, rng):
    N, C, H, W, O, k, p, d = case
    kH, kW = pair(k)
    x = in_layout(rng.standard_normal((N, C, H, W)).astype(np.float32), layout)
    w = rng.standard_normal((O, C, kH, kW)).astype(np.float32)
    calls = _both_paths(lambda *v: F.conv2d(*v, padding=p, dilation=d), [x, w], counted)
    assert calls["window_columns"] > 0


def test_dcgan_shapes_identical_and_every_kernel_runs(counted, rng):
    # The generator's k4 s2 p1 transposed convolutions (channels-last col2im) and ReLU, its 3x3 image
    # layer (few outputs: the channel-planes col2im), the critic's convolutions and its one-output
    # last layer (an outer product backward). (Batch norm, which the compiled path sums in float64,
    # is tested below.)
    x = rng.standard_normal((4, 32, 4, 4)).astype(np.float32)
    w1 = (0.1 * rng.standard_normal((32, 16, 4, 4))).astype(np.float32)
    w2 = (0.1 * rng.standard_normal((3, 16, 3, 3))).astype(np.float32)
    w3 = (0.1 * rng.standard_normal((8, 3, 4, 4))).astype(np.float32)
    w4 = (0.1 * rng.standard_normal((1, 128))).astype(np.float32)

    def net(x, w1, w2, w3, w4):
        h = F.relu(F.conv_transpose2d(x, w1, stride=2, padding=1))
        img = F.tanh(F.conv2d(h, w2, padding=1))
        features = F.leaky_relu(F.conv2d(img, w3, stride=2, padding=1), 0.2)
        return F.linear(F.reshape(features, (4, 128)), w4)

    calls = _both_paths(net, [x, w1, w2, w3, w4], counted)
    assert all(calls[name] > 0 for name in KERNEL_NAMES), calls
    assert not any(calls[name] for name in BATCH_NORM_KERNELS)


def _batch_norm_net(x, w, b):
    """Batch norm in training mode, then a nonlinear function of it (so that its gradient and
    double gradient are not the trivial ones of a sum)."""
    y = F.batch_norm(x, None, None, w, b, training=True)
    return y * F.tanh(y)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
@pytest.mark.parametrize("shape", [(4, 16, 4, 4), (6, 5, 3, 7), (7, 9)])
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_kernels_agree_with_numpy(shape, layout, affine, dtype, counted, thread_split, rng):
    # A mean far from zero (the moments are taken about a sample of each channel) and a spread
    # that differs per channel.
    C = shape[1]
    scale = np.exp(rng.standard_normal(C)).reshape((1, C) + (1,) * (len(shape) - 2))
    x = (50.0 + scale * rng.standard_normal(shape)).astype(dtype)
    if len(shape) == 4:
        x = in_layout(x, layout)
    params = [rng.standard_normal(C).astype(dtype), rng.standard_normal(C).astype(dtype)] if affine else []
    fn = _batch_norm_net if affine else (lambda x: _batch_norm_net(x, None, None))
    compiled.set_compiled_kernels(False)
    plain = _values_and_grads(fn, [x] + params) + _first_order_grads(fn, [x] + params)
    assert not any(counted.values())
    compiled.set_compiled_kernels(True)
    fast = _values_and_grads(fn, [x] + params) + _first_order_grads(fn, [x] + params)
    tol = {np.float32: 2e-4, np.float64: 1e-10}[dtype]
    for a, b in zip(plain, fast):
        assert a.dtype == b.dtype == dtype and a.shape == b.shape
        np.testing.assert_allclose(b, a, rtol=tol, atol=tol * np.abs(a).max())
    assert all(counted[name] > 0 for name in BATCH_NORM_KERNELS), counted


def test_batch_norm_kernels_same_bits_for_any_layout_and_thread_count(counted, monkeypatch, rng):
    # After a transposed convolution the input arrives channels-last or (NumPy's col2im) as a
    # cropped NCHW view: batch norm sums the same rows in the same blocks either way, on one
    # thread or three.
    x = (rng.standard_normal((6, 8, 5, 5)) + 3.0).astype(np.float32)
    w, b = rng.standard_normal(8).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    cropped = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))[:, :, 1:-1, 1:-1]
    results, before = [], threads.get_num_threads()
    for array in (in_layout(x, "channels_last"), cropped, x):
        for n in (1, 3):
            threads.set_num_threads(n)
            monkeypatch.setattr(threads, "MIN_BYTES_PER_THREAD", 0)
            results.append(_first_order_grads(_batch_norm_net, [array, w, b]))
    threads.set_num_threads(before)
    for other in results[1:]:
        for a, b in zip(results[0], other):
            np.testing.assert_array_equal(a, b)
    assert counted["channel_moments"] > 0 and counted["channel_input_gradient"] > 0


@pytest.mark.parametrize("dtype", DTYPES)
def test_channel_sums_agree_with_numpy_for_any_thread_count(dtype, counted, monkeypatch, rng):
    # Bias gradients: a convolution's over a channels-last activation, a linear layer's over its
    # (N, C) output gradient, recorded (differentiable) and not. The kernel sums in float64 over
    # fixed row blocks: NumPy's value to the dtype's rounding, the same bits on one thread or three;
    # an NCHW activation (channels not innermost) stays with NumPy.
    x = in_layout(rng.standard_normal((6, 5, 4, 3)).astype(dtype) + 2, "channels_last")
    rows = rng.standard_normal((37, 7)).astype(dtype) + 2
    w4, b4 = rng.standard_normal((5, 5, 1, 1)).astype(dtype), rng.standard_normal(5).astype(dtype)
    w2, b2 = rng.standard_normal((7, 7)).astype(dtype), rng.standard_normal(7).astype(dtype)

    def net(x, rows, w4, b4, w2, b2):
        return F.conv2d(x, w4, b4).sum() + (F.linear(rows, w2, b2) ** 2).sum() + F.sum(x * x, axis=(0, 2, 3)).sum()

    tol = {np.float32: 1e-5, np.float64: 1e-12}[dtype]
    compiled.set_compiled_kernels(False)
    plain = _values_and_grads(net, [x, rows, w4, b4, w2, b2]) + _first_order_grads(net, [x, rows, w4, b4, w2, b2])
    assert counted["channel_sums"] == 0
    compiled.set_compiled_kernels(True)
    results, before = [], threads.get_num_threads()
    for n in (1, 3):
        threads.set_num_threads(n)
        results.append(_values_and_grads(net, [x, rows, w4, b4, w2, b2])
                       + _first_order_grads(net, [x, rows, w4, b4, w2, b2]))
    threads.set_num_threads(before)
    assert counted["channel_sums"] > 0
    for a, b, c in zip(plain, *results):
        np.testing.assert_allclose(b, a, rtol=tol, atol=tol * np.abs(a).max())
        np.testing.assert_array_equal(b, c)
    nchw = np.ascontiguousarray(x)
    counted["channel_sums"] = 0
    np.testing.assert_array_equal(F.sum(gpgan.Variable(nchw), axis=(0, 2, 3)).data,
                                  np.einsum(nchw, [0, 1, 2, 3], [1]))
    assert counted["channel_sums"] == 0


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("slope", [0.0, 0.2, 1.0])
def test_rectified_linear_gradient_and_bias_sum_any_thread_count(slope, dtype, counted, rng):
    # A rectified Linear's first-order backward: its compiled passes (the rectifier's gradient,
    # then the bias's channel sums) give the same bits on one thread or three, and NumPy's values
    # to the dtype's rounding.
    x = rng.standard_normal((37, 5)).astype(dtype)
    w, b = rng.standard_normal((7, 5)).astype(dtype), rng.standard_normal(7).astype(dtype)
    w_out = rng.standard_normal((3, 7)).astype(dtype)
    b[0] = 0.0
    x[:3] = 0.0  # pre-activations exactly 0: the rectifier's kink takes the negative side's factor

    def net(x, w, b, w_out):
        return F.linear(F.linear(x, w, b, negative_slope=slope), w_out)

    arrays = [x, w, b, w_out]
    compiled.set_compiled_kernels(False)
    plain = _first_order_grads(net, arrays)
    compiled.set_compiled_kernels(True)
    compiledg, before = [], threads.get_num_threads()
    for n in (1, 3):
        threads.set_num_threads(n)
        compiledg.append(_first_order_grads(net, arrays))
    threads.set_num_threads(before)
    assert counted["channel_sums"] == 2
    tol = {np.float32: 1e-5, np.float64: 1e-12}[dtype]
    for a, b_, c in zip(plain, *compiledg):
        np.testing.assert_array_equal(b_, c)
        np.testing.assert_allclose(b_, a, rtol=tol, atol=tol * np.abs(a).max())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["nchw", "channels_last", "cnhw"])
@pytest.mark.parametrize("activation", [F.relu, lambda x: F.leaky_relu(x, 0.2), lambda x: F.leaky_relu(x, 0.01),
                                        lambda x: F.leaky_relu(x, 1.0), lambda x: F.leaky_relu(x, -0.3)],
                         ids=["relu", "leaky0.2", "leaky0.01", "leaky1", "leaky-0.3"])
def test_relu_family_identical_with_and_without_kernels(activation, layout, dtype, counted, thread_split, rng):
    # Signed zeros, infinities and a NaN among the inputs, and a layer's weight before it, so that
    # the gradient reaching the activation and the activation's input differ in layout.
    x = rng.standard_normal((5, 4, 3, 6)).astype(dtype)
    x.reshape(-1)[:6] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30]
    x = in_layout(x, layout)
    w = rng.standard_normal((4, 4, 1, 1)).astype(dtype)

    def net(x, w):
        return F.conv2d(activation(x), w) * 0.5 + activation(x)

    with np.errstate(invalid="ignore"):  # inf * 0 and NaN in the products are part of the test
        compiled.set_compiled_kernels(False)
        plain = _values_and_grads(net, [x, w]) + _first_order_grads(net, [x, w])
        assert sum(counted.values()) == 0
        compiled.set_compiled_kernels(True)
        fast = _values_and_grads(net, [x, w]) + _first_order_grads(net, [x, w])
    for a, b in zip(plain, fast):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
        assert np.array_equal(np.signbit(a), np.signbit(b))  # -0.0 where NumPy gives -0.0
    assert counted["rectified_gradient"] > 0  # every layout, (C, N, H, W) memory included
    assert counted["relu"] > 0 or activation is not F.relu
    assert counted["add"] > 0  # the two paths' gradients summed by the engine's adder


@pytest.mark.parametrize("dtype", DTYPES)
def test_outer_products_identical_with_and_without_kernels(dtype, counted, thread_split, rng):
    # A critic's one-output last layer: its input gradient (N, 1) @ (1, C) is an outer product,
    # once in the first backward and again in the second. Signed zeros, infinities and a NaN
    # among the weights; the products must match NumPy's broadcast multiply bit for bit.
    x = rng.standard_normal((9, 7)).astype(dtype)
    w = rng.standard_normal((1, 7)).astype(dtype)
    w[0, :4] = [-0.0, np.inf, np.nan, 0.0]

    def net(x, w):
        y = F.linear(F.tanh(x), w)
        g, = gpgan.grad(F.sum(y * y), x, create_graph=True)
        return g * g

    with np.errstate(invalid="ignore"):
        _both_paths(net, [x, w], counted)
        a, b = rng.standard_normal((9, 1)).astype(dtype), w[:, ::-1]  # a strided row
        compiled.set_compiled_kernels(True)
        np.testing.assert_array_equal(F.matmul(gpgan.Variable(a), gpgan.Variable(b)).data, a * b)
    assert counted["outer"] >= 3


def test_small_activations_run_on_numpy_and_do_not_load_numba():
    # A 128 KiB activation stays below COMPILED_MIN_BYTES: Numba (about 100 MiB) is never imported;
    # a toy MLP's 512 KiB one takes the compiled pass. Both gradients are exact.
    code = ("import numpy as np, gpgan, gpgan.functions as F, sys\n"
            "for shape in [(128, 256), (256, 512)]:\n"
            "    x = gpgan.Variable(np.linspace(-1, 1, shape[0] * shape[1], dtype=np.float32).reshape(shape),\n"
            "                       requires_grad=True)\n"
            "    g, = gpgan.grad(F.leaky_relu(x, 0.25).sum(), [x])\n"
            "    positive = int((x.data > 0).sum())\n"
            "    print('numba' in sys.modules, float(g.data.sum()) == positive + 0.25 * (x.data.size - positive))\n")
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, GPGAN_NUMBA="1"),
                         capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True", "True", "True"]


def test_switch_rejects_bad_values():
    with pytest.raises(ValueError, match="True or False"):
        compiled.set_compiled_kernels("yes")
    env = dict(os.environ, GPGAN_NUMBA="fast")
    out = subprocess.run([sys.executable, "-c", "import gpgan.kernels.switches as c; c.compiled_kernels_enabled()"],
                         env=env, capture_output=True, text=True)
    assert out.returncode != 0 and "GPGAN_NUMBA must be 0" in out.stderr and "'fast'" in out.stderr


def test_environment_switches_kernels_off_and_numpy_path_runs():
    code = ("import numpy as np, gpgan, gpgan.functions as F, sys\n"
            "from gpgan.kernels import switches as compiled\n"
            "x = gpgan.Variable(np.ones((1, 2, 5, 5), np.float32)); w = gpgan.Variable(np.ones((3, 2, 3, 3), np.float32))\n"
            "y = F.conv2d(x, w, padding=1)\n"
            "print(compiled.compiled_kernels_enabled(), 'gpgan.kernels.cpu.numba_kernels' in sys.modules, "
            "float(y.data.sum()))\n")
    runs = {}
    for value in ("0", "1"):
        out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, GPGAN_NUMBA=value, GPGAN_ONEDNN="0"),
                             capture_output=True, text=True, check=True)
        runs[value] = out.stdout.split()
    assert runs["0"][:2] == ["False", "False"] and runs["1"][:2] == ["True", "True"]
    # Each output sums 2 channels over its taps inside the 5x5 input (per axis 2, 3, 3, 3, 2 of 3).
    assert runs["0"][2] == runs["1"][2] == str(float(3 * 2 * 13 * 13))


def test_a_failing_numba_import_falls_back_to_numpy_with_one_warning(monkeypatch, rng):
    # E.g. a NumPy newer than the installed Numba supports: the import raises; the convolution
    # runs on NumPy, warns once, and the kernels stay off for the process.
    from gpgan.kernels.cpu import select as _compiled

    before = compiled.compiled_kernels_enabled()
    monkeypatch.setattr(_compiled, "_kernels", None)
    monkeypatch.setitem(sys.modules, "gpgan.kernels.cpu.numba_kernels", None)  # import raises
    monkeypatch.delattr(sys.modules["gpgan.kernels.cpu"], "numba_kernels")
    compiled.set_compiled_kernels(True)
    x = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    try:
        with pytest.warns(RuntimeWarning, match="Numba kernels unavailable.*using NumPy only"):
            y = F.conv2d(gpgan.Variable(x), gpgan.Variable(w), padding=1)
        assert compiled.compiled_kernels_enabled() is False
        assert _compiled.cpu_kernels(np, np.float32) is None
    finally:
        compiled.set_compiled_kernels(before)
    monkeypatch.undo()
    compiled.set_compiled_kernels(False)
    try:
        np.testing.assert_array_equal(y.data, F.conv2d(gpgan.Variable(x), gpgan.Variable(w), padding=1).data)
    finally:
        compiled.set_compiled_kernels(before)
