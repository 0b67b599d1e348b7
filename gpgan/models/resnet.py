"""ResNet generator and critic for 32x32 images, as used on CIFAR-10 by WGAN-GP (Gulrajani et al.
2017, ``gan_cifar_resnet.py``) and SNGAN (Miyato et al. 2018, Table 4 / ``sngan_projection``).

Generator (width ch): z (N, 128) -> Linear(128, 4*4*ch) -> reshape (N, ch, 4, 4) -> 3 x up-block
-> BatchNorm2d -> ReLU -> Conv2d(ch -> 3, k3, p1) -> tanh: (N, 3, 32, 32) in [-1, 1].
Up-block: BN, ReLU, upsample x2 (nearest), Conv3x3, BN, ReLU, Conv3x3; shortcut upsample + Conv1x1.
WGAN-GP uses ch = 128, SNGAN ch = 256.

Critic (width ch): optimized block (3 -> ch, down) -> block (ch -> ch, down) -> 2 x block (ch -> ch)
-> ReLU -> global pooling over H, W -> Linear(ch, 1). Optimized block: Conv3x3, ReLU, Conv3x3,
avg-pool 2; shortcut avg-pool 2 then Conv1x1. Block: (norm), ReLU, Conv3x3, (norm), ReLU, Conv3x3,
(avg-pool 2 when down-sampling); shortcut Conv1x1 (+ avg-pool) when down-sampling or the width
changes, identity otherwise. WGAN-GP: ch = 128, mean pooling; SNGAN: ch = 128, sum pooling and
spectral norm (``norm="spectral", pooling="sum"``).

A 1x1 convolution commutes with nearest up-sampling and with average pooling (both act on each
channel the same way, and a per-pixel affine map commutes with replicating or averaging pixels),
so the shortcuts here run the 1x1 convolution at the lower resolution: the same function, 4x cheaper.

Initialization ``init="xavier"`` (default) is SNGAN's: Glorot-uniform with gain sqrt(2) for the
3x3 convolutions inside blocks, gain 1 for shortcuts, the Linear layers and the output
convolution, zero biases; ``init="default"`` keeps torch's layer defaults.
"""
import math

import gpgan.functions as F
import gpgan.nn as nn
from gpgan.models._common import (
    CRITIC_NORMS, GENERATOR_NORMS, IN_CHANNELS, OUT_CHANNELS, declares_options, spectral_norm_all, xavier_init,
)
from gpgan.schema import Field

__all__ = ["ResNetGenerator", "ResNetCritic", "GeneratorBlock", "CriticBlock", "OptimizedCriticBlock"]

INIT = Field("str", "xavier", "xavier: SNGAN's Glorot-uniform initialization (gain sqrt(2) inside the blocks, 1 "
             "elsewhere, zero biases); default: torch's layer defaults", choices=["xavier", "default"])
WIDTH = Field("int", 128, "channels of every block (WGAN-GP 128; SNGAN's generator 256)", minimum=1)


def _conv(in_ch, out_ch, k, init, gain, rng):
    conv = nn.Conv2d(in_ch, out_ch, k, stride=1, padding=k // 2, rng=rng)
    return xavier_init(conv, gain, rng) if init == "xavier" else conv


class GeneratorBlock(nn.Module):
    """Up-sampling residual block: (N, in_ch, H, W) -> (N, out_ch, 2H, 2W)."""

    def __init__(self, in_ch, out_ch, batch_norm=True, init="xavier", rng=None):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_ch) if batch_norm else nn.Identity()
        self.conv1 = _conv(in_ch, out_ch, 3, init, math.sqrt(2), rng)
        self.bn2 = nn.BatchNorm2d(out_ch) if batch_norm else nn.Identity()
        self.conv2 = _conv(out_ch, out_ch, 3, init, math.sqrt(2), rng)
        self.shortcut = _conv(in_ch, out_ch, 1, init, 1.0, rng)

    def forward(self, x):
        h = F.upsample_nearest2d(F.relu(self.bn1(x)), 2)
        h = self.conv2(F.relu(self.bn2(self.conv1(h))))
        return h + F.upsample_nearest2d(self.shortcut(x), 2)


class OptimizedCriticBlock(nn.Module):
    """The critic's first block (no activation before the first conv): (N, in, H, W) -> (N, out, H/2, W/2)."""

    def __init__(self, in_ch, out_ch, init="xavier", rng=None):
        super().__init__()
        self.conv1 = _conv(in_ch, out_ch, 3, init, math.sqrt(2), rng)
        self.conv2 = _conv(out_ch, out_ch, 3, init, math.sqrt(2), rng)
        self.shortcut = _conv(in_ch, out_ch, 1, init, 1.0, rng)

    def forward(self, x):
        h = F.avg_pool2d(self.conv2(F.relu(self.conv1(x))), 2)
        return h + self.shortcut(F.avg_pool2d(x, 2))


class CriticBlock(nn.Module):
    """Residual block: (N, in, H, W) -> (N, out, H/2, W/2) when ``downsample``, else (N, out, H, W).

    ``layer_norm_size`` = H enables LayerNorm((C, H, W)) before each ReLU (WGAN-GP's normalized critic).
    """

    def __init__(self, in_ch, out_ch, downsample, layer_norm_size=None, init="xavier", rng=None):
        super().__init__()
        self.downsample = downsample
        s = layer_norm_size
        self.norm1 = nn.LayerNorm((in_ch, s, s)) if s else nn.Identity()
        self.conv1 = _conv(in_ch, in_ch, 3, init, math.sqrt(2), rng)
        self.norm2 = nn.LayerNorm((in_ch, s, s)) if s else nn.Identity()
        self.conv2 = _conv(in_ch, out_ch, 3, init, math.sqrt(2), rng)
        if downsample or in_ch != out_ch:
            self.shortcut = _conv(in_ch, out_ch, 1, init, 1.0, rng)
        else:
            self.shortcut = None

    def forward(self, x):
        h = self.conv1(F.relu(self.norm1(x)))
        h = self.conv2(F.relu(self.norm2(h)))
        sc = x
        if self.downsample:
            h = F.avg_pool2d(h, 2)
            sc = F.avg_pool2d(sc, 2)
        if self.shortcut is not None:
            sc = self.shortcut(sc)
        return h + sc


