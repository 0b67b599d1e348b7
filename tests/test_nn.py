"""gpgan.nn: Module machinery, layers, initializers, spectral normalization."""
import math

import numpy as np
import pytest

import gpgan
import gpgan.functions as F
import gpgan.nn as nn
from gpgan.autograd import gradcheck, gradgradcheck
from gpgan.nn import init


def f64(a):
    return np.asarray(a, dtype=np.float64)


def module_fn(module):
    """(x, *params) -> module(x) with the parameters taken from the arguments (for gradcheck)."""
    names = [n for n, _ in module.named_parameters()]

    def fn(x, *params):
        return nn.functional_call(module, dict(zip(names, params)), x)

    return fn, [p.data.copy() for p in module.parameters()]


# -- Module machinery -----------------------------------------------------------------------------
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 4, rng=np.random.default_rng(0))
        self.bn = nn.BatchNorm1d(4)
        self.scale = nn.Parameter(np.ones(1, dtype=np.float32))

    def forward(self, x):
        return self.bn(self.fc(x)) * self.scale


def test_parameter_is_a_leaf_variable_that_requires_grad():
    p = nn.Parameter(np.zeros((2, 3), dtype=np.float32))
    assert isinstance(p, gpgan.Variable) and p.requires_grad and p.is_leaf
    assert nn.Parameter(np.zeros(2), requires_grad=False).requires_grad is False
    v = gpgan.Variable(np.ones(3))
    assert nn.Parameter(v).data is v.data  # wraps the same array


def test_registration_names_and_traversal():
    model = nn.Sequential(Block(), nn.ReLU(), nn.Linear(4, 2))
    names = [n for n, _ in model.named_parameters()]
    # torch's order: a module's own entries first, then its children's, depth first.
    assert names == ["0.scale", "0.fc.weight", "0.fc.bias", "0.bn.weight", "0.bn.bias", "2.weight", "2.bias"]
    assert [n for n, _ in model.named_buffers()] == ["0.bn.running_mean", "0.bn.running_var",
                                                     "0.bn.num_batches_tracked"]
    assert list(model.state_dict()) == names[:5] + [n for n, _ in model.named_buffers()] + names[5:]
    assert [n for n, _ in model.named_modules()] == ["", "0", "0.fc", "0.bn", "1", "2"]
    assert nn.count_parameters(model) == 3 * 4 + 4 + 4 + 4 + 1 + 4 * 2 + 2
    assert len(model) == 3 and isinstance(model[2], nn.Linear) and len(model[:2]) == 2


def test_shared_parameter_is_listed_once():
    lin = nn.Linear(2, 2)
    model = nn.Sequential(lin, lin)
    assert len(list(model.parameters())) == 2


def test_assignments_are_checked():
    class NoInit(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(np.zeros(1))

    with pytest.raises(AttributeError, match=r"call super\(\)\.__init__\(\) first"):
        NoInit()
    lin = nn.Linear(2, 2)
    with pytest.raises(TypeError, match="parameter 'weight'"):
        lin.weight = np.zeros((2, 2))
    bn = nn.BatchNorm2d(3)
    with pytest.raises(TypeError, match="buffer 'running_mean'"):
        bn.running_mean = [0, 0, 0]
    lin.weight = nn.Parameter(np.ones((2, 2), dtype=np.float32))  # replacing with a Parameter is fine
    assert np.all(lin.weight.data == 1)


def test_module_list_registers_children():
    ml = nn.ModuleList([nn.Linear(2, 3), nn.Linear(3, 1)])
    ml.append(nn.Tanh())
    assert len(ml) == 3 and [n for n, _ in ml.named_parameters()] == ["0.weight", "0.bias", "1.weight", "1.bias"]


def test_sequential_and_module_list_share_indexing_slicing_and_extend():
    a, b, c = nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 1)
    seq, ml = nn.Sequential(a, b), nn.ModuleList([a, b])
    for box in (seq, ml):
        assert box.extend([c]) is box and len(box) == 3 and list(box) == [a, b, c]
        assert box[0] is a and box[-1] is c and box[-2] is b
        with pytest.raises(IndexError):
            box[3]
    # A slice shares the modules; Sequential keeps their names (as torch), ModuleList renumbers.
    tail = seq[1:]
    assert type(tail) is nn.Sequential and list(tail) == [b, c] and list(tail.state_dict()) == ["2.weight", "2.bias"]
    tail = ml[1:]
    assert type(tail) is nn.ModuleList and list(tail) == [b, c] and list(tail.state_dict()) == ["1.weight", "1.bias"]
    assert list(seq.state_dict()) == list(ml.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]


