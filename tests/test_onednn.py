"""oneDNN's convolutions and products (gpgan.kernels.cpu.onednn): the same values and gradients as gpgan's own kernels.

Every convolution geometry of test_functions_conv, and the grouped and depthwise ones of R3GAN's
networks, runs twice in float32, on oneDNN and on gpgan's own kernels: values and first- and
second-order gradients must agree to float32 rounding, and oneDNN must have run every case
(forward, data and weight gradients, as gpgan.kernels.record_dispatch's records say). What oneDNN
does not take (float64, a geometry it cannot express) must run gpgan's own kernels, bit for bit.
Products are checked against float64 ones, the fused bias, rectifier and addend against the same
parts done apart, and the compiled product call against the ctypes one, bit for bit. The switch,
its environment variable, a library that fails to load, and what a run records are checked too.
"""
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import gpgan
import gpgan.functions as F
import gpgan.kernels
from gpgan.kernels import Dispatch, record_dispatch
from gpgan.kernels import switches as compiled
from gpgan.kernels.cpu import onednn
from helpers import (
    CONV_CASES,
    CONVT_CASES,
    FEW_OUTPUTS_CASES,
    KERNEL_CASES,
    in_layout,
    pair,
    values_and_grads as _values_and_grads,
)

pytestmark = pytest.mark.skipif(not compiled.onednn_switch._installed(), reason="needs onednn-cpu-gomp")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONVOLUTIONS = ("conv2d", "conv_transpose2d", "conv2d_grad_weight")


@pytest.fixture
def records():
    """The dispatch records of the test (gpgan.kernels.record_dispatch); restores the switch
    afterwards."""
    before = compiled.onednn_switch.enabled()
    with record_dispatch() as made:
        yield made
    compiled.onednn_switch.set(before)


@pytest.fixture
def switch():
    """Restores the oneDNN switch after the test."""
    before = compiled.onednn_switch.enabled()
    yield compiled.onednn_switch
    compiled.onednn_switch.set(before)


def _on_onednn(records, ops=None):
    """The records of calls oneDNN ran (of ``ops`` only, where given)."""
    return [r for r in records if r.library == "onednn" and (ops is None or r.op in ops)]


def _kinds(records):
    """Each record as ``(op, library, fused)``: how a product is called depends on whether Numba is
    loaded, which these tests leave as they find it."""
    return [r[:3] for r in records]


def _both(fn, arrays):
    """(gpgan's own results, oneDNN's results, the dispatch records of oneDNN's run)."""
    compiled.onednn_switch.set(False)
    with record_dispatch() as off:
        own = _values_and_grads(fn, arrays)
    assert off and not _on_onednn(off)  # the dispatch was asked, and oneDNN ran nothing
    compiled.onednn_switch.set(True)
    with record_dispatch() as on:
        dnn = _values_and_grads(fn, arrays)
    for a, b in zip(own, dnn):
        assert a.dtype == b.dtype and a.shape == b.shape
    return own, dnn, on


def _all_convolutions_on(records, library, ops=CONVOLUTIONS):
    """True when the records hold each of ``ops`` and every convolution among them ran on ``library``."""
    convolutions = [r for r in records if r.op in CONVOLUTIONS]
    return {r.op for r in convolutions} >= set(ops) and all(r.library == library for r in convolutions)


# R3GAN's convolutions (gpgan.models.r3gan), small: a 3x3 in groups of 16 channels, the [1, 3, 3, 1]
# resampling (depthwise 4x4, stride 2, padding 1), the critic's depthwise 4x4 to 1x1, and a
# depthwise convolution with two outputs per channel.
# (N, C, H, W, O, k, stride, padding, dilation, groups)
GROUPED_CASES = [(2, 32, 6, 6, 32, 3, 1, 1, 1, 2), (2, 16, 8, 8, 16, 4, 2, 1, 1, 16),
                 (3, 8, 4, 4, 8, 4, 1, 0, 1, 8), (2, 4, 5, 5, 8, 3, 1, 1, 1, 4)]


def _assert_close(own, dnn):
    # Other summation orders: agreement to a few float32 roundings of the largest term.
    for a, b in zip(own, dnn):
        scale = max(float(np.abs(a).max()), 1e-30)
        np.testing.assert_allclose(b, a, rtol=0, atol=2e-5 * scale)


@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
@pytest.mark.parametrize("case", CONV_CASES + GROUPED_CASES
                         + [(3, 3, 9, 8, 5, 4, 2, 1, 1, 1), (2, 6, 5, 5, 2, 3, 1, 1, 1, 1)])
