"""Normalization: batch_norm and layer_norm (torch semantics).

Both are composed from differentiable functions (mean, sub, mul, pow), so their first and second
derivatives come from the engine and stay correct to any order; each costs a handful of
elementwise passes, which is cheap next to the convolutions around them.
"""
from gpgan.backend import get_array_module
from gpgan.functions._args import array_of, constant
from gpgan.functions.array import reshape
from gpgan.functions.reduction import mean


__all__ = ['batch_norm', 'layer_norm']


def _normalize(x, axes, eps):
    """``(x - mean) / sqrt(var + eps)`` over ``axes`` with the biased variance; also returns mean, var."""
    mu = mean(x, axes, keepdims=True)
    xc = x - mu
    var = mean(xc * xc, axes, keepdims=True)
    return xc * (var + eps) ** -0.5, mu, var


def batch_norm(x, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5):
    """Batch normalization, as ``torch.nn.functional.batch_norm``.

    Args:
        x: (N, C) or (N, C, H, W) (any (N, C, ...)).
        running_mean, running_var: raw arrays of shape (C,) or None. In training mode they are
            updated in place: ``r = (1 - momentum) * r + momentum * batch_stat``, with the unbiased
            batch variance for ``running_var``. In eval mode they normalize ``x``.
        weight, bias: (C,) scale and shift, or None.
        training: use the batch statistics (biased variance) over N and the spatial axes.

    Returns:
        A Variable shaped like ``x``.
    """
    fn = "batch_norm"
    if len(x.shape) < 2:
        raise ValueError(f"{fn}: x must have shape (N, C) or (N, C, ...), got {tuple(x.shape)}")
    C = x.shape[1]
    for name, v in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight),
                    ("bias", bias)):
        if v is not None and tuple(v.shape) != (C,):
            raise ValueError(f"{fn}: {name} must have shape ({C},) for x of shape {tuple(x.shape)}, "
                             f"got {tuple(v.shape)}")
    axes = (0,) + tuple(range(2, len(x.shape)))
    stat_shape = (1, C) + (1,) * (len(x.shape) - 2)
    if training:
        count = x.size // C
        if count < 2:
            raise ValueError(f"{fn}: training needs more than one value per channel, got x of shape "
                             f"{tuple(x.shape)}")
        y, mu, var = _normalize(x, axes, eps)
        if running_mean is not None:
            running_mean *= 1.0 - momentum
            running_mean += momentum * mu.data.reshape(C).astype(running_mean.dtype, copy=False)
        if running_var is not None:
            unbiased = var.data.reshape(C) * (count / (count - 1))
            running_var *= 1.0 - momentum
            running_var += momentum * unbiased.astype(running_var.dtype, copy=False)
    else:
        if running_mean is None or running_var is None:
            raise ValueError(f"{fn}: eval mode (training=False) needs running_mean and running_var")
        xd = array_of(x)
        xp = get_array_module(xd)
        rm = xp.asarray(array_of(running_mean), dtype=xd.dtype).reshape(stat_shape)
        inv = (1.0 / xp.sqrt(xp.asarray(array_of(running_var), dtype=xd.dtype) + eps)).reshape(stat_shape)
        y = (x - constant(rm)) * constant(inv)
    if weight is not None:
        y = y * reshape(weight, stat_shape)
    if bias is not None:
        y = y + reshape(bias, stat_shape)
    return y


def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Layer normalization over the trailing ``normalized_shape`` axes, as torch's ``layer_norm``.

    Args:
        x: (..., *normalized_shape).
        normalized_shape: int or tuple, the trailing shape to normalize over (biased variance).
        weight, bias: of shape ``normalized_shape`` (elementwise affine), or None.
    """
    fn = "layer_norm"
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    k = len(shape)
    if k == 0 or k > len(x.shape) or tuple(x.shape[-k:]) != shape:
        raise ValueError(f"{fn}: normalized_shape {shape} must match the trailing axes of x of shape "
                         f"{tuple(x.shape)}")
    for name, v in (("weight", weight), ("bias", bias)):
        if v is not None and tuple(v.shape) != shape:
            raise ValueError(f"{fn}: {name} must have shape {shape}, got {tuple(v.shape)}")
    axes = tuple(range(len(x.shape) - k, len(x.shape)))
    y, _, _ = _normalize(x, axes, eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y
