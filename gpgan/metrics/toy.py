"""Mode-coverage metrics for 2-D Gaussian mixtures, as defined by VEEGAN (Srivastava et al. 2017)
and PacGAN (Lin et al. 2018).

* A generated sample is *high quality* when it lies within 3 standard deviations of its nearest
  mode (Euclidean distance ``<= 3 * std``).
* A mode is *captured* when it is the nearest mode of at least one high-quality sample.
* *Reverse KL* is ``KL(p_gen || uniform) = sum_k p_k log(K p_k)`` with ``p`` the histogram of the
  high-quality samples' nearest modes. Empty modes contribute ``0 log 0 = 0`` (the exact limit),
  so no epsilon is needed; PacGAN's code instead adds a tiny epsilon to every bin, which changes
  the value by a negligible amount unless no sample is of high quality. When no sample is of high
  quality the histogram does not exist and we return ``inf``.

The published numbers use 2,500 generated samples (:data:`DEFAULT_NUM_SAMPLES`).
"""
import math

import numpy

DEFAULT_NUM_SAMPLES = 2500


def _to_numpy(x):
    data = getattr(x, "data", x)  # a Variable's array
    if hasattr(data, "get") and not isinstance(data, numpy.ndarray):  # a CuPy array
        data = data.get()
    return numpy.asarray(data, dtype=numpy.float64)


def nearest_modes(samples, means):
    """``(index, distance)``: each sample's nearest mode (n,) and its Euclidean distance (n,)."""
    samples, means = _to_numpy(samples), _to_numpy(means)
    # |x - m|^2 for every (sample, mode) pair at once: (n, K).
    d2 = ((samples[:, None, :] - means[None, :, :]) ** 2).sum(axis=2)
    index = d2.argmin(axis=1)
    return index, numpy.sqrt(d2[numpy.arange(len(samples)), index])


def mode_metrics(samples, means, std):
    """VEEGAN/PacGAN mode metrics of ``samples`` (n, 2) against modes ``means`` (K, 2) of
    standard deviation ``std``.

    Returns ``{"modes": int, "high_quality": fraction in [0, 1], "reverse_kl": float}``.
    """
    samples, means = _to_numpy(samples), _to_numpy(means)
    if samples.ndim != 2 or means.ndim != 2 or samples.shape[1] != means.shape[1]:
        raise ValueError(f"mode_metrics: samples (n, d) and means (K, d) expected, got {samples.shape} and {means.shape}")
    if len(samples) == 0:
        raise ValueError("mode_metrics: no samples given")
    k = len(means)
    index, distance = nearest_modes(samples, means)
    good = distance <= 3.0 * float(std)
    counts = numpy.bincount(index[good], minlength=k)
    n_good = int(good.sum())
    if n_good == 0:
        reverse_kl = math.inf
    else:
        p = counts[counts > 0] / n_good
        reverse_kl = float((p * numpy.log(p * k)).sum())
    return {"modes": int((counts > 0).sum()), "high_quality": n_good / len(samples), "reverse_kl": reverse_kl}
