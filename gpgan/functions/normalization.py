"""Normalization: batch_norm and layer_norm (torch semantics).

Both normalize with the batch (or layer) statistics through one node, :class:`Normalize`:
``y = (x - mean) / sqrt(var + eps) * weight + bias`` over a set of axes, with the biased variance.
Its forward is a few fused passes over ``x``. Its backward has two forms:

* when no graph is recorded (``create_graph=False``, a first-order step), the closed-form
  gradients computed on raw arrays in a few passes;
* when a graph is recorded (a gradient penalty through a normalized critic), the same formulas
  written with differentiable functions (mean, mul, sub, pow), so the engine differentiates them
  again, to any order.

Eval-mode batch norm (fixed running statistics) is an affine map composed from mul and sub.
"""

from gpgan.autograd import FunctionNode, Variable, is_grad_enabled
from gpgan import kernels
from gpgan.backend import get_array_module
from gpgan.functions._args import array_of, constant
from gpgan.functions.array import reshape
from gpgan.functions.reduction import mean, sum as _sum


__all__ = ['batch_norm', 'layer_norm']


def _count(shape, axes):
    n = 1
    for a in axes:
        n *= shape[a]
    return n


def _channel_rows(a):
    """The (M, C) pixel rows of an (N, C, ...) array, on which batch norm works: a view when the
    channel axis is last and contiguous in memory (channels-last, or a C-contiguous (N, C)).

    Otherwise a channels-last copy: the row passes then sum the same numbers in the same order
    whatever the input's layout (the NumPy col2im returns a cropped view where the compiled one
    returns a contiguous array, and both must give the same bits), and one copy costs less than
    the general path's passes over the whole array (on CUDA too, where the general path's
    per-channel sums ran on a few multiprocessors: :mod:`gpgan.kernels.reductions`).
    """
    moved = a if a.ndim == 2 else a.transpose((0,) + tuple(range(2, a.ndim)) + (1,))
    if not moved.flags.c_contiguous:
        moved = get_array_module(a).ascontiguousarray(moved)
    return moved.reshape(-1, a.shape[1])


def _from_rows(rows, like):
    """``rows`` (M, C) as an array shaped like ``like`` (N, C, ...), channels-last in memory."""
    if like.ndim == 2:
        return rows
    moved = rows.reshape((like.shape[0],) + like.shape[2:] + (like.shape[1],))
    return moved.transpose((0, like.ndim - 1) + tuple(range(1, like.ndim - 1)))


