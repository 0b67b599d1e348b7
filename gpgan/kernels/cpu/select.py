"""Which optional CPU accelerator takes an array: the Numba kernels or oneDNN (both switched by
:mod:`gpgan.kernels.switches`). The one place that imports either library's module."""
import warnings

import numpy

from gpgan.backend.mechanisms import off
from gpgan.backend.threads import get_num_threads
from gpgan.kernels import switches
from gpgan.kernels.cpu import onednn

#: The dtypes gpgan's own kernels take (the Numba kernels here, the chunked CUDA sums and CUDA
#: kernels); oneDNN takes the first. Dtype objects, not names: ``str(dtype)`` would build a string
#: on every pass, comparing the objects builds nothing.
KERNEL_FLOATS = (numpy.dtype(numpy.float32), numpy.dtype(numpy.float64))
_kernels = None


def cpu_kernels(xp, dtype):
    """The module of Numba kernels (:mod:`gpgan.kernels.cpu.numba_kernels`) for NumPy arrays of
    ``dtype`` float32 or float64 while the kernels are enabled; None otherwise (NumPy code runs).

    A failing Numba import (for example a NumPy too new for the installed Numba) turns the kernels
    off for the process with one warning.
    """
    global _kernels
    if xp.__name__ != "numpy" or dtype not in KERNEL_FLOATS or not switches.numba_switch.enabled():
        return None
    if _kernels is None:
        try:
            from gpgan.kernels.cpu import numba_kernels
        except Exception as exc:  # any import failure: the NumPy path is always there
            switches.numba_switch.disable_after_failure()
            warnings.warn(f"gpgan: Numba kernels unavailable ({type(exc).__name__}: {exc}); "
                          "using NumPy only", RuntimeWarning, stacklevel=3)
            return None
        _kernels = numba_kernels
    _kernels.use_threads(1 if off.numba_threads else get_num_threads())
    return _kernels


def onednn_convolutions(xp, *arrays):
    """:mod:`gpgan.kernels.cpu.onednn` for a convolution (of any ``groups``) of float32 NumPy
    ``arrays`` while oneDNN is enabled; None otherwise (gpgan's own kernels run)."""
    if (xp.__name__ != "numpy" or any(a.dtype != KERNEL_FLOATS[0] for a in arrays)
            or not switches.onednn_switch.enabled() or off.onednn_convolutions):
        return None
    return onednn


def onednn_products(a, b):
    """:mod:`gpgan.kernels.cpu.onednn` for a 2-D float32 product of NumPy arrays ``a @ b`` while
    oneDNN is enabled; None otherwise (NumPy's matmul runs)."""
    if (isinstance(a, numpy.ndarray) and isinstance(b, numpy.ndarray) and a.ndim == 2 and b.ndim == 2
            and a.dtype == b.dtype == KERNEL_FLOATS[0] and switches.onednn_switch.enabled() and not off.onednn_products):
        return onednn
    return None