def test_train_eval_recurse_and_zero_grad():
    model = nn.Sequential(Block(), nn.Linear(4, 1))
    assert model.training and model[0].bn.training
    assert model.eval() is model
    assert not model[0].bn.training and not model[1].training
    model.train()
    assert all(m.training for m in model.modules())
    x = gpgan.Variable(np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32))
    model(x).sum().backward()
    assert all(p.grad is not None for p in model.parameters())
    model.zero_grad()
    assert all(p.grad is None for p in model.parameters())


def test_repr_is_a_torch_like_tree():
    model = nn.Sequential(nn.Conv2d(3, 8, 4, stride=2, padding=1), nn.LeakyReLU(0.2),
                          nn.Sequential(nn.Flatten(), nn.Linear(8, 1, bias=False)))
    expected = (
        "Sequential(\n"
        "  (0): Conv2d(3, 8, kernel_size=(4, 4), stride=(2, 2), padding=(1, 1))\n"
        "  (1): LeakyReLU(negative_slope=0.2)\n"
        "  (2): Sequential(\n"
        "    (0): Flatten(start_dim=1, end_dim=-1)\n"
        "    (1): Linear(in_features=8, out_features=1, bias=False)\n"
        "  )\n"
        ")"
    )
    assert repr(model) == expected
    assert repr(nn.BatchNorm2d(4)) == "BatchNorm2d(4, eps=1e-05, momentum=0.1, affine=True)"


def test_to_dtype_casts_in_place_and_keeps_parameter_objects():
    model = Block()
    params = list(model.parameters())
    model.double()
    assert [id(p) for p in model.parameters()] == [id(p) for p in params]
    assert all(p.dtype == np.float64 and p.requires_grad for p in params)
    assert model.bn.running_mean.dtype == np.float64
    assert model.bn.num_batches_tracked.dtype == np.int64  # integer buffers keep their dtype
    y = model(gpgan.Variable(np.ones((2, 3))))
    assert y.dtype == np.float64
    model.to("cpu", np.float32)
    assert all(p.dtype == np.float32 for p in params)
    with pytest.raises(ValueError, match="unknown device"):
        model.to("tpu")


# -- state_dict -----------------------------------------------------------------------------------
def _sn_bn_model(seed):
    rng = np.random.default_rng(seed)
    return nn.Sequential(nn.spectral_norm(nn.Conv2d(2, 3, 3, padding=1, rng=rng), rng=rng), nn.BatchNorm2d(3),
                         nn.ReLU(), nn.Flatten(), nn.spectral_norm(nn.Linear(3 * 4 * 4, 1, rng=rng), rng=rng))


def test_state_dict_round_trip_is_bitwise():
    a = _sn_bn_model(0)
    x = gpgan.Variable(np.random.default_rng(1).standard_normal((4, 2, 4, 4)).astype(np.float32))
    for _ in range(3):  # move running stats, power-iteration vectors and num_batches_tracked
        a(x)
    b = _sn_bn_model(7)
    assert not np.array_equal(a.state_dict()["0.weight_orig"], b.state_dict()["0.weight_orig"])
    b.load_state_dict({k: v.copy() for k, v in a.state_dict().items()})
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb)
    assert {"0.weight_orig", "0.weight_u", "0.weight_v", "1.running_mean", "1.num_batches_tracked"} <= set(sa)
    for k in sa:
        assert sa[k].dtype == sb[k].dtype and sa[k].tobytes() == sb[k].tobytes(), k
    a.eval(), b.eval()
    assert a(x).data.tobytes() == b(x).data.tobytes()


