"""Dropout (inverted: kept values are scaled by ``1/(1-p)``, so the expectation is unchanged)."""
import numpy

from gpgan.backend import get_rng, to_device, device_of
from gpgan.functions._args import array_of, constant


__all__ = ['dropout']


def dropout(x, p=0.5, training=True, rng=None):
    """Zero each element with probability ``p`` and scale the rest by ``1/(1-p)``.

    The mask is drawn on the CPU from ``rng`` (a ``numpy.random.Generator``; the global one from
    ``gpgan.manual_seed`` when None) and moved to ``x``'s device, so a seed fixes the mask on every
    device. The backward is ``gy * mask``, a multiplication by a constant, differentiable again.

    Args:
        x: Variable of any shape.
        p: drop probability in [0, 1].
        training: when False (or ``p == 0``), ``x`` is returned unchanged.
    """
    if not isinstance(p, (int, float)) or isinstance(p, bool) or not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: p must be a probability in [0, 1], got {p!r}")
    if not training or p == 0.0:
        return x
    data = array_of(x)
    dtype = data.dtype if data.dtype.kind == "f" else numpy.dtype(numpy.float32)
    if p == 1.0:
        mask = numpy.zeros(data.shape, dtype=dtype)
    else:
        keep = get_rng(rng).random(data.shape) >= p
        mask = keep.astype(dtype) * dtype.type(1.0 / (1.0 - p))
    mask = to_device(mask, device_of(data))
    return x * constant(mask)