def test_conv2d_matches_own_kernels(case, layout, switch, rng):
    # Values, the gradients of x, W and b, and their second-order gradients (values_and_grads).
    N, C, H, W, O, k, s, p, d, g = case
    kH, kW = pair(k)
    x = in_layout(rng.standard_normal((N, C, H, W)).astype(np.float32), layout)
    w = rng.standard_normal((O, C // g, kH, kW)).astype(np.float32)
    b = rng.standard_normal(O).astype(np.float32)
    own, dnn, on = _both(lambda *v: F.conv2d(*v, stride=s, padding=p, dilation=d, groups=g), [x, w, b])
    assert _all_convolutions_on(on, "onednn"), on  # forward, data and weight gradients, every one
    _assert_close(own, dnn)


# R3GAN's up-sampling (depthwise 4x4, stride 2, padding 1) and a grouped 3x3 of 16 channels a group.
# (N, Cin, H, W, Cout, k, stride, padding, output_padding, groups, dilation)
GROUPED_TRANSPOSED_CASES = [(2, 16, 4, 4, 16, 4, 2, 1, 0, 16, 1), (2, 32, 5, 5, 32, 3, 1, 1, 0, 2, 1)]


@pytest.mark.parametrize("case", CONVT_CASES + KERNEL_CASES + GROUPED_TRANSPOSED_CASES)
def test_conv_transpose2d_matches_own_kernels(case, switch, rng):
    N, Cin, H, W, Cout, k, s, p, op, g, d = case
    kH, kW = pair(k)
    x = rng.standard_normal((N, Cin, H, W)).astype(np.float32)
    w = rng.standard_normal((Cin, Cout // g, kH, kW)).astype(np.float32)
    b = rng.standard_normal(Cout).astype(np.float32)
    own, dnn, on = _both(lambda *v: F.conv_transpose2d(*v, stride=s, padding=p, output_padding=op, groups=g,
                                                       dilation=d), [x, w, b])
    # Seen as the adjoint of a convolution, output padding beyond the padding is a negative right
    # padding, which oneDNN does not take: those run gpgan's own kernels.
    expressible = all(o <= q for o, q in zip(pair(op), pair(p)))
    assert _all_convolutions_on(on, "onednn" if expressible else "portable"), on
    _assert_close(own, dnn)


@pytest.mark.parametrize("case", FEW_OUTPUTS_CASES)
def test_few_output_channels_match_own_kernels(case, switch, rng):
    N, C, H, W, O, k, p, d = case
    kH, kW = pair(k)
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = rng.standard_normal((O, C, kH, kW)).astype(np.float32)
    own, dnn, on = _both(lambda *v: F.conv2d(*v, padding=p, dilation=d), [x, w])
    assert _all_convolutions_on(on, "onednn"), on
    _assert_close(own, dnn)


def test_dcgan_critic_layers_match_own_kernels(switch, rng):
    # The shapes the benchmarks time (batch 8 instead of 64): k4 s2 p1 convolutions and the k4
    # valid one to a single output, through an R1-like double backward.
    x = rng.uniform(-1, 1, (8, 3, 32, 32)).astype(np.float32)
    ws = [(0.05 * rng.standard_normal(shape)).astype(np.float32)
          for shape in [(64, 3, 4, 4), (128, 64, 4, 4), (256, 128, 4, 4), (1, 256, 4, 4)]]

    def critic(x, *ws):
        h = x
        for w in ws[:-1]:
            h = F.leaky_relu(F.conv2d(h, w, stride=2, padding=1), 0.2)
        return F.conv2d(h, ws[-1])

    own, dnn, on = _both(critic, [x] + ws)
    assert _all_convolutions_on(on, "onednn"), on
    _assert_close(own, dnn)


def test_r3gan_critic_r1_matches_own_kernels(switch, rng):
    # R3GAN's critic (grouped 3x3 in groups of 16, depthwise resampling, the depthwise 4x4 to 1x1)
    # at two stages of widths 32 and 16, through an R1-like double backward: values, the input
    # gradient and the weights' gradients of its squared norm.
    import gpgan.nn as nn
    from gpgan.models import make_model

    critic = make_model("r3gan_critic", widths=[32, 16], blocks=[1, 1], group_size=16, rng=rng)
    names = [n for n, _ in critic.named_parameters()]
    weights = [(0.3 * rng.standard_normal(p.shape)).astype(np.float32) for _, p in critic.named_parameters()]
    x = rng.uniform(-1, 1, (2, 3, 8, 8)).astype(np.float32)

    def logits(x, *w):
        return nn.functional_call(critic, dict(zip(names, w)), x)

    own, dnn, on = _both(logits, [x] + weights)
    assert _all_convolutions_on(on, "onednn"), on
    _assert_close(own, dnn)


def test_float64_runs_own_kernels(switch, rng):
    x = rng.standard_normal((2, 3, 6, 6))
    w = rng.standard_normal((4, 3, 3, 3))
    own, dnn, on = _both(lambda *v: F.conv2d(*v, padding=1), [x, w])
    assert _all_convolutions_on(on, "portable"), on
    with record_dispatch() as single:  # float32 would run there
        F.conv2d(gpgan.Variable(x.astype(np.float32)), gpgan.Variable(w.astype(np.float32)), padding=1)
    assert single == [Dispatch("conv2d", "onednn")]
    for a, b in zip(own, dnn):
        np.testing.assert_array_equal(a, b)


def test_a_geometry_onednn_cannot_express_runs_own_kernels(switch, rng):
    # 8 rows, k3 s2 p0: 3 outputs, and the 8th row is read by no window. In the weight gradient
    # (x and gy given) that needs a right padding of -1, which oneDNN does not take.
    x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    gy = rng.standard_normal((2, 4, 3, 3)).astype(np.float32)
    switch.set(True)
    assert onednn.conv_backward_weights(x, gy, (3, 3), (2, 2), (0, 0), (1, 1)) is None
    assert gpgan.kernels.conv2d_grad_weight(np, x, gy, (3, 3), (2, 2), (0, 0), (1, 1), 1) is None
    compiled.onednn_switch.set(False)
    own = F.conv2d_grad_weight(gpgan.Variable(x), gpgan.Variable(gy), 3, stride=2).data
    compiled.onednn_switch.set(True)
    with record_dispatch() as on:
        np.testing.assert_array_equal(F.conv2d_grad_weight(gpgan.Variable(x), gpgan.Variable(gy), 3, stride=2).data,
                                      own)
    assert on[0] == Dispatch("conv2d_grad_weight", "portable")  # then the portable form's product


def test_kernels_are_onednn_s_jit_ones():
    # On an x86-64 CPU oneDNN's JIT kernels (brgconv or jit, with the ISA) run, not its reference
    # loops, which are 100 to 1000 times slower.
    names = onednn.implementation_names((4, 64, 16, 16), (128, 64, 4, 4), (2, 2), (1, 1), (1, 1), (8, 8))
    assert names is not None and len(names) == 3
    assert all(name and not name.startswith("ref") for name in names), names
    # R3GAN's grouped 3x3 (groups of 16 channels) and depthwise resampling and 4x4 to 1x1.
    for x, w, s, p, out, g in [((4, 32, 16, 16), (32, 16, 3, 3), 1, 1, 16, 2),
                               ((4, 32, 16, 16), (32, 1, 4, 4), 2, 1, 8, 32),
                               ((4, 32, 4, 4), (32, 1, 4, 4), 1, 0, 1, 32)]:
        names = onednn.implementation_names(x, w, (s, s), (p, p), (1, 1), (out, out), g)
        assert names is not None and all(name and not name.startswith("ref") for name in names), (x, w, g, names)


def test_a_library_that_fails_to_load_falls_back_with_one_warning(tmp_path):
    # A broken install: an onednn-cpu-gomp whose libdnnl.so.3 is no library, found before the real
    # one on the path. The first convolution warns once, turns oneDNN off and runs gpgan's own
    # kernels, as every later one does, without a second warning.
    broken = tmp_path / "site"
    info = broken / "onednn_cpu_gomp-2023.2.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: onednn-cpu-gomp\nVersion: 2023.2.0\n")
    (info / "RECORD").write_text("libdnnl.so.3,,\n")
    (broken / "libdnnl.so.3").write_bytes(b"not a shared library")
    code = ("import warnings, numpy as np, gpgan, gpgan.functions as F\n"
            "from gpgan.kernels import onednn_enabled, record_dispatch\n"
            "rng = np.random.default_rng(0)\n"
            "x, w = (gpgan.Variable(rng.standard_normal(s).astype(np.float32)) for s in [(2, 3, 6, 6), (4, 3, 3, 3)])\n"
            "with warnings.catch_warnings(record=True) as caught, record_dispatch() as records:\n"
            "    warnings.simplefilter('always')\n"
            "    first = onednn_enabled()\n"
            "    y = F.conv2d(x, w, padding=1).data\n"
            "    again = F.conv2d(x, w, padding=1).data\n"
            "print(first, onednn_enabled(), len(caught), caught[0].category.__name__,\n"
            "      [r.library for r in records if r.op == 'conv2d'], np.array_equal(y, again))\n"
            "print(caught[0].message)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, GPGAN_ONEDNN="1", PYTHONPATH=os.pathsep.join([str(broken), ROOT])))
    assert out.returncode == 0, out.stderr
    summary, message = out.stdout.splitlines()
    assert summary == "True False 1 RuntimeWarning ['portable', 'portable'] True", out.stdout
    assert "oneDNN convolutions and products unavailable" in message and "using gpgan's own" in message, message


def test_switch_and_environment(rng):
    with pytest.raises(ValueError, match="set_onednn: enabled must be True or False"):
        gpgan.kernels.set_onednn("yes")
    code = ("import numpy as np, gpgan, gpgan.functions as F, sys\n"
            "from gpgan.kernels import onednn_enabled, onednn_version\n"
            "x = gpgan.Variable(np.ones((1, 2, 5, 5), np.float32)); w = gpgan.Variable(np.ones((3, 2, 3, 3), np.float32))\n"
            "y = F.conv2d(x, w, padding=1)\n"
            "print(onednn_enabled(), onednn_version(), float(y.data.sum()))\n")
    runs = {}
    for value in ("0", "1"):
        out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, GPGAN_ONEDNN=value, PYTHONPATH=ROOT),
                             capture_output=True, text=True, check=True)
        runs[value] = out.stdout.split()
    assert runs["0"][:2] == ["False", "None"] and runs["1"][:2] == ["True", "2023.2.0"]
    # Each output sums 2 channels over its taps inside the 5x5 input (per axis 2, 3, 3, 3, 2 of 3).
    assert runs["0"][2] == runs["1"][2] == str(float(3 * 2 * 13 * 13))
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, GPGAN_ONEDNN="fast", PYTHONPATH=ROOT),
                         capture_output=True, text=True)
    assert out.returncode != 0 and "GPGAN_ONEDNN must be 0" in out.stderr and "'fast'" in out.stderr


