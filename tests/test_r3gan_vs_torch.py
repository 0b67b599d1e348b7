"""Optional: gpgan's R3GAN networks against an independent PyTorch implementation of the same
definition (gpgan/models/r3gan.py's docstring; scripts/torch_r3gan.py, which the engine benchmark's
``r3gan`` workload runs too), with the same weights, in float64: the outputs, the input
gradients, and the weight gradient of R1 (a double backward), also for the critic step's whole
RpGAN + R1 + R2 loss, and the class-conditional wrappers.

Skipped without torch (never a dependency of gpgan). The comparison venv has torch but no pytest,
so the file also runs as a script: ``PYTHONPATH=$PWD /work/compare-venv/bin/python
tests/test_r3gan_vs_torch.py``.
"""

import importlib.util
import os

import numpy as np

try:
    import pytest
    torch = pytest.importorskip("torch")
except ImportError:  # run as a script in an environment without pytest
    import torch

import gpgan
import gpgan.functions as F
from gpgan.losses import make_loss, make_penalty
from gpgan.models import make_conditional, make_model

torch.set_default_dtype(torch.float64)
NNF = torch.nn.functional
OPTIONS = {"widths": [8, 4], "blocks": [1, 2], "group_size": 4}


# --- the definition, written again in PyTorch (scripts/torch_r3gan.py, shared with the benchmark) ---
_spec = importlib.util.spec_from_file_location(
    "torch_r3gan", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "torch_r3gan.py"))
torch_r3gan = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(torch_r3gan)


def t_generator(z, p, widths, blocks, group_size):
    return torch_r3gan.generator(torch, z, p, widths, blocks, group_size)


def t_critic(x, p, widths, blocks, group_size):
    return torch_r3gan.critic(torch, x, p, widths, blocks, group_size)


# --- helpers -------------------------------------------------------------------------------------
def _pair(name, seed, classes=None):
    """The gpgan model (float64, every weight random so no fix-up zero hides a path; with
    ``classes``, class-conditional) and its weights as torch tensors that require grad."""
    rng = np.random.default_rng(seed)
    options = dict(OPTIONS, **({"latent_dim": 5} if "generator" in name else {}), rng=rng)
    if classes is None:
        model = make_model(name, **options).double()
    else:
        model = make_conditional(name.split("_")[1], name, classes, **options).double()
    for p in model.parameters():
        p.data[...] = 0.3 * rng.standard_normal(p.data.shape)
    weights = {n: torch.tensor(p.data, requires_grad=True) for n, p in model.named_parameters()}
    return model, weights


def _close(a, b, what):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-10, atol=1e-12, err_msg=what)


# --- tests ---------------------------------------------------------------------------------------
def test_generator_output_and_gradients_match_torch():
    g, w = _pair("r3gan_generator", 0)
    z = np.random.default_rng(1).standard_normal((3, 5))
    zt = torch.tensor(z, requires_grad=True)
    out_t = t_generator(zt, w, OPTIONS["widths"], OPTIONS["blocks"], OPTIONS["group_size"])
    zv = gpgan.Variable(z, requires_grad=True)
    out = g(zv)
    _close(out.data, out_t.detach().numpy(), "generator output")
    gy = np.random.default_rng(2).standard_normal(out.shape)
    names = [n for n, _ in g.named_parameters()]
    grads = gpgan.grad(out, [zv] + [dict(g.named_parameters())[n] for n in names], grad_outputs=gy)
    grads_t = torch.autograd.grad(out_t, [zt] + [w[n] for n in names], grad_outputs=torch.tensor(gy))
    for name, a, b in zip(["z"] + names, grads, grads_t):
        _close(a.data, b.numpy(), f"generator gradient of {name}")


def test_critic_output_input_gradient_and_r1_weight_gradient_match_torch():
    d, w = _pair("r3gan_critic", 3)
    x = np.random.default_rng(4).standard_normal((3, 3, 8, 8))
    xt = torch.tensor(x, requires_grad=True)
    out_t = t_critic(xt, w, OPTIONS["widths"], OPTIONS["blocks"], OPTIONS["group_size"])
    xv = gpgan.Variable(x, requires_grad=True)
    out = d(xv)
    _close(out.data, out_t.detach().numpy(), "critic output")
    (g_t,) = torch.autograd.grad(out_t.sum(), xt, create_graph=True)
    (g,) = gpgan.grad(F.sum(out), xv, create_graph=True)
    _close(g.data, g_t.detach().numpy(), "critic input gradient")
    r1_t = g_t.square().sum(dim=(1, 2, 3)).mean()
    r1 = F.mean(F.sum(g * g, axis=(1, 2, 3)))
    names = [n for n, _ in d.named_parameters()]
    grads_t = torch.autograd.grad(r1_t, [w[n] for n in names], allow_unused=True)
    grads = gpgan.grad(r1, [dict(d.named_parameters())[n] for n in names], allow_unused=True)
    for name, a, b in zip(names, grads, grads_t):
        _close(0 if a is None else a.data, 0 if b is None else b.numpy(), f"R1 weight gradient of {name}")


