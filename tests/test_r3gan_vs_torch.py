"""Optional: gpgan's R3GAN networks against an independent PyTorch implementation of the same
definition (gpgan/models/r3gan.py's docstring), with the same weights, in float64: the outputs,
the input gradients, and the weight gradient of R1 (a double backward), also for the critic
step's whole RpGAN + R1 + R2 loss.

Skipped without torch (never a dependency of gpgan). The comparison venv has torch but no pytest,
so the file also runs as a script: ``PYTHONPATH=$PWD /work/compare-venv/bin/python
tests/test_r3gan_vs_torch.py``.
"""

import numpy as np

try:
    import pytest
    torch = pytest.importorskip("torch")
except ImportError:  # run as a script in an environment without pytest
    import torch

import gpgan
import gpgan.functions as F
from gpgan.losses import make_loss, make_penalty
from gpgan.models import make_model

torch.set_default_dtype(torch.float64)
NNF = torch.nn.functional
OPTIONS = {"widths": [8, 4], "blocks": [1, 2], "group_size": 4}


# --- the definition, written again in PyTorch ---------------------------------------------------
def t_kernel():
    k = torch.tensor([1.0, 3.0, 3.0, 1.0])
    k = torch.outer(k, k)
    return (k / k.sum()).view(1, 1, 4, 4)


def t_up(x):
    n, c, h, w = x.shape
    return NNF.conv_transpose2d(x.reshape(n * c, 1, h, w), 4 * t_kernel(), stride=2, padding=1).view(n, c, 2 * h, 2 * w)


def t_down(x):
    n, c, h, w = x.shape
    return NNF.conv2d(x.reshape(n * c, 1, h, w), t_kernel(), stride=2, padding=1).view(n, c, h // 2, w // 2)


def t_block(x, p, prefix, group_size):
    """x + W3 * lrelu(W2 *_groups lrelu(W1 * x + b1) + b2), slope 0.2."""
    w1, b1 = p[prefix + "conv1.weight"], p[prefix + "conv1.bias"]
    w2, b2 = p[prefix + "conv2.weight"], p[prefix + "conv2.bias"]
    w3 = p[prefix + "conv3.weight"]
    y = NNF.leaky_relu(NNF.conv2d(x, w1) + b1.view(1, -1, 1, 1), 0.2)
    y = NNF.leaky_relu(NNF.conv2d(y, w2, padding=1, groups=w2.shape[0] // group_size) + b2.view(1, -1, 1, 1), 0.2)
    return x + NNF.conv2d(y, w3)


def t_generator(z, p, widths, blocks, group_size):
    x = p["basis"].unsqueeze(0) * (z @ p["modulation.weight"].T).view(z.shape[0], -1, 1, 1)
    for i in range(len(widths)):
        if i > 0:
            if f"stages.{i}.transition.weight" in p:
                x = NNF.conv2d(x, p[f"stages.{i}.transition.weight"])
            x = t_up(x)
        for b in range(blocks[i]):
            x = t_block(x, p, f"stages.{i}.blocks.{b}.", group_size)
    return NNF.conv2d(x, p["to_image.weight"])


def t_critic(x, p, widths, blocks, group_size):
    x = NNF.conv2d(x, p["from_image.weight"])
    for k, i in enumerate(reversed(range(len(widths)))):
        for b in range(blocks[i]):
            x = t_block(x, p, f"stages.{k}.blocks.{b}.", group_size)
        if i > 0:
            x = t_down(x)
            if f"stages.{k}.transition.weight" in p:
                x = NNF.conv2d(x, p[f"stages.{k}.transition.weight"])
    x = NNF.conv2d(x, p["basis.weight"], groups=widths[0]).view(x.shape[0], -1)
    return x @ p["to_logit.weight"].T


# --- helpers -------------------------------------------------------------------------------------
def _pair(name, seed):
    """The gpgan model (float64, every weight random so no fix-up zero hides a path) and its
    weights as torch tensors that require grad."""
    rng = np.random.default_rng(seed)
    model = make_model(name, **OPTIONS, **({"latent_dim": 5} if "generator" in name else {}), rng=rng).double()
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


if __name__ == "__main__":
    for test in [v for k, v in sorted(globals().items()) if k.startswith("test_")]:
        test()
        print("passed", test.__name__)
    print(f"torch {torch.__version__}: all passed; float64, rtol 1e-10")
