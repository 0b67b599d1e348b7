"""R3GAN's generator and critic (Huang et al. 2024, "The GAN is dead; long live the GAN! A Modern
GAN Baseline", NeurIPS 2024; the definition of github.com/brownvc/R3GAN, ``R3GAN/Networks.py``).

A modernized ResNet with no normalization. Stages run from 4x4 to the image size, doubling the
resolution each time; ``widths[i]`` is the width of stage i counted from 4x4 (the same list for
both networks: the critic runs it backwards) and ``blocks[i]`` its number of residual blocks.

Residual block (width C, expansion e, L = sum(blocks) blocks in the network)::

    x + conv1x1(eC -> C)(lrelu(conv3x3_grouped(eC -> eC)(lrelu(conv1x1(C -> eC)(x) + b1)) + b2))

with leaky ReLU slope 0.2, biases only before the activations, and the 3x3 convolution split in
groups of ``group_size`` channels (R3GAN's cardinality = eC / group_size). Fix-up initialization:
the last 1x1 convolution of each block is zero, so every block starts as the identity; the other
two are drawn N(0, gain^2 / fan_in) with gain = sqrt(2 / (1 + 0.2^2)) * L^(-1/4) (R3GAN's
``VarianceScalingParameter ** (-1 / (2 * 3 - 2))``). Every other convolution and linear map is
N(0, 1 / fan_in) with no bias.

Resampling is R3GAN's interpolative one: the filter [1, 2, 1] convolved with [1, 1] ([1, 3, 3, 1]),
its outer product normalized to sum 1, applied to each channel alone (a depthwise convolution:
groups = channels, the kernel repeated per channel); up-sampling is a transposed convolution with
stride 2 and padding 1 by 4 times that kernel, down-sampling a convolution with stride 2 and
padding 1 by it. A change of width is a 1x1 convolution at the lower resolution
(before up-sampling, after down-sampling).

Generator: z (N, latent_dim) -> a learned 4x4 basis (C0, 4, 4), N(0, 1), multiplied channelwise by
a linear map of z (N, C0) -> blocks -> [up-sample, blocks] per stage -> conv1x1 to ``out_channels``.
The output is not squashed (R3GAN's has no tanh): images are clipped to [-1, 1] where they are
quantized.

Critic: images -> conv1x1 to the last width -> [blocks, down-sample] per stage -> blocks at 4x4 ->
depthwise 4x4 convolution (no padding: (N, C0, 1, 1)) -> linear map to the logit (N, 1).
"""
import math

import numpy

import gpgan.functions as F
import gpgan.nn as nn
from gpgan.autograd import Variable
from gpgan.backend import get_array_module
from gpgan.models._common import IN_CHANNELS, OUT_CHANNELS, check_positive_int, declares_options
from gpgan.nn import init as nn_init
from gpgan.schema import Field

__all__ = ["R3GANGenerator", "R3GANCritic", "ResidualBlock", "resampling_kernel", "upsample", "downsample",
           "ACTIVATION_GAIN"]

#: gain of a leaky ReLU with slope 0.2 (R3GAN's ``BiasedActivation.Gain``)
ACTIVATION_GAIN = math.sqrt(2.0 / (1.0 + 0.2 ** 2))
_SLOPE = 0.2


def resampling_kernel(taps=(1, 2, 1)):
    """The (4, 4) low-pass kernel of interpolative resampling: ``taps`` convolved with [1, 1], the
    outer product of that with itself, normalized to sum 1 (float64)."""
    k = numpy.convolve(numpy.asarray(taps, numpy.float64), [1.0, 1.0])
    k = numpy.outer(k, k)
    return k / k.sum()


def _depthwise(kernel, channels):
    """The (1, 1, kH, kW) ``kernel`` repeated as the (C, 1, kH, kW) weight of a depthwise
    convolution (groups = C): every channel filtered alone, in its own memory layout, where a
    batch of N * C single-channel images would need the channels-first copy of the activations
    and back. An array stays a constant of the graph; a Variable is broadcast differentiably."""
    shape = (channels,) + tuple(kernel.shape[1:])
    if isinstance(kernel, Variable):
        return F.broadcast_to(kernel, shape)
    return get_array_module(kernel).repeat(kernel, channels, axis=0)


