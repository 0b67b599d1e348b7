"""R3GAN's networks: resampling against a direct NumPy formula, fix-up initialization, shapes,
parameter counts, and first- and second-order gradients against finite differences (float64)."""
import math
import os

import numpy as np
import pytest

import gpgan
import gpgan.functions as F
import gpgan.nn as nn
from gpgan.autograd import gradcheck, gradgradcheck
from gpgan.models import make_model
from gpgan.models.r3gan import ACTIVATION_GAIN, downsample, resampling_kernel, upsample

TINY = {"widths": [4, 2], "blocks": [1, 1], "group_size": 2}


def randomize(module, rng, scale=0.4):
    """Every parameter random (the fix-up zeros would hide the blocks' inner gradients), float64."""
    module.double()
    for p in module.parameters():
        p.data[...] = scale * rng.standard_normal(p.data.shape)
    return module


def test_resampling_kernel_is_1331_outer_normalized():
    k = resampling_kernel()
    np.testing.assert_allclose(k, np.outer([1, 3, 3, 1], [1, 3, 3, 1]) / 64.0, rtol=1e-15)


def _direct_upsample(x, k):
    """Zero-insertion up-sampling then correlation with the flipped 4 * k, padding 2 (the
    definition of a transposed convolution with stride 2, padding 1), by loops."""
    n, c, h, w = x.shape
    z = np.zeros((n, c, 2 * h, 2 * w))
    z[:, :, ::2, ::2] = x
    zp = np.pad(z, ((0, 0), (0, 0), (2, 1), (2, 1)))
    kf = 4 * k[::-1, ::-1]
    out = np.zeros((n, c, 2 * h, 2 * w))
    for i in range(2 * h):
        for j in range(2 * w):
            out[:, :, i, j] = (zp[:, :, i:i + 4, j:j + 4] * kf).sum(axis=(2, 3))
    return out


def _direct_downsample(x, k):
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, c, h // 2, w // 2))
    for i in range(h // 2):
        for j in range(w // 2):
            out[:, :, i, j] = (xp[:, :, 2 * i:2 * i + 4, 2 * j:2 * j + 4] * k).sum(axis=(2, 3))
    return out


def test_resampling_matches_direct_formula_and_keeps_constants_inside():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 4, 6))
    k = resampling_kernel()
    kv = k.reshape(1, 1, 4, 4)
    np.testing.assert_allclose(upsample(gpgan.Variable(x), 4 * kv).data, _direct_upsample(x, k), rtol=1e-12)
    np.testing.assert_allclose(downsample(gpgan.Variable(x), kv).data, _direct_downsample(x, k), rtol=1e-12)
    ones = np.ones((1, 1, 6, 6))  # a constant stays itself away from the zero-padded border
    assert np.allclose(upsample(gpgan.Variable(ones), 4 * kv).data[..., 2:-2, 2:-2], 1.0)
    assert np.allclose(downsample(gpgan.Variable(ones), kv).data[..., 1:-1, 1:-1], 1.0)


def test_resampling_first_and_second_order_gradients():
    rng = np.random.default_rng(1)
    kv = resampling_kernel().reshape(1, 1, 4, 4)
    x = rng.standard_normal((2, 2, 4, 4))
    for fn in (lambda v: upsample(v, 4 * kv) ** 2, lambda v: downsample(v, kv) ** 2):
        gradcheck(fn, [x])
        gradgradcheck(fn, [x])


def test_shapes_and_fixup_initialization():
    rng = np.random.default_rng(2)
    g = make_model("r3gan_generator", latent_dim=8, widths=[16, 8, 8], blocks=[2, 1, 1], group_size=4, rng=rng)
    d = make_model("r3gan_critic", widths=[16, 8, 8], blocks=[2, 1, 1], group_size=4, rng=rng)
    z = gpgan.Variable(rng.standard_normal((3, 8)).astype(np.float32))
    x = g(z)
    assert x.shape == (3, 3, 16, 16) and x.dtype == np.float32 and g.image_size == 16
    assert d(x).shape == (3, 1)
    total = 4  # blocks in the network: the fix-up gain's L
    gain = ACTIVATION_GAIN * total ** -0.25
    for name, p in list(g.named_parameters()) + list(d.named_parameters()):
        if ".conv3." in name:
            assert not p.data.any(), name  # the last conv of each block starts at zero
        elif ".conv1.weight" in name or ".conv2.weight" in name:
            fan_in = int(np.prod(p.shape[1:]))
            assert abs(p.data.std() * math.sqrt(fan_in) / gain - 1) < 0.15, name
        elif name.endswith(".bias"):
            assert not p.data.any(), name
    # grouped 3x3 convs: 16 channels... here group_size 4: expanded 32 -> 8 groups
    assert g.stages[0].blocks[0].conv2.groups == 8 and g.stages[1].blocks[0].conv2.groups == 4
    # with every block the identity, a block's output is its input
    blk = g.stages[0].blocks[0]
    h = gpgan.Variable(rng.standard_normal((2, 16, 4, 4)).astype(np.float32))
    np.testing.assert_array_equal(blk(h).data, h.data)
    assert d.basis.groups == 16 and d.basis.weight.shape == (16, 1, 4, 4)


