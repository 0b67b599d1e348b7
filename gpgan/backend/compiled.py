"""The switches of gpgan's optional CPU accelerators: Numba kernels and oneDNN (convolutions, products).

A few NumPy passes of a convolution cannot be written as one NumPy call without moving the data
several times: col2im (zeroing the output, then one strided read-modify-write per kernel tap) and
im2col of a padded input (a padded copy, then the window copy). Numba compiles them as one loop
that reads each input once and writes each output once; on the 2-core Xeon of the README's
benchmarks that took the DCGAN generator step's col2im from about 20 ms to 2. The kernels are in
:mod:`gpgan.functions._numba_kernels`, with one more in :mod:`gpgan.backend.onednn` (the call
into oneDNN's products, compiled so that it skips ctypes); this module only owns the switch.

They are used when Numba can be imported (``pip install 'gpgan[cpu]'``) unless
``GPGAN_NUMBA=0`` or :func:`set_compiled_kernels` says otherwise. Results are identical either
way: each compiled kernel adds the same terms in the same order as the NumPy code it replaces,
and the tests compare the two bit for bit.

oneDNN's convolutions and products (:mod:`gpgan.backend.onednn`) have a switch of the same kind here,
:data:`onednn` (``GPGAN_ONEDNN``), on where ``onednn-cpu-gomp`` is installed. Both switches live in
this module, which imports only the standard library, because :mod:`gpgan.backend.blas_idle`
must read the oneDNN one before NumPy is loaded.
"""
import importlib.metadata
import importlib.util
import os
import threading

__all__ = ["COMPILED_ENV", "ONEDNN_ENV", "ONEDNN_DISTRIBUTION", "OptionalLibrary", "onednn",
           "compiled_kernels_enabled", "compiled_kernels_version", "set_compiled_kernels"]

COMPILED_ENV = "GPGAN_NUMBA"
ONEDNN_ENV = "GPGAN_ONEDNN"
ONEDNN_DISTRIBUTION = "onednn-cpu-gomp"


class OptionalLibrary:
    """On/off switch of an optional accelerator library.

    On by default where the library is installed; ``env=0`` in the environment, or :meth:`set`,
    turns it off, ``env=1`` asks for it where installed. ``installed()`` and ``version()`` are
    callables that say whether the library is there and which version it is.
    """

    def __init__(self, env, what, installed, version, install_hint, setter):
        self.env, self.what, self.install_hint, self.setter = env, what, install_hint, setter
        self._installed, self._version = installed, version
        self._lock = threading.Lock()
        self._enabled = None

    def _default(self):
        env = os.environ.get(self.env, "").strip()
        if env not in ("", "0", "1"):
            raise ValueError(f"{self.env} must be 0 (without {self.what}) or 1 ({self.what} where "
                             f"installed), got {env!r}")
        return env != "0" and self._installed()

    def enabled(self):
        """True while the library is used (installed, not switched off, not failed)."""
        if self._enabled is None:
            with self._lock:
                if self._enabled is None:
                    self._enabled = self._default()
        return self._enabled

    def version(self):
        """The library's version while it is used (what a run records), else None."""
        if not self.enabled():
            return None
        try:
            return self._version()
        except importlib.metadata.PackageNotFoundError:
            return None

    def set(self, enabled):
        """Use the library (``True``; needs it installed) or not (``False``)."""
        if not isinstance(enabled, bool):
            raise ValueError(f"{self.setter}: enabled must be True or False, got {enabled!r}")
        if enabled and not self._installed():
            raise ValueError(f"{self.setter}(True): {self.what} are not installed ({self.install_hint})")
        with self._lock:
            self._enabled = enabled

    def disable_after_failure(self):
        """Turn the library off for this process (it failed to load or compile)."""
        with self._lock:
            self._enabled = False


numba = OptionalLibrary(COMPILED_ENV, "Numba kernels", lambda: importlib.util.find_spec("numba") is not None,
                        lambda: importlib.metadata.version("numba"), "pip install 'gpgan[cpu]', or numba",
                        "set_compiled_kernels")


def _distribution_installed(name):
    try:
        importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


onednn = OptionalLibrary(ONEDNN_ENV, "oneDNN convolutions and products",
                         lambda: _distribution_installed(ONEDNN_DISTRIBUTION),
                         lambda: importlib.metadata.version(ONEDNN_DISTRIBUTION),
                         f"pip install 'gpgan[cpu]', or {ONEDNN_DISTRIBUTION}", "set_onednn")


def compiled_kernels_enabled():
    """True when the CPU passes use the Numba kernels (Numba installed, not switched off)."""
    return numba.enabled()


def compiled_kernels_version():
    """Numba's version while the kernels are on (what a run records), else None (NumPy only)."""
    return numba.version()


def set_compiled_kernels(enabled):
    """Use the Numba kernels (``True``; needs Numba) or the NumPy code only (``False``)."""
    numba.set(enabled)


def disable_after_failure():
    """Turn the Numba kernels off for this process (Numba failed to import or compile)."""
    numba.disable_after_failure()