def test_load_state_dict_errors_name_the_keys_and_shapes():
    model = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3))
    good = {k: v.copy() for k, v in model.state_dict().items()}

    missing = dict(good)
    del missing["1.running_var"]
    with pytest.raises(KeyError, match="missing keys: '1.running_var'"):
        model.load_state_dict(missing)

    extra = dict(good, **{"2.weight": np.zeros(3)})
    with pytest.raises(KeyError, match="unexpected keys: '2.weight'"):
        model.load_state_dict(extra)

    wrong = dict(good, **{"0.weight": np.zeros((3, 5), dtype=np.float32)})
    before = model[0].weight.data.copy()
    with pytest.raises(ValueError, match=r"'0.weight': checkpoint shape \(3, 5\), model shape \(3, 2\)"):
        model.load_state_dict(wrong)
    assert np.array_equal(model[0].weight.data, before)  # a failed load writes nothing

    result = model.load_state_dict(missing, strict=False)
    assert result.missing_keys == ["1.running_var"] and result.unexpected_keys == []


def test_load_state_dict_is_in_place_and_casts():
    model = nn.Linear(2, 2)
    w = model.weight
    array = w.data
    model.load_state_dict({"weight": np.arange(4.0).reshape(2, 2), "bias": np.zeros(2)})
    assert model.weight is w and w.data is array and w.dtype == np.float32
    assert np.array_equal(w.data, np.arange(4.0).reshape(2, 2))


# -- layers -----------------------------------------------------------------------------------------
def test_layer_shapes_follow_torch():
    assert nn.Linear(5, 3).weight.shape == (3, 5)
    conv = nn.Conv2d(3, 8, 4, stride=2, padding=1)
    assert conv.weight.shape == (8, 3, 4, 4) and conv.bias.shape == (8,)
    convt = nn.ConvTranspose2d(8, 4, 4, stride=2, padding=1)
    assert convt.weight.shape == (8, 4, 4, 4) and convt.bias.shape == (4,)
    x = gpgan.Variable(np.zeros((2, 3, 16, 16), dtype=np.float32))
    y = conv(x)
    assert y.shape == (2, 8, 8, 8)  # (16 + 2 - 4) // 2 + 1
    assert convt(y).shape == (2, 4, 16, 16)  # (8 - 1) * 2 - 2 + 4
    assert nn.Flatten()(y).shape == (2, 512)
    assert nn.Conv2d(3, 2, 3, bias=False).bias is None


def test_default_initialization_matches_torch_bounds_and_seed():
    rng = np.random.default_rng(3)
    lin = nn.Linear(400, 300, rng=rng)
    bound = 1 / math.sqrt(400)  # kaiming_uniform(a=sqrt(5)): gain sqrt(1/3) * sqrt(3 / fan_in)
    w = lin.weight.data
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.99 * bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.01 * bound  # std of U(-b, b) is b / sqrt(3)
    assert np.abs(lin.bias.data).max() <= bound
    conv = nn.Conv2d(16, 32, 3)
    assert np.abs(conv.weight.data).max() <= 1 / math.sqrt(16 * 9)
    convt = nn.ConvTranspose2d(16, 8, 4)  # torch's fan_in of a (in, out, k, k) weight: out * k * k
    assert np.abs(convt.bias.data).max() <= 1 / math.sqrt(8 * 16)
    gpgan.manual_seed(11)
    a = nn.Linear(4, 4).weight.data.copy()
    gpgan.manual_seed(11)
    b = nn.Linear(4, 4).weight.data.copy()
    c = nn.Linear(4, 4, rng=np.random.default_rng(11)).weight.data
    assert np.array_equal(a, b) and np.array_equal(a, c)


