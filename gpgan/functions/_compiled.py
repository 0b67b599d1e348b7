"""The optional CPU accelerators, when an array should use them: the Numba kernels (switched by
:mod:`gpgan.backend.compiled`) and oneDNN's convolutions (:mod:`gpgan.backend.onednn`)."""
import warnings

import numpy

from gpgan.backend import compiled, get_num_threads, onednn

# Dtype objects, not names: ``str(dtype)`` cost 2.4 us a call (8 inside a step), on every pass.
_FLOATS = (numpy.dtype(numpy.float32), numpy.dtype(numpy.float64))
_kernels = None


def cpu_kernels(xp, dtype):
    """The module of Numba kernels (``gpgan.functions._numba_kernels``) for NumPy arrays of
    ``dtype`` float32 or float64 while the kernels are enabled; None otherwise (NumPy code runs).

    A failing Numba import (for example a NumPy too new for the installed Numba) turns the kernels
    off for the process with one warning.
    """
    global _kernels
    if xp.__name__ != "numpy" or dtype not in _FLOATS or not compiled.compiled_kernels_enabled():
        return None
    if _kernels is None:
        try:
            from gpgan.functions import _numba_kernels
        except Exception as exc:  # any import failure: the NumPy path is always there
            compiled.disable_after_failure()
            warnings.warn(f"gpgan: Numba kernels unavailable ({type(exc).__name__}: {exc}); "
                          "using NumPy only", RuntimeWarning, stacklevel=3)
            return None
        _kernels = _numba_kernels
    _kernels.use_threads(get_num_threads())
    return _kernels


def onednn_convolutions(xp, *arrays, groups=1):
    """:mod:`gpgan.backend.onednn` for an ungrouped convolution of float32 NumPy ``arrays`` while
    oneDNN is enabled; None otherwise (gpgan's own kernels run)."""
    if (xp.__name__ != "numpy" or groups != 1 or any(a.dtype != _FLOATS[0] for a in arrays)
            or not onednn.onednn_enabled()):
        return None
    return onednn
