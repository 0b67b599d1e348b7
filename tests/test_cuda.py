"""The CuPy path: same code, same numbers. Marked ``cuda``: skipped on machines without a GPU."""
import numpy as np
import pytest

import gpgan
import gpgan.functions as F
from gpgan.autograd import gradcheck, gradgradcheck

pytestmark = pytest.mark.cuda


def _pair(rng, *shape):
    a = rng.standard_normal(shape)
    return a, gpgan.Variable(a).to("cuda").data


CASES = {
    "mul_broadcast": (lambda a, b: a * b + a / (b * b + 1.0), [(3, 4), (4,)]),
    "matmul": (lambda a, b: a @ b, [(3, 4), (4, 5)]),
    "linear_leaky": (lambda x, w: F.leaky_relu(F.linear(x, w), 0.2), [(4, 3), (5, 3)]),
    "softplus_tanh": (lambda x: F.softplus(x) * F.tanh(x), [(6,)]),
    "conv2d": (lambda x, w: F.conv2d(x, w, stride=2, padding=1), [(2, 3, 6, 6), (4, 3, 3, 3)]),
    "conv_transpose2d": (lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1), [(2, 3, 4, 4), (3, 2, 4, 4)]),
    # x * x: both ops are linear, so without it the first gradient would not depend on x at all
    "avg_pool_upsample": (lambda x: F.upsample_nearest2d(F.avg_pool2d(x * x, 2)), [(2, 2, 4, 4)]),
    # This transposed convolution (16 output channels, the scatter form) returns a cropped
    # channels-last view with 2,048 values per channel: batch norm's statistics and the
    # per-channel sums then take the chunked CUDA sums (gpgan.kernels.reductions).
    "batch_norm_channels_last": (
        lambda x, w, g, b: F.batch_norm(F.conv_transpose2d(x, w, stride=2, padding=1), None, None, g, b,
                                        training=True),
        [(2, 16, 16, 16), (16, 16, 4, 4), (16,), (16,)]),
    "channel_sums": (lambda x, w: F.sum(F.conv_transpose2d(x, w, stride=2, padding=1) ** 2, axis=(0, 2, 3)),
                     [(2, 16, 16, 16), (16, 16, 4, 4)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_cuda_matches_cpu_first_and_second_order(name):
    fn, shapes = CASES[name]
    rng = np.random.default_rng(0)
    host = [rng.standard_normal(s) for s in shapes]
    results = {}
    for device in ("cpu", "cuda"):
        xs = [gpgan.Variable(gpgan.Variable(h).to(device).data, requires_grad=True) for h in host]
        y = fn(*xs)
        gy = gpgan.Variable(gpgan.Variable(np.cos(np.arange(y.size)).reshape(y.shape)).to(device).data)
        grads = gpgan.grad(y, xs, grad_outputs=gy, create_graph=True)
        second = gpgan.grad(sum(F.sum(g * g) for g in grads), xs, allow_unused=True)
        results[device] = [y.numpy()] + [g.numpy() for g in grads] + [
            np.zeros(1) if g is None else g.numpy() for g in second]
    for cpu, cuda in zip(results["cpu"], results["cuda"]):  # float64; sums may add in another order
        np.testing.assert_allclose(cuda, cpu, rtol=1e-10, atol=1e-10 * max(1.0, float(np.abs(cpu).max())))


def test_gradcheck_and_gradgradcheck_run_on_cuda():
    rng = np.random.default_rng(1)
    x = gpgan.Variable(rng.standard_normal((2, 2, 5, 5))).to("cuda").data
    w = gpgan.Variable(rng.standard_normal((3, 2, 3, 3))).to("cuda").data
    assert gradcheck(lambda x, w: F.conv2d(x, w, padding=1), [x, w])
    assert gradgradcheck(lambda x, w: F.conv2d(x, w, padding=1), [x, w])


def test_mixing_devices_raises_a_clear_error():
    a = gpgan.Variable(np.ones(3))
    b = gpgan.Variable(np.ones(3)).to("cuda")
    with pytest.raises(RuntimeError, match="different devices"):
        a + b


def test_cuda_r1_step_is_deterministic():
    def step():
        rng = np.random.default_rng(3)
        ws = [gpgan.Variable(rng.standard_normal(s).astype(np.float32) * 0.05).to("cuda") for s in
              [(64, 3, 4, 4), (128, 64, 4, 4), (1, 128 * 8 * 8)]]
        for w in ws:
            w.requires_grad = True
        x = gpgan.Variable(rng.standard_normal((16, 3, 32, 32)).astype(np.float32)).to("cuda")
        x.requires_grad = True

        def critic(v):
            h = F.leaky_relu(F.conv2d(v, ws[0], stride=2, padding=1), 0.2)
            h = F.leaky_relu(F.conv2d(h, ws[1], stride=2, padding=1), 0.2)
            return F.linear(F.flatten(h), ws[2])

        out = critic(x)
        g, = gpgan.grad(out.sum(), x, create_graph=True)
        loss = F.mean(F.softplus(-out)) + 5 * F.mean(F.sum(g * g, axis=(1, 2, 3)))
        loss.backward()
        return [w.grad.numpy() for w in ws]

    first, second = step(), step()
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