def test_batchnorm_train_and_eval_modes():
    rng = np.random.default_rng(0)
    bn = nn.BatchNorm2d(3, momentum=0.1)
    bn.weight.data[...] = [1.0, 2.0, 0.5]
    bn.bias.data[...] = [0.0, -1.0, 1.0]
    x = (rng.standard_normal((6, 3, 4, 4)) * 3 + 2).astype(np.float64)
    bn.double()
    y = bn(gpgan.Variable(x)).data
    mean, var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
    ref = (x - mean[:, None, None]) / np.sqrt(var[:, None, None] + 1e-5)
    ref = ref * bn.weight.data[:, None, None] + bn.bias.data[:, None, None]
    np.testing.assert_allclose(y, ref, rtol=1e-10, atol=1e-10)
    n = 6 * 16
    np.testing.assert_allclose(bn.running_mean, 0.1 * mean, rtol=1e-12)
    np.testing.assert_allclose(bn.running_var, 0.9 + 0.1 * var * n / (n - 1), rtol=1e-12)
    assert int(bn.num_batches_tracked) == 1

    bn.eval()
    stats = (bn.running_mean.copy(), bn.running_var.copy())
    y_eval = bn(gpgan.Variable(x)).data
    ref_eval = (x - stats[0][:, None, None]) / np.sqrt(stats[1][:, None, None] + 1e-5)
    ref_eval = ref_eval * bn.weight.data[:, None, None] + bn.bias.data[:, None, None]
    np.testing.assert_allclose(y_eval, ref_eval, rtol=1e-10, atol=1e-10)
    assert np.array_equal(bn.running_mean, stats[0]) and int(bn.num_batches_tracked) == 1
    with pytest.raises(ValueError, match=r"BatchNorm2d\(3\).*got shape \(6, 3\)"):
        bn(gpgan.Variable(np.zeros((6, 3))))


def test_layernorm_against_numpy():
    rng = np.random.default_rng(0)
    ln = nn.LayerNorm((3, 4)).double()
    ln.weight.data[...] = rng.standard_normal((3, 4))
    ln.bias.data[...] = rng.standard_normal((3, 4))
    x = rng.standard_normal((5, 3, 4))
    mu = x.mean(axis=(1, 2), keepdims=True)
    var = x.var(axis=(1, 2), keepdims=True)
    ref = (x - mu) / np.sqrt(var + 1e-5) * ln.weight.data + ln.bias.data
    np.testing.assert_allclose(ln(gpgan.Variable(x)).data, ref, rtol=1e-10, atol=1e-12)


def test_activation_modules_match_formulas():
    x = np.linspace(-3, 3, 13)
    v = gpgan.Variable(x)
    np.testing.assert_allclose(nn.ReLU()(v).data, np.maximum(x, 0))
    np.testing.assert_allclose(nn.LeakyReLU(0.2)(v).data, np.where(x > 0, x, 0.2 * x))
    np.testing.assert_allclose(nn.Tanh()(v).data, np.tanh(x))
    np.testing.assert_allclose(nn.Sigmoid()(v).data, 1 / (1 + np.exp(-x)))
    np.testing.assert_allclose(nn.ELU(0.5)(v).data, np.where(x > 0, x, 0.5 * (np.exp(x) - 1)))
    np.testing.assert_allclose(nn.Softplus()(v).data, np.log1p(np.exp(x)))


@pytest.mark.parametrize("kwargs, message", [
    (dict(kernel_size=0), r"Conv2d: kernel_size must be an int >= 1 or a pair of them, got 0"),
    (dict(kernel_size=(3, 3, 3)), r"Conv2d: kernel_size must be an int >= 1 or a pair of them, got \(3, 3, 3\)"),
    (dict(kernel_size=3, stride=(1, 0)), r"Conv2d: stride must be an int >= 1 or a pair of them, got \(1, 0\)"),
    (dict(kernel_size=3, padding=-1), r"Conv2d: padding must be an int >= 0 or a pair of them, got -1"),
    (dict(kernel_size=3, groups=0), r"Conv2d: groups must be an int >= 1, got 0"),
    (dict(kernel_size=True), r"Conv2d: kernel_size must be an int >= 1 or a pair of them, got True"),
])
def test_conv_layer_refuses_bad_geometry_when_built(kwargs, message):
    with pytest.raises(ValueError, match=message):
        nn.Conv2d(4, 4, **kwargs)


def test_conv_transpose_layer_refuses_negative_output_padding():
    with pytest.raises(ValueError, match=r"ConvTranspose2d: output_padding must be an int >= 0"):
        nn.ConvTranspose2d(4, 4, 3, stride=2, output_padding=-1)


# -- gradients through composed modules -----------------------------------------------------------
def test_gradcheck_and_gradgradcheck_linear_leaky_relu_sequential():
    rng = np.random.default_rng(0)
    model = nn.Sequential(nn.Linear(3, 4, rng=rng), nn.LeakyReLU(0.2), nn.Linear(4, 2, rng=rng)).double()
    fn, params = module_fn(model)
    x = rng.standard_normal((3, 3))
    gradcheck(fn, [x] + params)
    gradgradcheck(fn, [x] + params)