@pytest.mark.parametrize("order", ["rows", "a transposed", "b transposed", "both sliced"])
def test_large_float32_products_run_on_onednn(order, records, rng):
    compiled.onednn_switch.set(True)
    a = rng.standard_normal((96, 200)).astype(np.float32)
    b = rng.standard_normal((200, 300)).astype(np.float32)
    if order == "a transposed":
        a = np.ascontiguousarray(a.T).T
    elif order == "b transposed":
        b = np.ascontiguousarray(b.T).T
    elif order == "both sliced":  # row strides larger than the rows
        a = np.pad(a, ((0, 0), (0, 7)))[:, :200]
        b = np.pad(b, ((0, 0), (3, 0)))[:, 3:]
    assert a.shape[0] * a.shape[1] * b.shape[1] >= onednn.MIN_PRODUCT_MACS
    c = gpgan.kernels.matmul(a, b)
    assert _kinds(records) == [("matmul", "onednn", ())]
    assert c.shape == (96, 300) and c.dtype == np.float32 and c.flags.c_contiguous
    exact = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c, exact, rtol=0, atol=1e-5 * np.abs(exact).max())


class _Subclass(np.ndarray):
    """A NumPy subclass (as a memmap or a library's array type is): its products are decided at
    each call, not planned."""


def test_products_of_numpy_subclasses_are_decided_at_each_call(records, rng):
    compiled.onednn_switch.set(True)
    a = rng.standard_normal((96, 200)).astype(np.float32)
    b = rng.standard_normal((200, 300)).astype(np.float32)
    bias = rng.standard_normal(300).astype(np.float32)
    sub_a, sub_b = a.view(_Subclass), b.view(_Subclass)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    for _ in range(2):
        c = gpgan.kernels.matmul(sub_a, b)
        np.testing.assert_allclose(c, exact, rtol=0, atol=1e-5 * np.abs(exact).max())
        fused = gpgan.kernels.fused_affine(a, sub_b, bias, 0.0)
        want = np.maximum(exact + bias, 0)
        np.testing.assert_allclose(fused, want, rtol=0, atol=1e-5 * np.abs(want).max())
    small = (sub_a[:8, :8], b[:8, :8])
    np.testing.assert_array_equal(gpgan.kernels.matmul(*small), np.matmul(*small))
    compiled.onednn_switch.set(False)
    np.testing.assert_array_equal(gpgan.kernels.matmul(sub_a, b), np.matmul(a, b))
    assert gpgan.kernels.fused_affine(a, sub_b, bias, 0.0) is None
    assert _kinds(records) == [("matmul", "onednn", ()), ("fused_affine", "onednn", ("bias", "rectifier"))] * 2 \
        + [("matmul", "numpy", ()), ("matmul", "numpy", ()), ("fused_affine", "portable", ())]