@declares_options
class ResNetGenerator(nn.Module):
    """ResNet generator, z (N, latent_dim) -> images (N, out_channels, 32, 32) in [-1, 1] (module docstring).

    Args:
        latent_dim: size of z (128).
        width: channels ch of every block (128, WGAN-GP; SNGAN uses 256).
        norm: "batch" (default) or "none".
        out_channels: 3.
        bottom_width: spatial size after the Linear (4; the output is 8x that).
        init: "xavier" (default, SNGAN) or "default" (torch's layer defaults).
        rng: NumPy Generator for the initialization (None: gpgan's global generator).
    """

    options = {
        "latent_dim": Field("int", 128, "size of z", minimum=1),
        "width": WIDTH,
        "norm": Field("str", "batch", "batch: BatchNorm in the blocks and before the output; none: no "
                      "normalization", choices=list(GENERATOR_NORMS)),
        "out_channels": OUT_CHANNELS,
        "bottom_width": Field("int", 4, "the side after the Linear; the images' side is 8 times it", minimum=1),
        "init": INIT,
    }

    def __init__(self, latent_dim=128, width=128, norm="batch", out_channels=3, bottom_width=4, init="xavier",
                 rng=None):
        super().__init__()
        self.latent_dim, self.width, self.bottom_width = latent_dim, width, bottom_width
        batch = norm == "batch"
        self.linear = nn.Linear(latent_dim, bottom_width * bottom_width * width, rng=rng)
        if init == "xavier":
            xavier_init(self.linear, 1.0, rng)
        self.blocks = nn.Sequential(*[GeneratorBlock(width, width, batch, init, rng) for _ in range(3)])
        self.bn = nn.BatchNorm2d(width) if batch else nn.Identity()
        self.conv_out = _conv(width, out_channels, 3, init, 1.0, rng)

    def forward(self, z):
        h = F.reshape(self.linear(z), (z.shape[0], self.width, self.bottom_width, self.bottom_width))
        h = F.relu(self.bn(self.blocks(h)))
        return F.tanh(self.conv_out(h))


@declares_options
class ResNetCritic(nn.Module):
    """ResNet critic, images (N, in_channels, 32, 32) -> logits (N, 1) (module docstring).

    Args:
        width: channels ch of every block (128).
        norm: "none" (default, WGAN-GP), "layer" (LayerNorm before the ReLUs of the three plain
            blocks) or "spectral" (every Conv/Linear, SNGAN). No batch norm (per-sample penalty).
        pooling: "mean" (default, WGAN-GP) or "sum" (SNGAN) over the final H x W.
        in_channels: 3.
        image_size: 32 (only LayerNorm shapes depend on it; must be a multiple of 4).
        init: "xavier" (default) or "default".
        rng: NumPy Generator for the initialization and the spectral-norm vectors.
    """

    options = {
        "width": WIDTH,
        "norm": Field("str", "none", "none (WGAN-GP); layer: LayerNorm before the ReLUs of the three plain blocks; "
                      "spectral: spectral norm on every layer (SNGAN)", choices=list(CRITIC_NORMS)),
        "pooling": Field("str", "mean", "the final global pooling over H x W: mean (WGAN-GP) or sum (SNGAN)",
                         choices=["mean", "sum"]),
        "in_channels": IN_CHANNELS,
        "image_size": Field("int", 32, "the images' side, a multiple of 4 (only the LayerNorm shapes depend on it)",
                            minimum=4),
        "init": INIT,
    }

    def __init__(self, width=128, norm="none", pooling="mean", in_channels=3, image_size=32, init="xavier",
                 rng=None):
        super().__init__()
        if image_size % 4:
            raise ValueError(f"{type(self).__name__}: image_size must be a multiple of 4 (two down-sampling blocks), "
                             f"got {image_size}")
        self.pooling = pooling
        ln = norm == "layer"
        half, quarter = image_size // 2, image_size // 4
        self.blocks = nn.Sequential(
            OptimizedCriticBlock(in_channels, width, init, rng),
            CriticBlock(width, width, True, half if ln else None, init, rng),
            CriticBlock(width, width, False, quarter if ln else None, init, rng),
            CriticBlock(width, width, False, quarter if ln else None, init, rng),
        )
        self.linear = nn.Linear(width, 1, rng=rng)
        if init == "xavier":
            xavier_init(self.linear, 1.0, rng)
        if norm == "spectral":
            spectral_norm_all(self, rng)

    @property
    def feature_dim(self):
        """The width of :meth:`features` (what a projection critic projects on)."""
        return self.linear.in_features

    def features(self, x):
        """(N, width): the pooled features the final Linear reads."""
        h = F.relu(self.blocks(x))
        return F.sum(h, axis=(2, 3)) if self.pooling == "sum" else F.mean(h, axis=(2, 3))

    def logits(self, phi):
        return self.linear(phi)

    def forward(self, x):
        return self.logits(self.features(x))
