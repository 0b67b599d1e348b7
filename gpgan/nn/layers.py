"""Layers with torch.nn's constructors, parameter names, shapes and default initializations.

Shapes (N = batch): Linear (N, in) -> (N, out), weight (out, in); Conv2d (N, C_in, H, W) ->
(N, C_out, H', W'), weight (C_out, C_in/groups, kH, kW); ConvTranspose2d weight
(C_in, C_out/groups, kH, kW); BatchNorm1d (N, C), BatchNorm2d (N, C, H, W); LayerNorm normalizes
the trailing ``normalized_shape`` dimensions. Every layer with weights takes ``rng`` (a NumPy
Generator; None uses gpgan's global one) and ``dtype`` (float32 by default).
"""
import math

import numpy

import gpgan.functions as F
from gpgan.functions._args import check_int, pair
from gpgan.nn import init
from gpgan.nn.module import Module, Parameter

__all__ = [
    "Linear", "Conv2d", "ConvTranspose2d", "BatchNorm1d", "BatchNorm2d", "LayerNorm",
    "ReLU", "LeakyReLU", "Tanh", "Sigmoid", "ELU", "Softplus", "Identity", "Flatten",
    "AvgPool2d", "Upsample", "Dropout",
]


def _empty(shape, dtype):
    return Parameter(numpy.zeros(shape, dtype=dtype))


def _reset_torch_default(weight, bias, rng):
    """torch's default for Linear and Conv: kaiming_uniform(a=sqrt(5)) weight, i.e. U(+-1/sqrt(fan_in)),
    and bias U(+-1/sqrt(fan_in)), drawn weight first."""
    init.kaiming_uniform_(weight, a=math.sqrt(5), rng=rng)
    if bias is not None:
        fan_in, _ = init._calculate_fan_in_and_fan_out(weight)
        bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
        init.uniform_(bias, -bound, bound, rng=rng)


class Linear(Module):
    """``y = x W^T + b``: (N, in_features) -> (N, out_features); weight (out, in), bias (out,)."""

    def __init__(self, in_features, out_features, bias=True, rng=None, dtype=numpy.float32):
        super().__init__()
        self.in_features, self.out_features = int(in_features), int(out_features)
        self.weight = _empty((self.out_features, self.in_features), dtype)
        if bias:
            self.bias = _empty((self.out_features,), dtype)
        else:
            self.register_parameter("bias", None)
        self.reset_parameters(rng)

    def reset_parameters(self, rng=None):
        _reset_torch_default(self.weight, self.bias, rng)

    def forward(self, x, negative_slope=None):
        """x (..., in_features) -> (..., out_features); with ``negative_slope`` rectified in the
        same node (``leaky_relu(y, negative_slope)``, ``relu`` for 0): :class:`Sequential` asks
        for that where a :class:`ReLU` or :class:`LeakyReLU` follows (see :func:`F.linear`)."""
        return F.linear(x, self.weight, self.bias, negative_slope=negative_slope)

    def fuses_rectifier(self):
        """True when :meth:`forward` takes ``negative_slope`` (Linear's own, not a subclass's)."""
        return type(self).forward is Linear.forward

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class _ConvNd(Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                 transposed, output_padding, rng, dtype):
        super().__init__()
        name = type(self).__name__
        in_channels = check_int(name, "in_channels", in_channels, 1)
        out_channels = check_int(name, "out_channels", out_channels, 1)
        groups = check_int(name, "groups", groups, 1)
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"{name}: in_channels ({in_channels}) and out_channels ({out_channels}) "
                             f"must be divisible by groups ({groups})")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = pair(name, "kernel_size", kernel_size, 1)
        self.stride = pair(name, "stride", stride, 1)
        self.padding = pair(name, "padding", padding, 0)
        self.dilation = pair(name, "dilation", dilation, 1)
        self.output_padding = pair(name, "output_padding", output_padding, 0)
        self.groups = groups
        if transposed:
            shape = (self.in_channels, self.out_channels // groups) + self.kernel_size
        else:
            shape = (self.out_channels, self.in_channels // groups) + self.kernel_size
        self.weight = _empty(shape, dtype)
        if bias:
            self.bias = _empty((self.out_channels,), dtype)
        else:
            self.register_parameter("bias", None)
        self.reset_parameters(rng)

    def reset_parameters(self, rng=None):
        _reset_torch_default(self.weight, self.bias, rng)

    def extra_repr(self):
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if self.padding != (0, 0):
            s += f", padding={self.padding}"
        if self.output_padding != (0, 0):
            s += f", output_padding={self.output_padding}"
        if self.dilation != (1, 1):
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        return s


class Conv2d(_ConvNd):
    """2-D convolution (cross-correlation, as torch). (N, C_in, H, W) -> (N, C_out, H_out, W_out),
    ``H_out = (H + 2 padding - dilation (k - 1) - 1) // stride + 1``."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, rng=None, dtype=numpy.float32):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         False, 0, rng, dtype)

    def forward(self, x):
        return F.conv2d(x, self.weight, self.bias, stride=self.stride, padding=self.padding,
                        dilation=self.dilation, groups=self.groups)


class ConvTranspose2d(_ConvNd):
    """Transposed 2-D convolution (the gradient of Conv2d w.r.t. its input); weight (C_in, C_out/groups, kH, kW).
    ``H_out = (H - 1) stride - 2 padding + dilation (k - 1) + output_padding + 1``."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0, groups=1,
                 bias=True, dilation=1, rng=None, dtype=numpy.float32):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         True, output_padding, rng, dtype)

    def forward(self, x):
        return F.conv_transpose2d(x, self.weight, self.bias, stride=self.stride, padding=self.padding,
                                  output_padding=self.output_padding, groups=self.groups,
                                  dilation=self.dilation)


