"""gpgan.models: registry, shapes, parameter counts against the reference architectures, R1 steps."""
import inspect

import numpy as np
import pytest

import gpgan
import gpgan.functions as F
import gpgan.nn as nn
from gpgan.autograd import gradcheck
from gpgan.models import MODELS, make_model, model_options


def images(n, rng, dtype=np.float32):
    return gpgan.Variable(rng.uniform(-1, 1, (n, 3, 32, 32)).astype(dtype))


# -- registry -------------------------------------------------------------------------------------
def test_models_lists_the_eight_names():
    assert sorted(MODELS) == sorted(["dcgan_generator", "dcgan_critic", "resnet_generator", "resnet_critic",
                                     "mlp_generator", "mlp_critic", "r3gan_generator", "r3gan_critic"])


def test_make_model_errors_are_clear():
    with pytest.raises(ValueError, match="unknown model 'stylegan'; accepted: dcgan_generator, dcgan_critic"):
        make_model("stylegan")
    with pytest.raises(ValueError, match=r"^make_model\('dcgan_critic'\): depth: not an option of model 'dcgan_critic' "
                                         r"\(did you mean 'width'\?\); "
                                         r"accepted: width, norm, in_channels, image_size, negative_slope, init$"):
        make_model("dcgan_critic", depth=3)
    with pytest.raises(ValueError, match=r"norm: got 'batch' \(not one of the accepted values\); accepted: one of "
                                         r"'none', 'layer', 'spectral'$"):
        make_model("resnet_critic", norm="batch")  # no batch norm in a gradient-penalty critic
    with pytest.raises(ValueError, match=r"width: got 0 \(out of range\); accepted: an integer >= 1$"):
        make_model("mlp_critic", width=0)
    assert model_options("mlp_generator")["latent_dim"].default == 2


def test_declared_options_match_the_constructors_and_are_checked_there():
    """Each class declares every keyword option of its constructor (but rng) with the constructor's
    default; the constructor itself checks and converts them (the Python API, not only configs)."""
    for name, cls in MODELS.items():
        params = list(inspect.signature(cls.__init__).parameters.values())[1:]
        defaults = {p.name: p.default for p in params if p.name != "rng"}
        assert set(defaults) == set(cls.options), name
        for option, default in defaults.items():
            declared = cls.options[option].default
            assert (list(default) if isinstance(default, tuple) else default) == declared, (name, option)
    with pytest.raises(ValueError, match=r"^DCGANGenerator: 2 problems: \(1\) width: got -3 \(out of range\); "
                                         r"accepted: an integer >= 1 \(2\) init: got 'he' \(not one of the accepted "
                                         r"values\); accepted: one of 'dcgan', 'default'$"):
        MODELS["dcgan_generator"](width=-3, init="he")
    with pytest.raises(ValueError, match=r"^R3GANCritic: resample_taps: got \[1, 3\] \(has 2 entries, not 3\)"):
        MODELS["r3gan_critic"](widths=[16], blocks=[1], resample_taps=[1, 3])
    assert MODELS["mlp_generator"](width=8.0, depth="2").net[0].out_features == 8  # converted, as from YAML


def test_generators_expose_latent_dim():
    assert make_model("dcgan_generator").latent_dim == 128
    assert make_model("resnet_generator", width=8, latent_dim=64).latent_dim == 64
    assert make_model("mlp_generator", width=8).latent_dim == 2


# -- forward shapes ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name,options", [
    ("dcgan_generator", {}),
    ("dcgan_generator", {"norm": "none", "width": 16}),
    ("resnet_generator", {"width": 32}),
    ("resnet_generator", {"width": 16, "norm": "none"}),
])
def test_generator_shapes_and_range(name, options):
    rng = np.random.default_rng(0)
    g = make_model(name, rng=rng, **options)
    z = gpgan.Variable(rng.standard_normal((4, 128)).astype(np.float32))
    for mode in ("train", "eval"):
        getattr(g, mode)()
        x = g(z)
        assert x.shape == (4, 3, 32, 32) and x.dtype == np.float32
        assert np.all(np.abs(x.data) <= 1) and np.all(np.isfinite(x.data))