def _unfused(model, x):
    """``model``'s Sequential run module by module (no Linear takes the activation after it)."""
    for m in model:
        x = m(x)
    return x


@pytest.mark.parametrize("act", [nn.ReLU(), nn.LeakyReLU(0.2)])
def test_sequential_runs_linear_and_rectifier_as_one_node_with_the_same_results(act):
    # Sequential hands a ReLU or LeakyReLU to the Linear before it (one node, the activation in
    # oneDNN's product where it runs): the same values and first- and second-order parameter
    # gradients as the modules one by one, in float64 (NumPy) and float32 (oneDNN when installed).
    rng = np.random.default_rng(3)
    for dtype, tol in ((np.float64, 1e-12), (np.float32, 2e-5)):
        model = nn.Sequential(nn.Linear(256, 256, rng=rng), act, nn.Linear(256, 1, rng=rng)).to("cpu", dtype)
        x = gpgan.Variable(rng.standard_normal((128, 256)).astype(dtype), requires_grad=True)
        params = list(model.parameters())
        results = []
        for run in (model, lambda x: _unfused(model, x)):
            y = run(x)
            g, = gpgan.grad(F.sum(y), [x], create_graph=True)  # R1's gradient, then its norm's
            grads = gpgan.grad(F.sum(y * y) + F.sum(g * g), params)
            results.append([y.data] + [p.data for p in grads])
        assert [type(n).__name__ for n in (y.creator, y.creator.inputs[0].creator)] == ["Linear", type(act).__name__]
        for fused, apart in zip(*results):
            scale = max(float(np.abs(apart).max()), 1e-30)
            np.testing.assert_allclose(fused, apart, rtol=0, atol=tol * scale)
    hidden = model(x).creator.inputs[0]
    assert type(hidden.creator).__name__ == "Linear" and hidden.creator.slope == act.rectifier_slope()


def test_sequential_keeps_an_activation_with_a_hook_or_its_own_forward_as_its_own_node():
    rng = np.random.default_rng(4)
    x = gpgan.Variable(rng.standard_normal((4, 3)))

    class MyLinear(nn.Linear):
        def forward(self, x):
            return super().forward(x) * 2.0

    hooked = nn.ReLU()
    hooked.register_forward_pre_hook(lambda module, inputs: None)
    cases = [nn.Sequential(nn.Linear(3, 4, rng=rng), hooked),
             nn.Sequential(MyLinear(3, 4, rng=rng), nn.ReLU()),
             nn.Sequential(nn.Linear(3, 4, rng=rng), nn.LeakyReLU(-0.5)),
             nn.Sequential(nn.Linear(3, 4, rng=rng), nn.Tanh())]
    for model in cases:
        y = model(x)
        assert type(y.creator).__name__ != "Linear"
        np.testing.assert_allclose(y.data, _unfused(model, x).data, rtol=1e-14)
    fused = nn.Sequential(nn.Linear(3, 4, rng=rng), nn.ReLU(), nn.Linear(4, 4, rng=rng), nn.LeakyReLU(0.1))
    y = fused(x)
    assert type(y.creator).__name__ == "Linear" and y.creator.slope == 0.1


def _small_conv_critic(rng, norm=None):
    layers = [nn.Conv2d(2, 3, 3, stride=2, padding=1, rng=rng), nn.LeakyReLU(0.2),
              nn.Conv2d(3, 2, 3, stride=1, padding=1, rng=rng), nn.LeakyReLU(0.2),
              nn.Flatten(), nn.Linear(2 * 3 * 3, 1, rng=rng)]
    model = nn.Sequential(*layers).double()
    if norm == "spectral":
        for m in model.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.spectral_norm(m, rng=rng)
    return model


def test_gradcheck_and_gradgradcheck_small_conv_critic():
    rng = np.random.default_rng(1)
    model = _small_conv_critic(rng)
    fn, params = module_fn(model)
    x = rng.standard_normal((2, 2, 5, 5))
    gradcheck(fn, [x] + params)
    gradgradcheck(fn, [x] + params[:2], atol=1e-4)  # input and first conv: the R1 path