def test_r3gan_cifar_parameter_counts():
    # R3GAN's CIFAR-10 preset: widths 768 x 4, 2 blocks per stage, cardinality 96 (group size 16),
    # noise 64. Counted by hand: per block 768*1536 + 1536 + 1536*16*9 + 1536 + 1536*768 = 2,580,480;
    # G: 8 blocks + basis 768*16 + modulation 64*768 + to_image 768*3; D: 8 blocks + from_image
    # 3*768 + depthwise 768*16 + linear 768.
    block = 768 * 1536 + 1536 + 1536 * 16 * 9 + 1536 + 1536 * 768
    g = make_model("r3gan_generator")
    d = make_model("r3gan_critic")
    assert sum(p.data.size for p in g.parameters()) == 8 * block + 768 * 16 + 64 * 768 + 768 * 3
    assert sum(p.data.size for p in d.parameters()) == 8 * block + 3 * 768 + 768 * 16 + 768


def test_option_errors_are_clear():
    with pytest.raises(ValueError, match="group_size 16 must divide every expanded width; width 12"):
        make_model("r3gan_critic", widths=[12], blocks=[1])
    with pytest.raises(ValueError, match="one entry per stage"):
        make_model("r3gan_generator", widths=[8, 8], blocks=[1])
    # --set model.generator_options.widths=16,16 gives a string: named, not read digit by digit.
    with pytest.raises(ValueError, match=r"widths: got '16,16' \(a string, not a list\); accepted: a list of whole "
                                         r"numbers >= 1, one per stage \(in --set: \[16,16,16,16\]\)"):
        make_model("r3gan_generator", widths="16,16", blocks=[1, 1])
    with pytest.raises(ValueError, match=r"blocks must be a list of whole numbers.*got \[1, 1.5\]"):
        make_model("r3gan_critic", widths=[16, 16], blocks=[1, 1.5])
    with pytest.raises(ValueError, match=r"expects 8x8 images"):
        make_model("r3gan_critic", **TINY)(gpgan.Variable(np.zeros((1, 3, 16, 16), np.float32)))


def _functional(module, names):
    return lambda x, *weights: nn.functional_call(module, dict(zip(names, weights)), x)


@pytest.mark.parametrize("role", ["generator", "critic"])
def test_first_and_second_order_gradients(role):
    """Output gradients with respect to the input and a weight of every kind (the grouped 3x3 and
    the 1x1 convolutions, the biases, the basis, the linear maps), and their second derivatives."""
    rng = np.random.default_rng(3)
    if role == "generator":
        net = randomize(make_model("r3gan_generator", latent_dim=3, **TINY), rng)
        x = rng.standard_normal((2, 3))
    else:
        net = randomize(make_model("r3gan_critic", **TINY), rng)
        x = rng.standard_normal((2, 3, 8, 8))
    params = dict(net.named_parameters())
    # the stage with a width change (the generator's second, the critic's first) and the ends
    stage = "stages.1." if role == "generator" else "stages.0."
    names = [n for n in params if n.startswith(stage) or n in ("basis", "modulation.weight", "to_image.weight",
                                                               "from_image.weight", "basis.weight",
                                                               "to_logit.weight")]
    assert any("conv2.weight" in n for n in names) and any("transition" in n for n in names)
    fn = _functional(net, names)
    inputs = [x] + [params[n].data.copy() for n in names]
    gradcheck(fn, inputs, atol=1e-6, rtol=1e-5)
    gradgradcheck(fn, inputs, atol=1e-6, rtol=1e-5)


def test_r1_of_the_critic_weight_gradient_matches_finite_differences():
    """The double backward a gradient penalty needs: d/dw of E||dD/dx||^2, numerically."""
    rng = np.random.default_rng(4)
    critic = randomize(make_model("r3gan_critic", **TINY), rng)
    params = dict(critic.named_parameters())
    names = list(params)
    real = rng.standard_normal((2, 3, 8, 8))

    def r1(*weights):
        with gpgan.enable_grad():
            x = gpgan.Variable(real, requires_grad=True)
            d = nn.functional_call(critic, dict(zip(names, weights)), x)
            (g,) = gpgan.grad(F.sum(d), x, create_graph=True)
            return F.mean(F.sum(g * g, axis=(1, 2, 3)))

    gradcheck(r1, [params[n].data.copy() for n in names], atol=1e-6, rtol=1e-5)


def test_the_engine_benchmark_s_r3gan_workload_is_the_cpu_config_s():
    # scripts/bench_engine.py writes configs/r3gan_cifar_cpu.yaml's networks out (the venv with
    # torch that runs it has no YAML reader); they must stay the config's. Its step (the critic's
    # RpGAN + R1 + R2 step, then the generator's) gives a gradient for every weight of both.
    import importlib.util

    from gpgan.train.config import CONFIG_SCHEMA, num_classes

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location("bench_engine", os.path.join(root, "scripts", "bench_engine.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    config = CONFIG_SCHEMA.load(os.path.join(root, "configs", "r3gan_cifar_cpu.yaml"))
    mc, want = config["model"], bench.R3GAN_CPU
    assert (mc["generator"], mc["critic"]) == ("r3gan_generator", "r3gan_critic")
    for options in (mc["critic_options"], {k: v for k, v in mc["generator_options"].items() if k != "latent_dim"}):
        assert {k: list(v) if isinstance(v, (list, tuple)) else v for k, v in options.items()} == want["options"]
    assert mc["generator_options"]["latent_dim"] == want["latent_dim"]
    assert (mc["embedding_dim"] or want["latent_dim"]) == want["embedding_dim"]
    assert num_classes(config) == want["classes"] and config["train"]["batch_size"] == want["batch"]
    assert (config["loss"], config["penalty"]["type"], config["penalty"]["weight"]) == ("rpgan", "r1r2",
                                                                                       want["penalty_weight"])
    work = bench.Workload("r3gan", np.float64, "cpu", batch=2)
    loss, grads = work.step()
    assert np.isfinite(loss) and len(grads) == len(work.params)
    assert all(g.shape == p.shape and np.isfinite(g).all() for g, p in zip(grads, work.params))