class _BatchNorm(Module):
    _expected_ndim = None

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, dtype=numpy.float32):
        super().__init__()
        self.num_features, self.eps, self.momentum, self.affine = int(num_features), eps, momentum, affine
        if affine:
            self.weight = Parameter(numpy.ones(num_features, dtype=dtype))
            self.bias = Parameter(numpy.zeros(num_features, dtype=dtype))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self.register_buffer("running_mean", numpy.zeros(num_features, dtype=dtype))
        self.register_buffer("running_var", numpy.ones(num_features, dtype=dtype))
        self.register_buffer("num_batches_tracked", numpy.zeros((), dtype=numpy.int64))

    def reset_running_stats(self):
        self.running_mean[...] = 0
        self.running_var[...] = 1
        self.num_batches_tracked[...] = 0

    def forward(self, x):
        if x.ndim not in self._expected_ndim or x.shape[1] != self.num_features:
            raise ValueError(f"{type(self).__name__}({self.num_features}): expected input of "
                             f"{' or '.join(str(d) for d in self._expected_ndim)} dimensions with "
                             f"{self.num_features} channels in dim 1, got shape {x.shape}")
        if self.training:
            self.num_batches_tracked += 1  # in place, like the running statistics
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                            training=self.training, momentum=self.momentum, eps=self.eps)

    def extra_repr(self):
        return f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}"


class BatchNorm1d(_BatchNorm):
    """Batch normalization of (N, C) inputs per feature C (Ioffe & Szegedy 2015).

    Training mode normalizes with the batch statistics and updates ``running_mean`` /
    ``running_var`` (``running = (1 - momentum) running + momentum batch``, unbiased variance);
    eval mode uses the running statistics.
    """

    _expected_ndim = (2,)


class BatchNorm2d(_BatchNorm):
    """Batch normalization of (N, C, H, W) inputs per channel; see :class:`BatchNorm1d`."""

    _expected_ndim = (4,)


class LayerNorm(Module):
    """Normalizes over the trailing ``normalized_shape`` dims (Ba et al. 2016); elementwise affine
    weight/bias of that shape, as torch.nn.LayerNorm. No running statistics: safe in a critic
    under a gradient penalty, because each sample is normalized on its own."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, dtype=numpy.float32):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(int(d) for d in normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(numpy.ones(self.normalized_shape, dtype=dtype))
            self.bias = Parameter(numpy.zeros(self.normalized_shape, dtype=dtype))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, x):
        if tuple(x.shape[x.ndim - len(self.normalized_shape):]) != self.normalized_shape:
            raise ValueError(f"LayerNorm{self.normalized_shape}: input shape {x.shape} does not end "
                             f"with the normalized shape")
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, eps=self.eps)

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


def _plain(module, cls):
    """True when ``module`` runs ``cls.forward`` with no hook of its own, so a preceding Linear may
    compute it (Sequential's fusion)."""
    return type(module).forward is cls.forward and not module._forward_pre_hooks


class ReLU(Module):
    def forward(self, x):
        return F.relu(x)

    def rectifier_slope(self):
        """0 (ReLU is the rectifier of slope 0) for a Linear before it to compute it; None when
        this module has hooks or another forward."""
        return 0.0 if _plain(self, ReLU) else None


class LeakyReLU(Module):
    def __init__(self, negative_slope=0.01):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        return F.leaky_relu(x, self.negative_slope)

    def rectifier_slope(self):
        """The slope, for a Linear before it to compute this activation (slopes in [0, 1]); None
        when this module has hooks or another forward, or its slope is outside [0, 1]."""
        slope = self.negative_slope
        return float(slope) if _plain(self, LeakyReLU) and 0 <= slope <= 1 else None

    def extra_repr(self):
        return f"negative_slope={self.negative_slope}"


class Tanh(Module):
    def forward(self, x):
        return F.tanh(x)


class Sigmoid(Module):
    def forward(self, x):
        return F.sigmoid(x)


class ELU(Module):
    def __init__(self, alpha=1.0):
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        return F.elu(x, self.alpha)

    def extra_repr(self):
        return f"alpha={self.alpha}"


class Softplus(Module):
    def __init__(self, beta=1.0, threshold=20.0):
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, x):
        return F.softplus(x, self.beta, self.threshold)

    def extra_repr(self):
        return f"beta={self.beta}, threshold={self.threshold}"


class Identity(Module):
    def forward(self, x):
        return x


class Flatten(Module):
    """Merge dims ``start_dim..end_dim``: (N, C, H, W) -> (N, C*H*W) by default."""

    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x):
        return F.flatten(x, self.start_dim, self.end_dim)

    def extra_repr(self):
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class AvgPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding

    def forward(self, x):
        return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class Upsample(Module):
    """Nearest-neighbour up-sampling by an integer ``scale_factor`` (the only mode supported)."""

    def __init__(self, scale_factor=2, mode="nearest"):
        super().__init__()
        if mode != "nearest":
            raise ValueError(f"Upsample: mode {mode!r} is not supported; accepted: 'nearest'")
        self.scale_factor, self.mode = scale_factor, mode

    def forward(self, x):
        return F.upsample_nearest2d(x, self.scale_factor)

    def extra_repr(self):
        return f"scale_factor={self.scale_factor}, mode={self.mode!r}"


class Dropout(Module):
    """Zeroes each element with probability ``p`` in training mode (scaling the rest by 1/(1-p))."""

    def __init__(self, p=0.5, rng=None):
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"Dropout: p must be in [0, 1), got {p}")
        self.p, self.rng = p, rng

    def forward(self, x):
        return F.dropout(x, self.p, training=self.training, rng=self.rng)

    def extra_repr(self):
        return f"p={self.p}"