def test_each_call_and_thread_gets_its_own_product(records, rng):
    # oneDNN is pointed at each call's arrays (gpgan keeps one set of memory objects per operation
    # and thread, re-pointed at each call): new arrays, the same buffer with new values, and eight
    # threads calling one product at once must each get their own result. Shapes of this test
    # only, so that no thread has run the product before.
    from concurrent.futures import ThreadPoolExecutor

    compiled.onednn_switch.set(True)
    b = rng.standard_normal((210, 300)).astype(np.float32)

    def products(seed):
        local = np.random.default_rng(seed)
        buffer = np.empty((96, 210), np.float32)
        for k in range(6):
            a = local.standard_normal((96, 210)).astype(np.float32)
            if k % 2:  # the buffer of the call before last, with new values
                buffer[...] = a
                a = buffer
            c = gpgan.kernels.matmul(a, b)
            exact = a.astype(np.float64) @ b.astype(np.float64)
            np.testing.assert_allclose(c, exact, rtol=0, atol=1e-5 * np.abs(exact).max())
        return True

    assert products(0)
    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(products, range(1, 9)))
    assert _kinds(records) == [("matmul", "onednn", ())] * (6 * 9)


def test_a_kind_of_product_is_decided_once_and_again_after_the_switch_changes(records, monkeypatch, rng):
    # gpgan.kernels decides which library takes a kind of product (shapes, strides, dtypes, the
    # fused parts and theirs) at its first call and looks the decision up at later ones; a change
    # of the oneDNN switch makes it decide again. Every result is the library's own, bit for bit.
    from gpgan.kernels import products

    asked = []
    original = products.onednn_products
    monkeypatch.setattr(products, "onednn_products", lambda a, b: asked.append(a.shape) or original(a, b))
    compiled.onednn_switch.set(True)  # forgets what earlier tests decided
    a = rng.standard_normal((96, 200)).astype(np.float32)
    b = rng.standard_normal((200, 300)).astype(np.float32)
    small = (a[:8, :8], b[:8, :8])
    on_onednn = gpgan.kernels.matmul(a, b)
    for _ in range(3):
        np.testing.assert_array_equal(gpgan.kernels.matmul(a, b), on_onednn)
        np.testing.assert_array_equal(gpgan.kernels.matmul(*small), np.matmul(*small))
    assert len(asked) == 2 and [r.library for r in records] == ["onednn"] + ["onednn", "numpy"] * 3
    compiled.onednn_switch.set(False)
    np.testing.assert_array_equal(gpgan.kernels.matmul(a, b), np.matmul(a, b))
    assert gpgan.kernels.fused_affine(a, b) is None and len(asked) == 3
    assert [r.library for r in records[7:]] == ["numpy", "portable"]
    compiled.onednn_switch.set(True)
    np.testing.assert_array_equal(gpgan.kernels.matmul(a, b), on_onednn)
    assert len(asked) == 4 and records[9].library == "onednn"
    # Other strides are another kind; so is a bias of other strides, which oneDNN does not take.
    np.testing.assert_array_equal(gpgan.kernels.matmul(a, np.asfortranarray(b)), on_onednn)
    bias = rng.standard_normal(600).astype(np.float32)
    fused = gpgan.kernels.fused_affine(a, b, bias[:300])
    assert fused is not None and gpgan.kernels.fused_affine(a, b, bias[::2]) is None
    np.testing.assert_array_equal(gpgan.kernels.fused_affine(a, b, bias[300:]), on_onednn + bias[300:])
    assert len(asked) == 7
    # At most _PLANS_LIMIT kinds are kept: beyond, the decisions start again, with the same results.
    monkeypatch.setattr(products, "_PLANS_LIMIT", 2)
    cases = [(a, b), small, (a[:, :100], b[:100])]  # oneDNN, then NumPy, NumPy
    for _ in range(2):
        got = [gpgan.kernels.matmul(x, y) for x, y in cases]
        assert len(products._plans) <= 2
        np.testing.assert_array_equal(got[0], on_onednn)
        for (x, y), c in zip(cases[1:], got[1:]):
            np.testing.assert_array_equal(c, np.matmul(x, y))