def test_gradcheck_and_gradgradcheck_spectrally_normalized_critic():
    rng = np.random.default_rng(2)
    model = _small_conv_critic(rng, norm="spectral")
    x = gpgan.Variable(rng.standard_normal((2, 2, 5, 5)))
    for _ in range(3):
        model(x)  # a few power-iteration steps, then freeze u, v
    model.eval()
    u_before = model[0].weight_u.copy()
    fn, params = module_fn(model)
    assert [n for n, _ in model.named_parameters()][:2] == ["0.bias", "0.weight_orig"]  # torch's order
    gradcheck(fn, [x.data] + params)
    gradgradcheck(fn, [x.data] + params[:2], atol=1e-4)
    assert np.array_equal(model[0].weight_u, u_before)  # eval mode: no power iteration


# -- spectral normalization ------------------------------------------------------------------------
@pytest.mark.parametrize("make", [
    lambda rng: nn.Linear(7, 5, rng=rng),
    lambda rng: nn.Conv2d(3, 4, 3, rng=rng),
    lambda rng: nn.ConvTranspose2d(4, 3, 3, rng=rng),
])
def test_spectral_norm_sigma_converges_to_largest_singular_value(make):
    rng = np.random.default_rng(5)
    layer = nn.spectral_norm(make(rng).double(), rng=rng)
    w = layer.weight_orig.data
    matrix = (np.moveaxis(w, 1, 0) if isinstance(layer, nn.ConvTranspose2d) else w).reshape(
        w.shape[1] if isinstance(layer, nn.ConvTranspose2d) else w.shape[0], -1)
    sigma_true = np.linalg.svd(matrix, compute_uv=False)[0]
    x_shape = (2, 7) if isinstance(layer, nn.Linear) else (2, layer.in_channels, 5, 5)
    x = gpgan.Variable(rng.standard_normal(x_shape))
    for _ in range(50):
        layer(x)
    hook = next(iter(layer._forward_pre_hooks.values()))
    # The error shrinks like (s2 / s1)^(2k); 50 steps bring these random matrices well below 1e-4.
    assert abs(hook.sigma(layer) - sigma_true) < 1e-4 * sigma_true
    np.testing.assert_allclose(layer.weight.data, w / hook.sigma(layer), rtol=1e-12)
    normalized = (np.moveaxis(layer.weight.data, 1, 0) if isinstance(layer, nn.ConvTranspose2d)
                  else layer.weight.data).reshape(matrix.shape)
    assert abs(np.linalg.svd(normalized, compute_uv=False)[0] - 1) < 1e-4


def test_spectral_norm_gradient_treats_u_v_as_constants_and_survives_later_iterations():
    # d/dW sum(G * W / sigma), sigma = u^T W v: G / sigma - <G, W> u v^T / sigma^2.
    rng = np.random.default_rng(6)
    layer = nn.spectral_norm(nn.Linear(4, 3, rng=rng).double(), rng=rng)
    x = gpgan.Variable(rng.standard_normal((5, 4)))
    y = layer(x)  # one power-iteration step, then the graph
    u, v = layer.weight_u.copy(), layer.weight_v.copy()
    layer(x)  # another step changes the buffers in place; y's graph must keep the old u, v
    assert not np.array_equal(u, layer.weight_u)
    g_y = rng.standard_normal(y.shape)
    (gw,) = gpgan.grad(y, layer.weight_orig, grad_outputs=g_y)
    w = layer.weight_orig.data
    sigma = u @ w @ v
    G = g_y.T @ x.data  # gradient with respect to the normalized weight
    expected = G / sigma - np.sum(G * w) * np.outer(u, v) / sigma ** 2
    np.testing.assert_allclose(gw.data, expected, rtol=1e-10, atol=1e-12)