def _row_passes(xp, fn, rows, nbytes):
    """Run ``fn(start, stop) -> tuple of per-channel partial sums`` on fixed blocks of rows
    (:func:`gpgan.kernels.row_blocks`; the blocks split over the cores for NumPy) and return
    the partials summed in block order."""
    blocks = kernels.row_blocks(xp, rows)
    bounds = [rows * k // blocks for k in range(blocks + 1)]
    parts = [None] * blocks

    def run(first, last):
        for k in range(first, last):
            parts[k] = fn(bounds[k], bounds[k + 1])

    kernels.over_batch(xp, run, blocks, nbytes)
    total = list(parts[0])
    for part in parts[1:]:
        for k, v in enumerate(part):
            total[k] = total[k] + v
    return total


class Normalize(FunctionNode):
    """``(x - mean) / sqrt(var + eps) [* weight] [+ bias]``, statistics over ``axes``.

    Inputs ``(x, [weight], [bias])`` as flagged. ``weight`` and ``bias`` (both of shape
    ``own_shape``) are reshaped to ``param_shape`` (broadcastable to ``x``) and their gradients
    summed over ``param_axes``. After the forward, ``self.mean`` and ``self.var`` hold the
    statistics (raw arrays, kept dims).
    """

    def __init__(self, axes, eps, has_weight, has_bias, own_shape, param_shape, param_axes):
        self.axes, self.eps = axes, eps
        self.has_weight, self.has_bias = has_weight, has_bias
        self.own_shape, self.param_shape, self.param_axes = own_shape, param_shape, param_axes

    def _params(self, inputs):
        k = 1
        w = b = None
        if self.has_weight:
            w, k = inputs[k], k + 1
        if self.has_bias:
            b = inputs[k]
        return w, b

    def forward(self, inputs):
        x = inputs[0]
        w, b = self._params(inputs)
        xp = get_array_module(x)
        self.retain_inputs(tuple(range(len(inputs))))
        if self._per_channel(x):
            return (self._forward_rows(xp, x, _channel_rows(x), w, b),)
        mu = x.mean(axis=self.axes, keepdims=True)
        xc = x - mu
        y = xp.square(xc)  # the output's buffer, first holding the squares
        var = y.mean(axis=self.axes, keepdims=True)
        inv = 1 / xp.sqrt(var + x.dtype.type(self.eps))
        self.mean, self.var, self.inv = mu, var, inv
        scale = inv if w is None else inv * w.reshape(self.param_shape)
        xp.multiply(xc, scale, out=y)
        if b is not None:
            y += b.reshape(self.param_shape)
        return (y,)

    def _per_channel(self, x):
        """Batch norm's case: statistics over every axis but the channel axis 1 (a 1-D ``x`` has
        none: its statistics over axis 0 are layer norm's)."""
        return x.ndim >= 2 and self.axes == (0,) + tuple(range(2, x.ndim))

    def _forward_rows(self, xp, x, x2, w, b):
        """Batch norm on the (M, C) pixel rows of a channels-last ``x``: three passes over row
        chunks split over the cores (sum; centre and sum of squares; scale and shift), or the two
        of :func:`gpgan.kernels.batch_norm_rows` where it takes the rows."""
        M, C = x2.shape
        compiled = kernels.batch_norm_rows(xp, x2, w, b, self.eps)
        if compiled is not None:
            y2, *stats = compiled
            self.mean, self.var, self.inv = (v.reshape(self.param_shape) for v in stats)
            return _from_rows(y2, x)
        y2 = xp.empty_like(x2)
        mu = _row_passes(xp, lambda a, c: (kernels.column_sums(xp, x2[a:c]),), M, x2.nbytes)[0] / x.dtype.type(M)

        def centre(a, c):
            xc = xp.subtract(x2[a:c], mu, out=y2[a:c])
            return (kernels.column_dots(xp, xc, xc),)

        var = _row_passes(xp, centre, M, x2.nbytes)[0] / x.dtype.type(M)
        inv = 1 / xp.sqrt(var + x.dtype.type(self.eps))
        scale = inv if w is None else inv * w.reshape(C)

        def affine(a, c):
            y2[a:c] *= scale
            if b is not None:
                y2[a:c] += b.reshape(C)
            return ()

        _row_passes(xp, affine, M, x2.nbytes)
        self.mean, self.var, self.inv = (v.reshape(self.param_shape) for v in (mu, var, inv))
        return _from_rows(y2, x)

    def backward(self, indexes, grad_outputs):
        gy, = grad_outputs
        retained = self.get_retained_inputs()
        x = retained[0]
        w, b = self._params(retained)
        if is_grad_enabled():
            grads = self._recorded_gradients(x, w, gy)
        else:
            grads = [Variable._from_node(g, None) for g in
                     self._raw_gradients(x.data, None if w is None else w.data, gy.data)]
        return tuple(grads[i] for i in indexes)

    def _raw_gradients(self, x, w, gy):
        """The closed form on arrays: ``gx = inv * (g - mean(g) - xhat * mean(g * xhat))`` with
        ``g = gy * weight`` (means over the statistics' axes), ``gweight = sum(gy * xhat)``,
        ``gbias = sum(gy)`` (sums over ``param_axes``)."""
        if self._per_channel(x):
            return self._raw_gradients_rows(get_array_module(x), x, _channel_rows(x), w, _channel_rows(gy))
        xhat = x - self.mean
        xhat *= self.inv
        n = x.dtype.type(1.0 / _count(x.shape, self.axes))
        out = [None]
        wb = w.reshape(self.param_shape) if w is not None else None
        g = gy if wb is None else gy * wb
        g_mean = g.sum(axis=self.axes, keepdims=True) * n
        gx_mean = (g * xhat).sum(axis=self.axes, keepdims=True) * n
        gx = g - g_mean
        gx -= xhat * gx_mean
        gx *= self.inv
        out[0] = gx
        if self.has_weight:
            out.append((gy * xhat).sum(axis=self.param_axes).reshape(self.own_shape))
        if self.has_bias:
            out.append(gy.sum(axis=self.param_axes).reshape(self.own_shape))
        return out

    def _raw_gradients_rows(self, xp, x, x2, w, gy2):
        """Batch norm's closed form on (M, C) pixel rows, in two passes over row chunks split over
        the cores: the sums of gy and gy * xhat, then ``gx = coef * gy - k1 * x + k0`` with
        per-channel coefficients (``xhat = (x - mean) * inv`` folded in); or the two of
        :func:`gpgan.kernels.batch_norm_rows_gradients` where it takes the rows."""
        compiled = kernels.batch_norm_rows_gradients(xp, x2, gy2, self.mean, self.inv, w)
        if compiled is not None:
            gx2, gx_sum, g_sum = compiled
        else:
            gx2, gx_sum, g_sum = self._raw_gradients_rows_portable(xp, x, x2, w, gy2)
        out = [_from_rows(gx2, x)]
        if self.has_weight:
            out.append(gx_sum.reshape(self.own_shape))
        if self.has_bias:
            out.append(g_sum.reshape(self.own_shape))
        return out

    def _raw_gradients_rows_portable(self, xp, x, x2, w, gy2):
        """The NumPy / CuPy form of :meth:`_raw_gradients_rows`: ``(gx2, gw, gb)``."""
        M, C = x2.shape
        mu, inv = self.mean.reshape(C), self.inv.reshape(C)
        gx2 = xp.empty_like(x2)

        def sums(a, c):
            xhat = xp.subtract(x2[a:c], mu, out=gx2[a:c])
            xhat *= inv
            return kernels.column_sums(xp, gy2[a:c]), kernels.column_dots(xp, gy2[a:c], xhat)

        g_sum, gx_sum = _row_passes(xp, sums, M, x2.nbytes + gy2.nbytes)
        n = x.dtype.type(1.0 / M)
        coef = inv if w is None else inv * w.reshape(C)
        k1 = coef * gx_sum * n * inv
        k0 = k1 * mu - coef * g_sum * n

        def combine(a, c):
            out = gx2[a:c]
            xp.multiply(x2[a:c], k1, out=out)
            xp.subtract(k0, out, out=out)
            out += gy2[a:c] * coef
            return ()

        _row_passes(xp, combine, M, x2.nbytes + gy2.nbytes)
        return gx2, gx_sum, g_sum

    def _recorded_gradients(self, x, w, gy):
        """The same formulas with differentiable functions: recorded, differentiable again."""
        xhat, inv = _standardize(x, self.axes, self.eps)
        g = gy if w is None else gy * reshape(w, self.param_shape)
        gx = (g - mean(g, self.axes, keepdims=True) - xhat * mean(g * xhat, self.axes, keepdims=True)) * inv
        out = [gx]
        if self.has_weight:
            out.append(reshape(_sum(gy * xhat, self.param_axes), self.own_shape))
        if self.has_bias:
            out.append(reshape(_sum(gy, self.param_axes), self.own_shape))
        return out


def _standardize(x, axes, eps):
    """``(x - mean) * inv`` and ``inv = (var + eps) ** -0.5`` over ``axes``, with differentiable
    functions."""
    xc = x - mean(x, axes, keepdims=True)
    inv = (mean(xc * xc, axes, keepdims=True) + eps) ** -0.5
    return xc * inv, inv


def _normalize(x, axes, eps, weight, bias, own_shape, param_shape, param_axes):
    """Apply :class:`Normalize`; returns the output Variable and the node (for its statistics)."""
    inputs = [x] + [v for v in (weight, bias) if v is not None]
    node = Normalize(axes, eps, weight is not None, bias is not None, own_shape, param_shape, param_axes)
    return node.apply(tuple(inputs))[0], node


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
        y, node = _normalize(x, axes, eps, weight, bias, (C,), stat_shape, axes)
        if running_mean is not None:
            running_mean *= 1.0 - momentum
            running_mean += momentum * node.mean.reshape(C).astype(running_mean.dtype, copy=False)
        if running_var is not None:
            unbiased = node.var.reshape(C) * (count / (count - 1))
            running_var *= 1.0 - momentum
            running_var += momentum * unbiased.astype(running_var.dtype, copy=False)
        return y
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
    y, _ = _normalize(x, axes, eps, weight, bias, shape, shape, tuple(range(len(x.shape) - k)))
    return y