def test_small_float64_batched_and_reversed_products_stay_with_numpy(records, rng):
    compiled.onednn_switch.set(True)
    a = rng.standard_normal((96, 200)).astype(np.float32)
    b = rng.standard_normal((200, 300)).astype(np.float32)
    cases = [(a[:8, :8], b[:8, :8]),                            # below MIN_PRODUCT_MACS
             (a.astype(np.float64), b.astype(np.float64)),      # float64
             (np.stack([a, a]), np.stack([b, b])),              # batched
             (a[::-1], b)]                                      # a negative stride
    for x, y in cases:
        np.testing.assert_array_equal(gpgan.kernels.matmul(x, y), np.matmul(x, y))
    assert _kinds(records) == [("matmul", "numpy", ())] * len(cases)


@pytest.mark.parametrize("slope", [None, 0.0, 0.2])
@pytest.mark.parametrize("with_bias", [True, False])
def test_products_with_a_fused_bias_and_rectifier(slope, with_bias, records, rng):
    # The bias row and the ReLU family's rectifier in oneDNN's own pass over the product: the
    # float64 result to float32 rounding, in one call that took both.
    compiled.onednn_switch.set(True)
    a = rng.standard_normal((96, 200)).astype(np.float32)
    b = np.ascontiguousarray(rng.standard_normal((300, 200)).astype(np.float32)).T  # W.T, as Linear
    bias = rng.standard_normal(300).astype(np.float32) if with_bias else None
    c = gpgan.kernels.fused_affine(a, b, bias, slope)
    exact = a.astype(np.float64) @ b.astype(np.float64) + (0 if bias is None else bias)
    if slope is not None:
        exact = np.where(exact > 0, exact, slope * exact)
    fused = ("bias",) * with_bias + ("rectifier",) * (slope is not None)
    assert _kinds(records) == [("fused_affine", "onednn", fused)] and c.dtype == np.float32 and c.flags.c_contiguous
    np.testing.assert_allclose(c, exact, rtol=0, atol=1e-5 * np.abs(exact).max())
    if slope == 0.0:
        assert (c >= 0).all() and (c == 0).mean() > 0.3  # negative sums are cut to zero


