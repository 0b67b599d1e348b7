"""The switches of gpgan's optional CPU accelerators: the Numba kernels and oneDNN.

The Numba kernels (:mod:`gpgan.kernels.cpu.numba_kernels`: a convolution's col2im and padded
im2col, the ReLU family's passes, batch norm's row passes) are used when Numba can be imported
(``pip install 'gpgan[cpu]'``) unless ``GPGAN_NUMBA=0`` or :func:`set_compiled_kernels` says
otherwise. Results are identical either way: each compiled kernel adds the same terms in the same
order as the NumPy code it replaces, and the tests compare the two bit for bit.

oneDNN's convolutions and products (:mod:`gpgan.kernels.cpu.onednn`) have a switch of the same
kind, :data:`onednn_switch` (``GPGAN_ONEDNN``), on where ``onednn-cpu-gomp`` is installed; its
results agree with gpgan's own kernels to float32 rounding.

This module imports only the standard library: :func:`gpgan.kernels.process.configure_process`
reads the oneDNN switch before NumPy is loaded.
"""
import importlib.metadata
import importlib.util
import os
import threading

__all__ = ["COMPILED_ENV", "ONEDNN_ENV", "ONEDNN_DISTRIBUTION", "OptionalLibrary", "numba_switch", "onednn_switch",
           "compiled_kernels_enabled", "compiled_kernels_version", "set_compiled_kernels",
           "onednn_enabled", "onednn_version", "set_onednn"]

COMPILED_ENV = "GPGAN_NUMBA"
ONEDNN_ENV = "GPGAN_ONEDNN"
ONEDNN_DISTRIBUTION = "onednn-cpu-gomp"


class OptionalLibrary:
    """On/off switch of an optional accelerator library.

    On by default where the library is installed; ``env=0`` in the environment, or :meth:`set`,
    turns it off, ``env=1`` asks for it where installed. ``installed()`` and ``version()`` are
    callables that say whether the library is there and which version it is. Functions registered
    with :meth:`on_change` run after every :meth:`set` and :meth:`disable_after_failure` (the
    dispatch forgets the kernel choices it made under the old setting).
    """

    def __init__(self, env, what, installed, version, install_hint, setter):
        self.env, self.what, self.install_hint, self.setter = env, what, install_hint, setter
        self._installed, self._version = installed, version
        self._lock = threading.Lock()
        self._enabled = None
        self._listeners = []

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
        self._changed()

    def disable_after_failure(self):
        """Turn the library off for this process (it failed to load or compile)."""
        with self._lock:
            self._enabled = False
        self._changed()

    def on_change(self, fn):
        """Call ``fn()`` after each change of this switch."""
        self._listeners.append(fn)

    def _changed(self):
        for fn in self._listeners:
            fn()


numba_switch = OptionalLibrary(COMPILED_ENV, "Numba kernels", lambda: importlib.util.find_spec("numba") is not None,
                               lambda: importlib.metadata.version("numba"), "pip install 'gpgan[cpu]', or numba",
                               "set_compiled_kernels")


def _distribution_installed(name):
    try:
        importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


onednn_switch = OptionalLibrary(ONEDNN_ENV, "oneDNN convolutions and products",
                                lambda: _distribution_installed(ONEDNN_DISTRIBUTION),
                                lambda: importlib.metadata.version(ONEDNN_DISTRIBUTION),
                                f"pip install 'gpgan[cpu]', or {ONEDNN_DISTRIBUTION}", "set_onednn")


def compiled_kernels_enabled():
    """True when the CPU passes use the Numba kernels (Numba installed, not switched off)."""
    return numba_switch.enabled()


def compiled_kernels_version():
    """Numba's version while the kernels are on (what a run records), else None (NumPy only)."""
    return numba_switch.version()


def set_compiled_kernels(enabled):
    """Use the Numba kernels (``True``; needs Numba) or the NumPy code only (``False``)."""
    numba_switch.set(enabled)


def disable_after_failure():
    """Turn the Numba kernels off for this process (Numba failed to import or compile)."""
    numba_switch.disable_after_failure()


def onednn_enabled():
    """True when float32 NumPy convolutions and large products run on oneDNN (installed, not
    switched off)."""
    return onednn_switch.enabled()


def onednn_version():
    """The ``onednn-cpu-gomp`` version while oneDNN is used (what a run records), else None."""
    return onednn_switch.version()


def set_onednn(enabled):
    """Use oneDNN's convolutions and products (``True``; needs ``onednn-cpu-gomp``) or gpgan's own
    convolutions and NumPy's products (``False``)."""
    onednn_switch.set(enabled)