@pytest.mark.parametrize("name,options", [
    ("dcgan_critic", {}),
    ("dcgan_critic", {"norm": "layer", "width": 16}),
    ("dcgan_critic", {"norm": "spectral", "width": 16}),
    ("resnet_critic", {"width": 16}),
    ("resnet_critic", {"width": 16, "norm": "layer"}),
    ("resnet_critic", {"width": 16, "norm": "spectral", "pooling": "sum"}),
])
def test_critic_shapes(name, options):
    rng = np.random.default_rng(0)
    d = make_model(name, rng=rng, **options)
    y = d(images(3, rng))
    assert y.shape == (3, 1) and np.all(np.isfinite(y.data))


def test_mlp_shapes():
    rng = np.random.default_rng(0)
    g = make_model("mlp_generator", rng=rng, norm="batch", activation="leaky_relu")
    d = make_model("mlp_critic", rng=rng, norm="spectral", activation="elu")
    x = g(gpgan.Variable(rng.standard_normal((5, 2)).astype(np.float32)))
    assert x.shape == (5, 2) and d(x).shape == (5, 1)


# -- parameter counts, written out from the reference architectures -------------------------------
def conv(c_in, c_out, k):  # weight + bias
    return c_in * c_out * k * k + c_out


def linear(n_in, n_out):
    return n_in * n_out + n_out


def bn(c):  # scale + shift
    return 2 * c


def test_dcgan_parameter_counts():
    # Generator: z 128 -> Linear(128, 4*4*512) -> BN1d(8192) -> 3 ConvT k4 (512->256->128->64), BN2d each,
    # -> Conv k3 (64->3).
    generator = (linear(128, 4 * 4 * 512) + bn(8192)
                 + conv(512, 256, 4) + bn(256) + conv(256, 128, 4) + bn(128) + conv(128, 64, 4) + bn(64)
                 + conv(64, 3, 3))
    assert generator == (128 * 8192 + 8192) + 16384 + (2097152 + 256) + 512 + (524288 + 128) + 256 \
        + (131072 + 64) + 128 + (1728 + 3)
    assert nn.count_parameters(make_model("dcgan_generator")) == generator
    # Critic: Conv k4 3->64, 64->128, 128->256, Linear(256*4*4, 1).
    critic = conv(3, 64, 4) + conv(64, 128, 4) + conv(128, 256, 4) + linear(4096, 1)
    assert critic == (3072 + 64) + (131072 + 128) + (524288 + 256) + 4097
    assert nn.count_parameters(make_model("dcgan_critic")) == critic
    # Layer norm after convs 2 and 3: elementwise affine over (128, 8, 8) and (256, 4, 4).
    assert nn.count_parameters(make_model("dcgan_critic", norm="layer")) == critic + 2 * 128 * 64 + 2 * 256 * 16
    # Spectral norm keeps the count (weight_orig replaces weight); u, v are buffers.
    sn = make_model("dcgan_critic", norm="spectral")
    assert nn.count_parameters(sn) == critic
    assert sum(1 for k in sn.state_dict() if k.endswith("weight_u")) == 4