def test_a_small_product_with_a_large_fused_output_runs_on_onednn(records, rng):
    # A toy MLP's first layer, (256, 2) @ (2, 512): too few multiply-adds for oneDNN on its own,
    # but with a bias or a rectifier fused its output's passes are saved; the bare product stays
    # with NumPy.
    compiled.onednn_switch.set(True)
    x = rng.standard_normal((256, 2)).astype(np.float32)
    w_t = np.ascontiguousarray(rng.standard_normal((512, 2)).astype(np.float32)).T
    bias = rng.standard_normal(512).astype(np.float32)
    assert 256 * 2 * 512 < onednn.MIN_PRODUCT_MACS and 256 * 512 >= onednn.MIN_FUSED_OUTPUT
    assert gpgan.kernels.fused_affine(x, w_t, None, None) is None
    exact = x.astype(np.float64) @ w_t.astype(np.float64) + bias
    for b, slope, want in [(bias, None, exact), (None, 0.0, np.maximum(exact - bias, 0)),
                           (bias, 0.2, np.where(exact > 0, exact, 0.2 * exact))]:
        got = gpgan.kernels.fused_affine(x, w_t, b, slope)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max())
    small = x[:64]  # an output of 64 x 512 elements: the passes stay in cache, NumPy's product runs
    assert gpgan.kernels.fused_affine(small, w_t, bias, 0.0) is None
    assert _kinds(records) == [("fused_affine", "portable", ()), ("fused_affine", "onednn", ("bias",)),
                               ("fused_affine", "onednn", ("rectifier",)),
                               ("fused_affine", "onednn", ("bias", "rectifier")), ("fused_affine", "portable", ())]


@pytest.mark.parametrize("with_bias", [True, False])
def test_a_product_adds_an_earlier_sum_in_its_own_pass(with_bias, records, rng):
    # A weight gradient x.T @ g summed into an earlier one: the product plus the addend, one
    # rounded float32 sum per element, so the same bits as NumPy's add after oneDNN's bare product;
    # one call that took the addend, and the addend left as it was.
    compiled.onednn_switch.set(True)
    g = rng.standard_normal((256, 384)).astype(np.float32)
    x = rng.standard_normal((256, 320)).astype(np.float32)
    earlier = rng.standard_normal((384, 320)).astype(np.float32)
    kept = earlier.copy()
    bias = rng.standard_normal(320).astype(np.float32) if with_bias else None
    with_ = ("bias",) if with_bias else ()
    bare = gpgan.kernels.fused_affine(g.T, x, bias)
    assert _kinds(records) == [("fused_affine", "onednn", with_)]
    total = gpgan.kernels.fused_affine(g.T, x, bias, addend=earlier)
    assert _kinds(records[1:]) == [("fused_affine", "onednn", with_ + ("addend",))]
    assert total.dtype == np.float32 and total.flags.c_contiguous
    np.testing.assert_array_equal(total, earlier + bare)
    np.testing.assert_array_equal(earlier, kept)
    # With a rectifier too: the addend comes after it (the second post-op).
    rectified = gpgan.kernels.fused_affine(g.T, x, bias, 0.0, addend=earlier)
    np.testing.assert_array_equal(rectified, earlier + np.maximum(bare, 0))
    for wrong in [earlier[:, :-1], earlier.astype(np.float64), np.asfortranarray(earlier)]:
        assert gpgan.kernels.fused_affine(g.T, x, bias, addend=wrong) is None
    assert _kinds(records[2:]) == [("fused_affine", "onednn", with_ + ("rectifier", "addend"))] \
        + [("fused_affine", "portable", ())] * 3


