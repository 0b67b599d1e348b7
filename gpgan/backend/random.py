"""gpgan's global random generator, used by initializers and dropout when no generator is given.

Random numbers are always drawn on the CPU with NumPy's PCG64 and copied to the device, so a seed
gives the same numbers on every device.
"""
import numpy

_rng = numpy.random.default_rng(0)


def manual_seed(seed):
    """Reseed the global generator; returns it."""
    global _rng
    _rng = numpy.random.default_rng(seed)
    return _rng


def get_rng(rng=None):
    """``rng`` if given, else the global generator."""
    return _rng if rng is None else rng
