"""DCGAN generator and critic for 32x32 images (Radford et al. 2016), in the CIFAR-10 form used by
WGAN-GP (Gulrajani et al. 2017) and SNGAN (Miyato et al. 2018, "standard CNN").

Generator (width w = 64, so 8w = 512): z (N, 128) -> Linear(128, 4*4*8w) -> BatchNorm1d(4*4*8w)
-> ReLU -> reshape (N, 8w, 4, 4) -> 3 x [ConvTranspose2d(k4, s2, p1) halving the channels
(8w -> 4w -> 2w -> w), BatchNorm2d, ReLU] -> Conv2d(w -> 3, k3, p1) -> tanh: (N, 3, 32, 32) in [-1, 1].
The BatchNorm after the Linear normalizes each of the 4*4*8w features, as in WGAN-GP's
``gan_cifar.py`` and the chainer-gan-lib / SNGAN DCGAN generator (``bn0`` over the Linear's output);
convolutions keep their biases, as in those codes.

Critic (the engine benchmark's): (N, 3, 32, 32) -> Conv2d(3 -> w, k4 s2 p1) -> LeakyReLU(0.2) ->
Conv2d(w -> 2w, k4 s2 p1) -> LeakyReLU -> Conv2d(2w -> 4w, k4 s2 p1) -> LeakyReLU -> flatten ->
Linear(4w*4*4 -> 1): logits (N, 1). With norm="layer", LayerNorm((C, H, W)) follows the second and
third convolutions (WGAN-GP's layer-norm critic normalizes all but the first layer); with
norm="spectral" every Conv/Linear is spectrally normalized.

Both are initialized as DCGAN (``init="dcgan"``: weights N(0, 0.02), BatchNorm scale N(1, 0.02),
zero biases); ``init="default"`` keeps torch's layer defaults.
"""
import gpgan.functions as F
import gpgan.nn as nn
from gpgan.models._common import (
    CRITIC_NORMS, GENERATOR_NORMS, IN_CHANNELS, OUT_CHANNELS, dcgan_init, declares_options, spectral_norm_all,
)
from gpgan.schema import Field

__all__ = ["DCGANGenerator", "DCGANCritic"]

INIT = Field("str", "dcgan", "dcgan: weights N(0, 0.02), BatchNorm scales N(1, 0.02), zero biases; default: "
             "torch's layer defaults", choices=["dcgan", "default"])
IMAGE_SIZE = Field("int", 32, "the images' side, a multiple of 8 (three stride-2 layers)", minimum=8)


def _check_image_size(name, image_size):
    if image_size % 8:
        raise ValueError(f"{name}: image_size must be a multiple of 8 (three stride-2 layers), got {image_size!r}")


@declares_options
class DCGANGenerator(nn.Module):
    """DCGAN generator, z (N, latent_dim) -> images (N, out_channels, 32, 32) in [-1, 1] (module docstring).

    Args:
        latent_dim: size of z (128).
        width: channels of the last hidden layer w (64); the others are 2w, 4w, 8w.
        norm: "batch" (default) or "none" (no BatchNorm anywhere).
        out_channels: 3.
        image_size: 32 (any multiple of 8; the base resolution is image_size / 8).
        init: "dcgan" (default) or "default" (torch's layer initialization).
        rng: NumPy Generator for the initialization (None: gpgan's global generator).
    """

    options = {
        "latent_dim": Field("int", 128, "size of z", minimum=1),
        "width": Field("int", 64, "channels w of the last hidden layer; the others have 2w, 4w and 8w", minimum=1),
        "norm": Field("str", "batch", "batch: BatchNorm after the Linear and each transposed convolution; none: "
                      "no normalization", choices=list(GENERATOR_NORMS)),
        "out_channels": OUT_CHANNELS,
        "image_size": IMAGE_SIZE,
        "init": INIT,
    }

    def __init__(self, latent_dim=128, width=64, norm="batch", out_channels=3, image_size=32, init="dcgan",
                 rng=None):
        super().__init__()
        _check_image_size(type(self).__name__, image_size)
        self.latent_dim = latent_dim
        self.bottom = image_size // 8
        self.top_channels = 8 * width
        batch = norm == "batch"
        features = self.bottom * self.bottom * self.top_channels
        self.linear = nn.Linear(latent_dim, features, rng=rng)
        self.bn0 = nn.BatchNorm1d(features) if batch else nn.Identity()
        layers = []
        channels = self.top_channels
        for _ in range(3):
            layers.append(nn.ConvTranspose2d(channels, channels // 2, 4, stride=2, padding=1, rng=rng))
            if batch:
                layers.append(nn.BatchNorm2d(channels // 2))
            layers.append(nn.ReLU())
            channels //= 2
        layers += [nn.Conv2d(channels, out_channels, 3, stride=1, padding=1, rng=rng), nn.Tanh()]
        self.main = nn.Sequential(*layers)
        if init == "dcgan":
            dcgan_init(self, rng)

    def forward(self, z):
        h = F.relu(self.bn0(self.linear(z)))
        h = F.reshape(h, (h.shape[0], self.top_channels, self.bottom, self.bottom))
        return self.main(h)


@declares_options
class DCGANCritic(nn.Module):
    """DCGAN critic, images (N, in_channels, 32, 32) -> logits (N, 1) (module docstring).

    Args:
        width: channels of the first convolution w (64); then 2w, 4w.
        norm: "none" (default), "layer" or "spectral". No batch norm: it would couple the samples
            of a batch, which a per-sample gradient penalty assumes independent.
        in_channels: 3.
        image_size: 32 (any multiple of 8).
        negative_slope: of the LeakyReLUs (0.2).
        init: "dcgan" (default) or "default".
        rng: NumPy Generator for the initialization and the spectral-norm vectors.
    """

    options = {
        "width": Field("int", 64, "channels w of the first convolution; then 2w and 4w", minimum=1),
        "norm": Field("str", "none", "none; layer: LayerNorm after the second and third convolutions; spectral: "
                      "spectral norm on every layer (no batch norm: the penalty is per sample)",
                      choices=list(CRITIC_NORMS)),
        "in_channels": IN_CHANNELS,
        "image_size": IMAGE_SIZE,
        "negative_slope": Field("float", 0.2, "the LeakyReLUs' slope for negative inputs", minimum=0),
        "init": INIT,
    }

    def __init__(self, width=64, norm="none", in_channels=3, image_size=32, negative_slope=0.2, init="dcgan",
                 rng=None):
        super().__init__()
        _check_image_size(type(self).__name__, image_size)
        layers = []
        channels, size = in_channels, image_size
        for i, out in enumerate((width, 2 * width, 4 * width)):
            layers.append(nn.Conv2d(channels, out, 4, stride=2, padding=1, rng=rng))
            channels, size = out, size // 2
            if norm == "layer" and i > 0:
                layers.append(nn.LayerNorm((channels, size, size)))
            layers.append(nn.LeakyReLU(negative_slope))
        layers += [nn.Flatten(), nn.Linear(channels * size * size, 1, rng=rng)]
        self.main = nn.Sequential(*layers)
        if init == "dcgan":
            dcgan_init(self, rng)
        if norm == "spectral":
            spectral_norm_all(self, rng)

    @property
    def feature_dim(self):
        """The width of :meth:`features` (what a projection critic projects on)."""
        return self.main[-1].in_features

    def features(self, x):
        """The input of the final Linear: (N, feature_dim)."""
        return self.main[:-1](x)

    def logits(self, phi):
        return self.main[-1](phi)

    def forward(self, x):
        return self.main(x)