def test_fused_products_leave_what_onednn_does_not_take_to_the_caller(records, rng):
    compiled.onednn_switch.set(True)
    a = rng.standard_normal((96, 200)).astype(np.float32)
    b = rng.standard_normal((200, 300)).astype(np.float32)
    bias = np.ones(300, np.float32)
    for args in [(a[:8, :8], b[:8, :8], None, 0.0),       # below MIN_PRODUCT_MACS
                 (a.astype(np.float64), b.astype(np.float64), None, None),
                 (a, b, bias.astype(np.float64), None),  # a float64 bias
                 (a, b, bias[:299], None),                 # a bias of the wrong length
                 (a, b, np.ones(600, np.float32)[::2], None)]:  # a strided bias
        assert gpgan.kernels.fused_affine(*args) is None
    compiled.onednn_switch.set(False)
    assert gpgan.kernels.fused_affine(a, b, bias, 0.0) is None
    assert _kinds(records) == [("fused_affine", "portable", ())] * 6


@pytest.mark.parametrize("slope", [0.0, 0.2])
def test_linear_with_a_rectifier_agrees_with_its_parts_on_onednn(slope, records, rng):
    # F.linear(..., negative_slope) (one node, oneDNN's fused pass) against F.linear then the
    # activation's own node: values, first and second derivatives (values_and_grads).
    x = rng.standard_normal((128, 256)).astype(np.float32)
    w = (rng.standard_normal((256, 256)) / 16).astype(np.float32)
    b = rng.standard_normal(256).astype(np.float32) / 10

    def apart(x, w, b):
        y = F.linear(x, w, b)
        return F.relu(y) if slope == 0 else F.leaky_relu(y, slope)

    compiled.onednn_switch.set(True)
    with record_dispatch() as apart_records:
        separate = _values_and_grads(apart, [x, w, b])
    with record_dispatch() as fused_records:
        fused = _values_and_grads(lambda x, w, b: F.linear(x, w, b, negative_slope=slope), [x, w, b])
    assert _on_onednn(apart_records) and not [r for r in apart_records if "rectifier" in r.fused]
    # The fused forward (with its bias) ran on oneDNN.
    assert ("fused_affine", "onednn", ("bias", "rectifier")) in _kinds(fused_records)
    _assert_close(separate, fused)


@pytest.mark.parametrize("on", [True, False])
def test_a_layer_used_twice_sums_its_weight_gradient_in_the_product_with_the_same_bits(on, switch, rng,
                                                                                      monkeypatch):
    # A critic's linear layer on real and fake data: the second weight gradient's product adds
    # the first (oneDNN's post-op, or NumPy's product and the split add with oneDNN off) where the
    # engine would have added the two after; the gradients are the engine's own sums, bit for bit.
    compiled.onednn_switch.set(on)
    w = gpgan.Variable((rng.standard_normal((512, 512)) / 23).astype(np.float32), requires_grad=True)
    b = gpgan.Variable(np.zeros(512, np.float32), requires_grad=True)
    real, fake = (rng.standard_normal((256, 512)).astype(np.float32) for _ in range(2))

    def gradients():
        out = F.sum(F.linear(real, w, b, 0.0) ** 2) - F.sum(F.linear(fake, w, b, 0.0))
        return [g.data for g in gpgan.grad(out, [w, b])]

    with record_dispatch() as summing:
        summed = gradients()
    monkeypatch.delattr(F.linalg.Linear, "backward_accumulate")
    with record_dispatch() as apart:
        for got, want in zip(summed, gradients()):
            np.testing.assert_array_equal(got, want)
    # Two forwards (bias and rectifier fused), two input gradients' and two weight gradients'
    # products, the second of those adding the first where the engine sums them.
    with_addend = [r for r in summing if "addend" in r.fused]
    assert len(with_addend) == (1 if on else 0) and not [r for r in apart if "addend" in r.fused]
    assert len(_on_onednn(summing)) == (4 if on else 0) and len(_on_onednn(apart)) == (4 if on else 0)


