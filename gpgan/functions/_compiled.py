"""The Numba kernels, when this array should use them (see :mod:`gpgan.backend.compiled`)."""
import warnings

from gpgan.backend import compiled

_FLOATS = ("float32", "float64")
_kernels = None


def cpu_kernels(xp, dtype):
    """The module of Numba kernels (``gpgan.functions._numba_kernels``) for NumPy arrays of
    ``dtype`` float32 or float64 while the kernels are enabled; None otherwise (NumPy code runs).

    A failing Numba import (for example a NumPy too new for the installed Numba) turns the kernels
    off for the process with one warning.
    """
    global _kernels
    if xp.__name__ != "numpy" or str(dtype) not in _FLOATS or not compiled.compiled_kernels_enabled():
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
    return _kernels