def test_rpgan_r1r2_critic_loss_and_weight_gradient_match_torch():
    """The critic step's objective, softplus(-(D(x_r) - D(x_f))) + gamma / 2 (R1 + R2), as R3GAN
    writes it, against gpgan's loss and penalty with the shared forwards."""
    d, w = _pair("r3gan_critic", 5)
    rng = np.random.default_rng(6)
    real, fake, gamma = rng.standard_normal((4, 3, 8, 8)), rng.standard_normal((4, 3, 8, 8)), 0.7
    rt, ft = torch.tensor(real, requires_grad=True), torch.tensor(fake, requires_grad=True)
    lr = t_critic(rt, w, OPTIONS["widths"], OPTIONS["blocks"], OPTIONS["group_size"])
    lf = t_critic(ft, w, OPTIONS["widths"], OPTIONS["blocks"], OPTIONS["group_size"])
    (gr,) = torch.autograd.grad(lr.sum(), rt, create_graph=True)
    (gf,) = torch.autograd.grad(lf.sum(), ft, create_graph=True)
    total_t = (NNF.softplus(-(lr - lf)).view(-1)
               + gamma / 2 * (gr.square().sum((1, 2, 3)) + gf.square().sum((1, 2, 3)))).mean()
    rv, fv = gpgan.Variable(real, requires_grad=True), gpgan.Variable(fake, requires_grad=True)
    dr, df = d(rv), d(fv)
    pen, _ = make_penalty("r1r2", weight=gamma)(d, rv, fv, forward=((rv, dr), (fv, df)))
    total = make_loss("rpgan").critic_loss(dr, df) + pen
    _close(total.data, total_t.detach().numpy(), "critic objective")
    names = [n for n, _ in d.named_parameters()]
    grads_t = torch.autograd.grad(total_t, [w[n] for n in names])
    grads = gpgan.grad(total, [dict(d.named_parameters())[n] for n in names])
    for name, a, b in zip(names, grads, grads_t):
        _close(a.data, b.numpy(), f"objective's weight gradient of {name}")


def test_conditional_generator_and_projection_critic_match_torch():
    classes = 3
    g, wg = _pair("r3gan_generator", 7, classes)
    d, wd = _pair("r3gan_critic", 8, classes)
    rng = np.random.default_rng(9)
    z, y = rng.standard_normal((4, 5)), np.array([2, 0, 1, 2])
    onehot = torch.nn.functional.one_hot(torch.tensor(y), classes).double()
    args = OPTIONS["widths"], OPTIONS["blocks"], OPTIONS["group_size"]
    images_t = torch_r3gan.conditional_generator(torch, torch.tensor(z), onehot, wg, *args)
    images = g(gpgan.Variable(z), y)
    _close(images.data, images_t.detach().numpy(), "conditional generator output")
    logits_t = torch_r3gan.projection_critic(torch, images_t, onehot, wd, *args)
    logits = d(images, y)
    _close(logits.data, logits_t.detach().numpy(), "projection critic output")
    names = [("g", n) for n, _ in g.named_parameters()] + [("d", n) for n, _ in d.named_parameters()]
    params = {"g": dict(g.named_parameters()), "d": dict(d.named_parameters())}
    grads_t = torch.autograd.grad(logits_t.square().sum(), [{"g": wg, "d": wd}[k][n] for k, n in names])
    grads = gpgan.grad(F.sum(logits * logits), [params[k][n] for k, n in names])
    for (k, name), a, b in zip(names, grads, grads_t):
        _close(a.data, b.numpy(), f"gradient of {k}:{name}")


if __name__ == "__main__":
    for test in [v for k, v in sorted(globals().items()) if k.startswith("test_")]:
        test()
        print("passed", test.__name__)
    print(f"torch {torch.__version__}: all passed; float64, rtol 1e-10")