@pytest.mark.skipif(not compiled.numba_switch._installed(), reason="needs Numba")
def test_compiled_product_calls_give_the_ctypes_calls_bits(records, rng):
    # With Numba on, a product's call runs from compiled code, with it off through ctypes (the
    # records say which): the same primitive on the same arrays, so the same bits, for every kind
    # of argument list (bias and addend each present or not, rectified or not, strided operands),
    # and for consecutive calls on new arrays (the compiled code re-points oneDNN at them), with
    # writable and read-only operands. The shapes and strides are this test's own: the compiled
    # call meets these products first.
    pytest.importorskip("numba")  # the compiled call is made once Numba is loaded
    compiled.onednn_switch.set(True)
    before = compiled.numba_switch.enabled()
    g = rng.standard_normal((256, 384)).astype(np.float32)
    x = np.pad(rng.standard_normal((256, 330)).astype(np.float32), ((0, 0), (0, 6)))[:, 3:323]  # sliced
    bias = rng.standard_normal(320).astype(np.float32)
    x.flags.writeable = bias.flags.writeable = False  # read-only operands (a loaded weight) as well
    earlier = rng.standard_normal((384, 320)).astype(np.float32)
    forms = [dict(), dict(bias=bias), dict(negative_slope=0.2), dict(addend=earlier),
             dict(bias=bias, addend=earlier), dict(bias=bias, negative_slope=0.0, addend=earlier)]
    parts = {"bias": "bias", "negative_slope": "rectifier", "addend": "addend"}
    paths = {}
    try:
        for numba_on in (True, False):
            compiled.numba_switch.set(numba_on)
            for form in forms:
                for scale in (1.0, -0.5):  # a second call, on new arrays
                    paths.setdefault(numba_on, []).append(gpgan.kernels.fused_affine((g * scale).T, x, **form))
            call = "compiled" if numba_on else "ctypes"
            assert records == [Dispatch("fused_affine", "onednn", tuple(parts[k] for k in form), call)
                               for form in forms for _ in range(2)]
            records.clear()
    finally:
        compiled.numba_switch.set(before)
    for compiled_result, ctypes_result in zip(paths[True], paths[False]):
        assert compiled_result is not None
        np.testing.assert_array_equal(compiled_result, ctypes_result)
    exact = (g.astype(np.float64).T @ x + bias) + earlier  # forms[4] at scale 1
    np.testing.assert_allclose(paths[True][8], exact, rtol=0, atol=1e-5 * np.abs(exact).max())


@pytest.mark.skipif(not compiled.numba_switch._installed(), reason="needs Numba")
def test_which_path_a_product_takes(records, monkeypatch, rng):
    # Numba on (and loaded): the compiled call; Numba off: ctypes. A compiled call that cannot be
    # made warns once and leaves products to ctypes.
    pytest.importorskip("numba")
    compiled.onednn_switch.set(True)
    before = compiled.numba_switch.enabled()
    a = rng.standard_normal((96, 200)).astype(np.float32)
    b = rng.standard_normal((200, 300)).astype(np.float32)
    try:
        compiled.numba_switch.set(True)
        want = gpgan.kernels.matmul(a, b)
        compiled.numba_switch.set(False)
        np.testing.assert_array_equal(gpgan.kernels.matmul(a, b), want)
        assert [r.call for r in records] == ["compiled", "ctypes"]
        compiled.numba_switch.set(True)
        # A failing compiler, injected where the call is compiled: no public setting makes Numba
        # fail (as test_user_faults injects a full disk where files are written). The process's
        # compiled call, made already, is forgotten for the test.
        monkeypatch.setattr(onednn, "_runners", {})

        def fails(lib):
            raise RuntimeError("no compiler today")

        monkeypatch.setattr(onednn, "_compile_product_runner", fails)
        with pytest.warns(RuntimeWarning, match="could not compile oneDNN's product call.*no compiler today"):
            np.testing.assert_array_equal(gpgan.kernels.matmul(a, b), want)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no second warning
            np.testing.assert_array_equal(gpgan.kernels.matmul(a, b), want)
        assert [r.call for r in records[2:]] == ["ctypes", "ctypes"]
    finally:
        compiled.numba_switch.set(before)


@pytest.mark.skipif(not compiled.numba_switch._installed(), reason="needs Numba")
def test_products_take_the_compiled_call_only_once_numba_is_loaded():
    # A run whose arrays never load Numba (the quickstart's) keeps the ctypes call: compiling the
    # other would cost it 0.6 s and Numba's LLVM for what it saves. Once Numba is loaded, the
    # next product takes the compiled call, with the same bits.
    code = (
        "import sys, numpy as np, gpgan\n"
        "from gpgan.kernels import record_dispatch\n"
        "rng = np.random.default_rng(0)\n"
        "a, b = (rng.standard_normal(s).astype(np.float32) for s in [(96, 200), (200, 300)])\n"
        "with record_dispatch() as records:\n"
        "    before = gpgan.kernels.matmul(a, b)\n"
        "    loaded = 'numba' in sys.modules\n"
        "    import numba\n"
        "    after = gpgan.kernels.matmul(a, b)\n"
        "print(loaded, [r.library + '/' + r.call for r in records], np.array_equal(before, after))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, GPGAN_ONEDNN="1", GPGAN_NUMBA="1",
                                                                 PYTHONPATH=ROOT),
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "['onednn/ctypes',", "'onednn/compiled']", "True"]
