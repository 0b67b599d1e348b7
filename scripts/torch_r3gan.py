"""R3GAN's networks written again in PyTorch, independently of gpgan's code, from the definition in
gpgan/models/r3gan.py's docstring (and gpgan/models/conditional.py's for the class-conditional
wrappers), as functions of a dict of weight tensors named as gpgan's ``named_parameters()``.

Shared by tests/test_r3gan_vs_torch.py (float64 agreement) and scripts/bench_engine.py's ``r3gan``
workload (PyTorch's twin of a training step); neither gpgan nor its tests depend on torch. Every
function takes ``torch`` from the caller's import, so importing this module imports nothing.

Shapes: images (N, C, H, W); z (N, latent_dim); one-hot labels (N, K); weights as gpgan stores
them (a convolution (O, C/groups, kH, kW), a linear map (out, in)). ``prefix`` is the networks'
name prefix in ``p`` (``"base."`` inside a class-conditional wrapper).
"""


def resampling_kernel(torch, like):
    """R3GAN's (1, 1, 4, 4) low-pass kernel ([1, 3, 3, 1] outer itself, sum 1) in ``like``'s dtype
    and device."""
    k = torch.tensor([1.0, 3.0, 3.0, 1.0], dtype=like.dtype, device=like.device)
    k = torch.outer(k, k)
    return (k / k.sum()).view(1, 1, 4, 4)


def upsample(torch, x):
    """(N, C, H, W) -> (N, C, 2H, 2W): per channel, transposed convolution by 4 x the kernel, s2 p1."""
    n, c, h, w = x.shape
    y = torch.nn.functional.conv_transpose2d(x.reshape(n * c, 1, h, w), 4 * resampling_kernel(torch, x),
                                             stride=2, padding=1)
    return y.view(n, c, 2 * h, 2 * w)


def downsample(torch, x):
    """(N, C, H, W) -> (N, C, H/2, W/2): per channel, convolution by the kernel, s2 p1."""
    n, c, h, w = x.shape
    y = torch.nn.functional.conv2d(x.reshape(n * c, 1, h, w), resampling_kernel(torch, x), stride=2, padding=1)
    return y.view(n, c, h // 2, w // 2)


def block(torch, x, p, prefix, group_size):
    """x + W3 * lrelu(W2 *_groups lrelu(W1 * x + b1) + b2), slope 0.2; groups of ``group_size``."""
    nnf = torch.nn.functional
    w1, b1 = p[prefix + "conv1.weight"], p[prefix + "conv1.bias"]
    w2, b2 = p[prefix + "conv2.weight"], p[prefix + "conv2.bias"]
    w3 = p[prefix + "conv3.weight"]
    y = nnf.leaky_relu(nnf.conv2d(x, w1) + b1.view(1, -1, 1, 1), 0.2)
    y = nnf.leaky_relu(nnf.conv2d(y, w2, padding=1, groups=w2.shape[0] // group_size) + b2.view(1, -1, 1, 1), 0.2)
    return x + nnf.conv2d(y, w3)


def generator(torch, z, p, widths, blocks, group_size, prefix=""):
    """R3GAN's generator: z (N, latent_dim) -> images (N, 3, S, S)."""
    nnf = torch.nn.functional
    x = p[prefix + "basis"].unsqueeze(0) * (z @ p[prefix + "modulation.weight"].T).view(z.shape[0], -1, 1, 1)
    for i in range(len(widths)):
        if i > 0:
            if f"{prefix}stages.{i}.transition.weight" in p:
                x = nnf.conv2d(x, p[f"{prefix}stages.{i}.transition.weight"])
            x = upsample(torch, x)
        for b in range(blocks[i]):
            x = block(torch, x, p, f"{prefix}stages.{i}.blocks.{b}.", group_size)
    return nnf.conv2d(x, p[prefix + "to_image.weight"])


def critic_features(torch, x, p, widths, blocks, group_size, prefix=""):
    """R3GAN's critic up to its final linear map: images -> (N, widths[0])."""
    nnf = torch.nn.functional
    x = nnf.conv2d(x, p[prefix + "from_image.weight"])
    for k, i in enumerate(reversed(range(len(widths)))):
        for b in range(blocks[i]):
            x = block(torch, x, p, f"{prefix}stages.{k}.blocks.{b}.", group_size)
        if i > 0:
            x = downsample(torch, x)
            if f"{prefix}stages.{k}.transition.weight" in p:
                x = nnf.conv2d(x, p[f"{prefix}stages.{k}.transition.weight"])
    return nnf.conv2d(x, p[prefix + "basis.weight"], groups=widths[0]).view(x.shape[0], -1)


def critic(torch, x, p, widths, blocks, group_size, prefix=""):
    """R3GAN's critic: images -> logits (N, 1)."""
    return critic_features(torch, x, p, widths, blocks, group_size, prefix) @ p[prefix + "to_logit.weight"].T


def conditional_generator(torch, z, onehot, p, widths, blocks, group_size):
    """``G(concat(z, E y))``: the label's bias-free embedding joined to z (gpgan's ConditionalGenerator)."""
    e = onehot @ p["embedding.weight"].T
    return generator(torch, torch.cat([z, e], dim=1), p, widths, blocks, group_size, prefix="base.")


def projection_critic(torch, x, onehot, p, widths, blocks, group_size):
    """``psi(phi(x)) + <V y, phi(x)>`` (Miyato and Koyama 2018; gpgan's ProjectionCritic)."""
    phi = critic_features(torch, x, p, widths, blocks, group_size, prefix="base.")
    v = onehot @ p["embedding.weight"].T
    return phi @ p["base.to_logit.weight"].T + (v * phi).sum(dim=1, keepdim=True)