def test_resnet_parameter_counts_wgan_gp_cifar():
    ch = 128  # WGAN-GP's DIM_G = DIM_D = 128
    up_block = bn(ch) + conv(ch, ch, 3) + bn(ch) + conv(ch, ch, 3) + conv(ch, ch, 1)
    generator = linear(128, 4 * 4 * ch) + 3 * up_block + bn(ch) + conv(ch, 3, 3)
    assert generator == 264192 + 3 * (256 + 147584 + 256 + 147584 + 16512) + 256 + 3459
    assert nn.count_parameters(make_model("resnet_generator", width=ch)) == generator
    optimized = conv(3, ch, 3) + conv(ch, ch, 3) + conv(3, ch, 1)
    down = conv(ch, ch, 3) + conv(ch, ch, 3) + conv(ch, ch, 1)
    plain = conv(ch, ch, 3) + conv(ch, ch, 3)
    critic = optimized + down + 2 * plain + linear(ch, 1)
    assert critic == (3584 + 147584 + 512) + (147584 * 2 + 16512) + 2 * 2 * 147584 + 129
    assert nn.count_parameters(make_model("resnet_critic", width=ch)) == critic
    # SNGAN's generator: the same with ch = 256.
    ch = 256
    up_block = bn(ch) + conv(ch, ch, 3) + bn(ch) + conv(ch, ch, 3) + conv(ch, ch, 1)
    sngan = linear(128, 4 * 4 * ch) + 3 * up_block + bn(ch) + conv(ch, 3, 3)
    assert nn.count_parameters(make_model("resnet_generator", width=256)) == sngan


def test_mlp_parameter_counts_wgan_gp_toy():
    # 2 -> 512 -> 512 -> 512 -> 2 (generator) / -> 1 (critic), ReLU.
    assert nn.count_parameters(make_model("mlp_generator")) == linear(2, 512) + 2 * linear(512, 512) + linear(512, 2)
    assert nn.count_parameters(make_model("mlp_critic")) == linear(2, 512) + 2 * linear(512, 512) + linear(512, 1)
    assert nn.count_parameters(make_model("mlp_critic", width=16, depth=1)) == linear(2, 16) + linear(16, 1)


# -- initialization and determinism ---------------------------------------------------------------
def test_models_are_deterministic_given_a_seed():
    for name in MODELS:
        opts = {"widths": [16, 16], "blocks": [1, 1]} if name.startswith("r3gan") else {"width": 8}
        a = make_model(name, rng=np.random.default_rng(3), **opts).state_dict()
        b = make_model(name, rng=np.random.default_rng(3), **opts).state_dict()
        c = make_model(name, rng=np.random.default_rng(4), **opts).state_dict()
        assert list(a) == list(b) and all(np.array_equal(a[k], b[k]) for k in a), name
        assert any(not np.array_equal(a[k], c[k]) for k in a), name
    gpgan.manual_seed(5)
    a = make_model("mlp_critic", width=8).state_dict()
    gpgan.manual_seed(5)
    b = make_model("mlp_critic", width=8).state_dict()
    assert all(np.array_equal(a[k], b[k]) for k in a)


def test_dcgan_init_is_normal_002():
    g = make_model("dcgan_generator", rng=np.random.default_rng(0))
    w = g.main[0].weight.data
    assert abs(w.std() - 0.02) < 5e-4 and abs(w.mean()) < 5e-4
    assert not g.linear.bias.data.any()
    assert abs(g.main[1].weight.data.mean() - 1) < 0.01


# -- R1 steps through the modules ------------------------------------------------------------------
def r1_critic_loss(critic, real, fake, gamma):
    """Non-saturating (softplus) critic loss + gamma/2 * mean ||grad_x D(x_real)||^2."""
    d_real, d_fake = critic(real), critic(fake)
    loss = F.mean(F.softplus(-d_real)) + F.mean(F.softplus(d_fake))
    (g,) = gpgan.grad(F.sum(d_real), real, create_graph=True)
    return loss + gamma / 2 * F.mean(F.sum(g * g, axis=(1, 2, 3)))


@pytest.mark.parametrize("name,options", [
    ("dcgan_critic", {}),  # the benchmark critic, full width
    ("resnet_critic", {"width": 16}),
    ("resnet_critic", {"width": 16, "norm": "spectral"}),
])
def test_r1_step_batch_64_gives_finite_gradients_for_every_parameter(name, options):
    rng = np.random.default_rng(0)
    critic = make_model(name, rng=rng, **options)
    real = gpgan.Variable(images(64, rng).data, requires_grad=True)
    fake = images(64, rng)
    loss = r1_critic_loss(critic, real, fake, gamma=10.0)
    assert np.isfinite(loss.item())
    loss.backward()
    for pname, p in critic.named_parameters():
        assert p.grad is not None, pname
        assert p.grad.shape == p.shape and np.all(np.isfinite(p.grad.data)), pname