def test_spectral_norm_state_and_removal():
    rng = np.random.default_rng(7)
    layer = nn.spectral_norm(nn.Conv2d(2, 3, 3, rng=rng), rng=rng)
    assert list(layer.state_dict()) == ["bias", "weight_orig", "weight_u", "weight_v"]
    assert layer.weight_u.shape == (3,) and layer.weight_v.shape == (18,)
    layer.eval()
    x = gpgan.Variable(rng.standard_normal((1, 2, 4, 4)).astype(np.float32))
    u = layer.weight_u.copy()
    y = layer(x).data
    assert np.array_equal(layer.weight_u, u)
    with pytest.raises(RuntimeError, match="already"):
        nn.spectral_norm(layer)
    nn.remove_spectral_norm(layer)
    assert list(layer.state_dict()) == ["bias", "weight"]
    np.testing.assert_allclose(layer(x).data, y, rtol=1e-6)


class _Doubled(nn.ForwardPreHook):
    """Derives ``module.doubled = 2 * weight`` before each forward and on refresh."""

    derived_attributes = ("doubled",)

    def __init__(self):
        self.refreshes = 0

    def __call__(self, module, inputs):
        module.doubled = module.weight.data * 2

    def refresh(self, module):
        self.refreshes += 1
        module.doubled = module.weight.data * 2


def test_forward_pre_hook_contract_refresh_and_derived_attributes():
    import copy
    import pickle

    layer = nn.Linear(2, 2, dtype=np.float32)
    hook = _Doubled()
    layer.register_forward_pre_hook(hook)
    layer(gpgan.Variable(np.ones((1, 2), np.float32)))
    np.testing.assert_array_equal(layer.doubled, 2 * layer.weight.data)
    # A state load and a dtype cast refresh the derived attribute.
    state = {k: v + 1 for k, v in layer.state_dict().items()}
    layer.load_state_dict(state)
    np.testing.assert_array_equal(layer.doubled, 2 * state["weight"])
    layer.double()
    assert layer.doubled.dtype == np.float64 and hook.refreshes == 2
    # Derived attributes are not state: left out when pickling, recomputed when unpickling/copying.
    assert "doubled" not in layer.__getstate__()
    for clone in (pickle.loads(pickle.dumps(layer)), copy.deepcopy(layer)):
        np.testing.assert_array_equal(clone.doubled, 2 * clone.weight.data)


def test_plain_function_hooks_still_run_and_bad_hooks_are_refused():
    calls = []
    layer = nn.Linear(2, 1)
    key = layer.register_forward_pre_hook(lambda module, args: calls.append((module, args[0].shape)))
    layer(gpgan.Variable(np.ones((3, 2), np.float32)))
    assert calls == [(layer, (3, 2))]
    layer.load_state_dict(layer.state_dict())  # a wrapped function has nothing to refresh
    layer.to(np.float64)
    layer.remove_forward_pre_hook(key)
    layer(gpgan.Variable(np.ones((3, 2))))
    assert len(calls) == 1
    with pytest.raises(TypeError, match="register_forward_pre_hook: expected a ForwardPreHook or a callable"):
        layer.register_forward_pre_hook("not a hook")


# -- initializers ----------------------------------------------------------------------------------
def test_calculate_gain_values():
    assert init.calculate_gain("linear") == 1 and init.calculate_gain("conv2d") == 1
    assert init.calculate_gain("relu") == math.sqrt(2)
    assert init.calculate_gain("tanh") == 5 / 3
    assert init.calculate_gain("leaky_relu", 0.2) == math.sqrt(2 / 1.04)
    assert init.calculate_gain("leaky_relu", math.sqrt(5)) == math.sqrt(1 / 3)
    with pytest.raises(ValueError, match="unsupported nonlinearity 'swish'"):
        init.calculate_gain("swish")