def upsample(x, kernel):
    """Up-sample (N, C, H, W) -> (N, C, 2H, 2W): transposed convolution by ``4 * kernel`` (a (1, 1,
    4, 4) array or Variable holding the normalized kernel times 4), stride 2, padding 1, per channel."""
    c = x.shape[1]
    return F.conv_transpose2d(x, _depthwise(kernel, c), stride=2, padding=1, groups=c)


def downsample(x, kernel):
    """Down-sample (N, C, H, W) -> (N, C, H/2, W/2): convolution by ``kernel`` ((1, 1, 4, 4),
    normalized), stride 2, padding 1, per channel. H and W must be even."""
    c = x.shape[1]
    return F.conv2d(x, _depthwise(kernel, c), stride=2, padding=1, groups=c)


def _msr(layer, gain, rng):
    """R3GAN's ``MSRInitializer``: weight N(0, gain^2 / fan_in), fan_in = weight[0].size (the
    input channels per group times the kernel's area); bias zero."""
    fan_in = int(numpy.prod(layer.weight.shape[1:]))
    if gain == 0:
        nn_init.zeros_(layer.weight)
    else:
        nn_init.normal_(layer.weight, 0.0, gain / math.sqrt(fan_in), rng=rng)
    if getattr(layer, "bias", None) is not None:
        nn_init.zeros_(layer.bias)
    return layer


def _conv(in_ch, out_ch, k, gain, rng, groups=1, bias=False, padding=None):
    padding = (k - 1) // 2 if padding is None else padding
    conv = nn.Conv2d(in_ch, out_ch, k, padding=padding, groups=groups, bias=bias, rng=rng)
    return _msr(conv, gain, rng)