@pytest.mark.cuda
@pytest.mark.parametrize("name,options", [
    ("dcgan_critic", {}),
    ("resnet_critic", {}),  # full width (128), as in WGAN-GP's and SNGAN's CIFAR-10 critics
    ("resnet_critic", {"norm": "spectral"}),
])
def test_r1_step_batch_64_on_cuda_matches_cpu(name, options):
    """The same R1 critic step (batch 64) through the modules on CUDA and on the CPU, from the
    same state (spectral norm's power iteration updates its buffer u at every training forward):
    float64 agrees to rounding; float32 runs and gives finite gradients on CUDA."""
    rng = np.random.default_rng(0)
    critic = make_model(name, rng=rng, **options)
    real_host, fake_host = images(64, rng).data, images(64, rng).data

    def step(device, dtype):
        critic.load_state_dict(start)
        critic.to(device)
        for p in critic.parameters():
            p.grad = None
        real = gpgan.Variable(gpgan.Variable(real_host.astype(dtype)).to(device).data, requires_grad=True)
        fake = gpgan.Variable(fake_host.astype(dtype)).to(device)
        loss = r1_critic_loss(critic, real, fake, gamma=10.0)
        loss.backward()
        assert all(p.grad.device == device and p.grad.dtype == dtype for p in critic.parameters())
        out = [loss.item()] + [p.grad.numpy() for p in critic.parameters()]
        critic.to("cpu")
        return out

    initial = {k: v.copy() for k, v in critic.state_dict().items()}
    critic.double()
    start = {k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in initial.items()}
    cpu, cuda = step("cpu", np.float64), step("cuda", np.float64)
    np.testing.assert_allclose(cuda[0], cpu[0], rtol=1e-10)
    for (pname, _), g_cuda, g_cpu in zip(critic.named_parameters(), cuda[1:], cpu[1:]):
        np.testing.assert_allclose(g_cuda, g_cpu, rtol=1e-7, atol=1e-10 * np.abs(g_cpu).max(), err_msg=pname)
    critic.float()
    start = initial
    cuda32 = step("cuda", np.float32)
    assert np.isfinite(cuda32[0]) and all(np.all(np.isfinite(g)) for g in cuda32[1:])
    np.testing.assert_allclose(cuda32[0], cpu[0], rtol=1e-3)


@pytest.mark.parametrize("norm", ["none", "spectral", "layer"])
def test_r1_parameter_gradient_matches_finite_differences_tiny_resnet_critic(norm):
    # The double backward through the critic, checked numerically on a few weights (float64).
    rng = np.random.default_rng(1)
    critic = make_model("resnet_critic", width=2, image_size=8, norm=norm, init="default", rng=rng).double()
    critic.eval()  # freezes spectral norm's u, v between evaluations
    names = [n for n, _ in critic.named_parameters() if n.startswith("blocks.1.conv1") or n.startswith("linear")]
    params = dict(critic.named_parameters())
    real = rng.uniform(-1, 1, (2, 3, 8, 8))

    def r1(*weights):
        with gpgan.enable_grad():  # gradcheck evaluates under no_grad; the inner gradient needs a graph
            x = gpgan.Variable(real, requires_grad=True)
            d = nn.functional_call(critic, dict(zip(names, weights)), x)
            (g,) = gpgan.grad(F.sum(d), x, create_graph=True)
            return F.mean(F.sum(g * g, axis=(1, 2, 3)))

    assert len(names) == 4
    gradcheck(r1, [params[n].data.copy() for n in names], atol=1e-6, rtol=1e-5)