def test_initializers_are_in_place_seeded_and_follow_their_formulas():
    p = nn.Parameter(np.zeros((200, 100, 3, 3), dtype=np.float32))
    array = p.data
    fan_in, fan_out = 100 * 9, 200 * 9
    assert init.normal_(p, rng=np.random.default_rng(0)) is p and p.data is array
    assert abs(p.data.std() - 0.02) < 2e-4  # DCGAN default std
    init.xavier_uniform_(p, gain=2.0, rng=np.random.default_rng(0))
    bound = 2.0 * math.sqrt(6 / (fan_in + fan_out))
    assert np.abs(p.data).max() <= bound * (1 + 1e-6) and abs(p.data.std() - bound / math.sqrt(3)) < 0.01 * bound
    init.xavier_normal_(p, rng=np.random.default_rng(0))
    assert abs(p.data.std() - math.sqrt(2 / (fan_in + fan_out))) < 0.01 * math.sqrt(2 / (fan_in + fan_out))
    init.kaiming_normal_(p, mode="fan_out", nonlinearity="relu", rng=np.random.default_rng(0))
    assert abs(p.data.std() - math.sqrt(2 / fan_out)) < 0.01 * math.sqrt(2 / fan_out)
    init.kaiming_uniform_(p, a=0.2, rng=np.random.default_rng(0))
    b = math.sqrt(2 / 1.04) * math.sqrt(3 / fan_in)
    assert np.abs(p.data).max() <= b * (1 + 1e-6) and np.abs(p.data).max() > 0.99 * b
    init.uniform_(p, -3, -2, rng=np.random.default_rng(0))
    assert p.data.min() >= -3 and p.data.max() <= -2
    init.constant_(p, 0.5)
    assert np.all(p.data == 0.5)
    init.zeros_(p)
    assert not p.data.any()
    init.ones_(p)
    assert np.all(p.data == 1)
    with pytest.raises(ValueError, match="mode 'fan_avg'"):
        init.kaiming_uniform_(p, mode="fan_avg")
    gpgan.manual_seed(4)
    a = init.kaiming_uniform_(np.zeros((3, 4))).copy()
    gpgan.manual_seed(4)
    assert np.array_equal(a, init.kaiming_uniform_(np.zeros((3, 4))))
    v = gpgan.Variable(np.zeros((2, 2)))
    init.ones_(v)
    assert np.all(v.data == 1)


@pytest.mark.parametrize("shape", [(6, 4), (4, 6), (5, 2, 3, 3)])
def test_orthogonal(shape):
    w = np.zeros(shape)
    init.orthogonal_(w, gain=1.5, rng=np.random.default_rng(0))
    m = w.reshape(shape[0], -1)
    small = min(m.shape)
    gram = m @ m.T if m.shape[0] == small else m.T @ m
    np.testing.assert_allclose(gram, 1.5 ** 2 * np.eye(small), atol=1e-12)


@pytest.mark.cuda
def test_module_to_cuda_moves_parameters_and_buffers_in_place():
    model = _sn_bn_model(0)
    params = list(model.parameters())
    x = np.random.default_rng(0).standard_normal((4, 2, 4, 4)).astype(np.float32)
    model.eval()
    y_cpu = model(gpgan.Variable(x)).data
    model.to("cuda")
    assert [id(p) for p in model.parameters()] == [id(p) for p in params]
    assert all(p.device == "cuda" for p in params)
    assert all(gpgan.backend.device_of(b) == "cuda" for b in model.buffers())
    y = model(gpgan.Variable(x).to("cuda"))
    np.testing.assert_allclose(y.numpy(), y_cpu, rtol=1e-5, atol=1e-5 * np.abs(y_cpu).max())  # float32 sums
    model.train()
    model(gpgan.Variable(x).to("cuda")).sum().backward()
    assert all(p.grad.device == "cuda" for p in params)
    model.to("cpu")
    assert all(p.device == "cpu" for p in params)


def test_deepcopy_and_pickle_give_independent_modules():
    import copy
    import pickle

    rng = np.random.default_rng(8)
    model = _sn_bn_model(3)
    x = gpgan.Variable(rng.standard_normal((4, 2, 4, 4)).astype(np.float32))
    model(x)  # leaves a graph-carrying normalized weight on the spectral-norm layers
    clone = copy.deepcopy(model)
    restored = pickle.loads(pickle.dumps(model))
    for other in (clone, restored):
        assert all(a is not b and np.array_equal(a.data, b.data)
                   for a, b in zip(model.parameters(), other.parameters()))
        assert all(isinstance(p, nn.Parameter) and p.requires_grad for p in other.parameters())
    clone(x).sum().backward()  # gradients land in the copy only
    assert all(p.grad is not None for p in clone.parameters())
    assert all(p.grad is None for p in model.parameters())
    model.eval(), restored.eval()
    assert np.array_equal(model(x).data, restored(x).data)