class ResidualBlock(nn.Module):
    """R3GAN's residual block on (N, C, H, W), shape kept (module docstring).

    Args:
        width: C. expansion: e (2). group_size: channels per group of the 3x3 convolution (16);
        it must divide e * C. total_blocks: L, for the fix-up gain. kernel_size: 3.
    """

    def __init__(self, width, expansion=2, group_size=16, total_blocks=1, kernel_size=3, rng=None):
        super().__init__()
        expanded = width * expansion
        if expanded % group_size:
            raise ValueError(f"R3GAN block: group_size {group_size} must divide the expanded width "
                             f"{expanded} (width {width} x expansion {expansion})")
        gain = ACTIVATION_GAIN * total_blocks ** (-1.0 / (2 * 3 - 2))
        # The activation biases ride on the two convolutions before them (conv + b, then lrelu:
        # R3GAN's bias-free conv followed by BiasedActivation, one node fewer).
        self.conv1 = _conv(width, expanded, 1, gain, rng, bias=True)
        self.conv2 = _conv(expanded, expanded, kernel_size, gain, rng, groups=expanded // group_size, bias=True)
        self.conv3 = _conv(expanded, width, 1, 0.0, rng)

    def forward(self, x):
        y = F.leaky_relu(self.conv1(x), _SLOPE)
        y = F.leaky_relu(self.conv2(y), _SLOPE)
        return x + self.conv3(y)


def _check_stages(name, widths, blocks, expansion, group_size):
    for option, values in (("widths", widths), ("blocks", blocks)):
        if not isinstance(values, (list, tuple)) or not all(isinstance(v, int) and not isinstance(v, bool)
                                                              for v in values):
            raise ValueError(f"{name}: {option} must be a list of whole numbers, one per stage from 4x4 up "
                             f"(e.g. [768, 768, 768, 768], in --set as ...{option}=[16,16,16,16]), got {values!r}")
    widths, blocks = list(widths), list(blocks)
    if not widths or len(widths) != len(blocks):
        raise ValueError(f"{name}: widths and blocks need one entry per stage (4x4 first), got "
                         f"{len(widths)} widths and {len(blocks)} blocks")
    for option, values in (("widths", widths), ("blocks", blocks)):
        for v in values:
            check_positive_int(name, option, v)
    for w in widths:
        if (w * expansion) % group_size:
            raise ValueError(f"{name}: group_size {group_size} must divide every expanded width; "
                             f"width {w} x expansion {expansion} = {w * expansion} is not a multiple")
    return widths, blocks


#: the options both networks take (their stages, from 4x4 up)
STAGE_OPTIONS = {
    "widths": Field("list", [768, 768, 768, 768], "the width of each stage, 4x4 first (R3GAN's CIFAR-10: 768 x 4 "
                    "for 32x32 images; S = 4 * 2^(stages-1))",
                    accepts="a list of whole numbers >= 1, one per stage (in --set: [16,16,16,16])"),
    "blocks": Field("list", [2, 2, 2, 2], "residual blocks per stage, 4x4 first (R3GAN's CIFAR-10: 2 x 4)",
                    accepts="a list of whole numbers >= 1, one per stage (in --set: [2,2,2,2])"),
    "expansion": Field("int", 2, "the blocks' expansion factor", minimum=1),
    "group_size": Field("int", 16, "channels per group of the blocks' 3x3 convolutions (must divide every "
                        "expanded width)", minimum=1),
    "resample_taps": Field("floats", [1, 2, 1], "the taps of the resampling filter (convolved with [1, 1]: a "
                           "separable 4x4 kernel)", length=3),
}


class _Resampling(nn.Module):
    """Holds the resampling kernel as a buffer, so it moves and casts with the module."""

    def _register_kernel(self, taps, dtype=numpy.float32):
        self.register_buffer("resample_kernel", resampling_kernel(taps).reshape(1, 1, 4, 4).astype(dtype))

    def _kernel(self, x, scale=1.0):
        """The kernel in ``x``'s dtype, times ``scale`` (a raw array: a constant of the graph)."""
        k = self.resample_kernel.astype(x.dtype, copy=False)
        return k * k.dtype.type(scale) if scale != 1.0 else k


@declares_options
class R3GANGenerator(_Resampling):
    """R3GAN's generator: z (N, latent_dim) -> images (N, out_channels, S, S), S = 4 * 2^(stages-1).

    Args:
        latent_dim: size of z (64 in R3GAN).
        widths: width per stage from 4x4 up (R3GAN CIFAR-10: 768 x 4, for 32x32).
        blocks: residual blocks per stage (R3GAN CIFAR-10: 2 x 4).
        expansion: the blocks' expansion factor (2).
        group_size: channels per group of the blocks' 3x3 convolutions (16).
        out_channels: 3.
        resample_taps: the resampling filter (1, 2, 1).
        rng: NumPy Generator for the initialization (None: gpgan's global generator).
    """

    options = {"latent_dim": Field("int", 64, "size of z", minimum=1), **STAGE_OPTIONS, "out_channels": OUT_CHANNELS}

    def __init__(self, latent_dim=64, widths=(768, 768, 768, 768), blocks=(2, 2, 2, 2), expansion=2,
                 group_size=16, out_channels=3, resample_taps=(1, 2, 1), rng=None):
        super().__init__()
        name = type(self).__name__
        widths, blocks = _check_stages(name, widths, blocks, expansion, group_size)
        self.latent_dim, self.widths, self.blocks_per_stage = latent_dim, widths, blocks
        self.image_size = 4 * 2 ** (len(widths) - 1)
        total = sum(blocks)
        self.basis = nn.Parameter(numpy.zeros((widths[0], 4, 4), numpy.float32))
        nn_init.normal_(self.basis, 0.0, 1.0, rng=rng)
        self.modulation = _msr(nn.Linear(latent_dim, widths[0], bias=False, rng=rng), 1.0, rng)
        stages = []
        for i, (width, count) in enumerate(zip(widths, blocks)):
            stage = nn.Module()
            if i > 0 and widths[i - 1] != width:
                stage.transition = _conv(widths[i - 1], width, 1, 1.0, rng)
            stage.blocks = nn.Sequential(*[ResidualBlock(width, expansion, group_size, total, rng=rng)
                                           for _ in range(count)])
            stages.append(stage)
        self.stages = nn.ModuleList(stages)
        self.to_image = _conv(widths[-1], out_channels, 1, 1.0, rng)
        self._register_kernel(resample_taps)

    def embed_input(self, z):
        """The generator's input as the first stage reads it (a conditional wrapper overrides it)."""
        return z

    def forward(self, z):
        z = self.embed_input(z)
        n = z.shape[0]
        x = F.reshape(self.basis, (1,) + tuple(self.basis.shape)) * F.reshape(
            self.modulation(z), (n, self.widths[0], 1, 1))
        for i, stage in enumerate(self.stages):
            if i > 0:
                if hasattr(stage, "transition"):
                    x = stage.transition(x)
                x = upsample(x, self._kernel(x, 4.0))
            x = stage.blocks(x)
        return self.to_image(x)


@declares_options
class R3GANCritic(_Resampling):
    """R3GAN's critic: images (N, in_channels, S, S) -> logits (N, 1), S = 4 * 2^(stages-1).

    Args:
        widths, blocks, expansion, group_size, resample_taps: as :class:`R3GANGenerator` (the same
            lists, 4x4 first; the critic runs them from the image size down).
        in_channels: 3.
        out_features: the final linear map's outputs (1: the logit; a projection critic asks for
            the embedding's width).
        rng: NumPy Generator for the initialization.
    """

    options = {**STAGE_OPTIONS, "in_channels": IN_CHANNELS,
               "out_features": Field("int", 1, "the final linear map's outputs (1: the logit; a projection critic "
                                     "sets the embedding's width)", minimum=1)}

    def __init__(self, widths=(768, 768, 768, 768), blocks=(2, 2, 2, 2), expansion=2, group_size=16,
                 in_channels=3, resample_taps=(1, 2, 1), out_features=1, rng=None):
        super().__init__()
        name = type(self).__name__
        widths, blocks = _check_stages(name, widths, blocks, expansion, group_size)
        self.widths, self.blocks_per_stage = widths, blocks
        self.image_size = 4 * 2 ** (len(widths) - 1)
        total = sum(blocks)
        self.from_image = _conv(in_channels, widths[-1], 1, 1.0, rng)
        stages = []
        for i in reversed(range(len(widths))):  # from the image size down to 4x4
            stage = nn.Module()
            stage.blocks = nn.Sequential(*[ResidualBlock(widths[i], expansion, group_size, total, rng=rng)
                                           for _ in range(blocks[i])])
            if i > 0 and widths[i] != widths[i - 1]:
                stage.transition = _conv(widths[i], widths[i - 1], 1, 1.0, rng)
            stages.append(stage)
        self.stages = nn.ModuleList(stages)
        self.basis = _conv(widths[0], widths[0], 4, 1.0, rng, groups=widths[0], padding=0)
        self.to_logit = _msr(nn.Linear(widths[0], out_features, bias=False, rng=rng), 1.0, rng)
        self._register_kernel(resample_taps)

    def features(self, x):
        """(N, widths[0]): the features the final linear map reads."""
        if x.shape[-1] != self.image_size or x.shape[-2] != self.image_size:
            raise ValueError(f"{type(self).__name__}: expects {self.image_size}x{self.image_size} images "
                             f"({len(self.widths)} stages), got {tuple(x.shape)}")
        x = self.from_image(x)
        last = len(self.stages) - 1
        for k, stage in enumerate(self.stages):
            x = stage.blocks(x)
            if k < last:
                x = downsample(x, self._kernel(x))
                if hasattr(stage, "transition"):
                    x = stage.transition(x)
        return F.reshape(self.basis(x), (x.shape[0], self.widths[0]))

    @property
    def feature_dim(self):
        """The width of :meth:`features` (what a projection critic projects on)."""
        return self.widths[0]

    def logits(self, phi):
        """(N, widths[0]) features -> (N, out_features)."""
        return self.to_logit(phi)

    def forward(self, x):
        return self.logits(self.features(x))
