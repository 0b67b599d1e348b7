"""Whether gpgan's optional compiled CPU kernels (Numba) are used.

A few NumPy passes of a convolution cannot be written as one NumPy call without moving the data
several times: col2im (zeroing the output, then one strided read-modify-write per kernel tap) and
im2col of a padded input (a padded copy, then the window copy). Numba compiles them as one loop
that reads each input once and writes each output once; on the 2-core Xeon of the README's
benchmarks that took the DCGAN generator step's col2im from about 20 ms to 2. The kernels are in
:mod:`gpgan.functions._numba_kernels`; this module only owns the switch.

They are used when Numba can be imported (``pip install 'gpgan[cpu]'``) unless
``GPGAN_NUMBA=0`` or :func:`set_compiled_kernels` says otherwise. Results are identical either
way: each compiled kernel adds the same terms in the same order as the NumPy code it replaces,
and the tests compare the two bit for bit.
"""
import importlib.metadata
import importlib.util
import os
import threading

__all__ = ["COMPILED_ENV", "compiled_kernels_enabled", "compiled_kernels_version", "set_compiled_kernels"]

COMPILED_ENV = "GPGAN_NUMBA"

_lock = threading.Lock()
_enabled = None


def _default():
    env = os.environ.get(COMPILED_ENV, "").strip()
    if env not in ("", "0", "1"):
        raise ValueError(f"{COMPILED_ENV} must be 0 (NumPy only) or 1 (compiled kernels where Numba "
                         f"is installed), got {env!r}")
    return env != "0" and importlib.util.find_spec("numba") is not None


def compiled_kernels_enabled():
    """True when CPU convolutions use the Numba kernels (Numba installed, not switched off)."""
    global _enabled
    if _enabled is None:
        with _lock:
            if _enabled is None:
                _enabled = _default()
    return _enabled


def compiled_kernels_version():
    """Numba's version while the kernels are on (what a run records), else None (NumPy only)."""
    if not compiled_kernels_enabled():
        return None
    try:
        return importlib.metadata.version("numba")
    except importlib.metadata.PackageNotFoundError:
        return None


def set_compiled_kernels(enabled):
    """Use the Numba kernels (``True``; needs Numba) or the NumPy code only (``False``)."""
    global _enabled
    if not isinstance(enabled, bool):
        raise ValueError(f"set_compiled_kernels: enabled must be True or False, got {enabled!r}")
    if enabled and importlib.util.find_spec("numba") is None:
        raise ValueError("set_compiled_kernels(True): Numba is not installed "
                         "(pip install 'gpgan[cpu]', or numba)")
    with _lock:
        _enabled = enabled


def disable_after_failure():
    """Turn the kernels off for this process (Numba failed to import or compile)."""
    global _enabled
    with _lock:
        _enabled = False
