"""One lookup that picks the array module (``numpy`` or ``cupy``) for arrays.

CuPy is optional. It is imported only by :func:`to_device` when ``"cuda"`` is asked for; until
then no CuPy array can exist, so :func:`get_array_module` checks ``sys.modules`` and never pays
for an import.
"""
import os
import platform
import sys

import numpy

DEVICES = ("cpu", "cuda")


def _loaded_cupy():
    """The cupy module if it has been imported already, else None (never imports it)."""
    return sys.modules.get("cupy")


def cupy_available():
    """True when CuPy imports and sees at least one CUDA device."""
    try:
        import cupy
    except Exception:
        return False
    try:
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def _import_cupy():
    try:
        import cupy
    except Exception as exc:  # ImportError, or a broken CUDA install
        raise RuntimeError(
            f"device 'cuda' needs CuPy, which could not be imported ({exc}). Install it with `pip install -e '.[cuda]'` "
            "(or the cupy-cudaXXx wheel matching your CUDA), or use device 'cpu'."
        ) from exc
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        raise RuntimeError(f"device 'cuda' asked for, but CuPy sees no CUDA device: {exc}") from exc
    if count == 0:
        raise RuntimeError("device 'cuda' asked for, but CuPy sees no CUDA device")
    return cupy


def get_array_module(*arrays):
    """``cupy`` if any of ``arrays`` is a CuPy array, else ``numpy``."""
    cupy = sys.modules.get("cupy")  # _loaded_cupy's test, inline: asked for every operation
    if cupy is not None:
        for a in arrays:
            if isinstance(a, cupy.ndarray):
                return cupy
    return numpy


def scalar_array(xp, value, dtype=None):
    """A 0-d array of ``xp`` holding the host number ``value`` (in ``dtype``; None: NumPy's
    choice). On CUDA it is made by a fill kernel that takes the value as an argument, not by a copy
    from the host: a copy inside a step captured as a CUDA graph would be recorded with a pointer
    into a host buffer that is reused afterwards."""
    if xp is numpy:
        return numpy.asarray(value, dtype=dtype)
    dtype = numpy.asarray(value).dtype if dtype is None else numpy.dtype(dtype)
    return xp.full((), value, dtype=dtype)


_constants = {}


def constant_array(xp, host, dtype):
    """The host array ``host`` as an array of ``xp`` in ``dtype``. On CUDA the copy is made once per
    values, dtype and GPU and kept, so a step captured as a CUDA graph reads a fixed device array
    (see :func:`scalar_array`)."""
    if xp is numpy:
        return numpy.asarray(host, dtype=dtype)
    host = numpy.ascontiguousarray(host, dtype=dtype)
    key = (host.shape, host.dtype.str, host.tobytes(), xp.cuda.Device().id)
    array = _constants.get(key)
    if array is None:
        array = _constants[key] = xp.asarray(host)
    return array


def device_of(array):
    """``"cuda"`` for a CuPy array, ``"cpu"`` otherwise."""
    cupy = sys.modules.get("cupy")  # as in get_array_module
    if cupy is not None and isinstance(array, cupy.ndarray):
        return "cuda"
    return "cpu"


def check_same_device(op_name, arrays):
    """Raise a clear error when ``arrays`` live on different devices."""
    cupy = _loaded_cupy()
    if cupy is None:
        return
    devices = {("cuda" if isinstance(a, cupy.ndarray) else "cpu") for a in arrays}
    if len(devices) > 1:
        kinds = ", ".join(device_of(a) for a in arrays)
        raise RuntimeError(
            f"{op_name}: inputs are on different devices ({kinds}); move them to one device "
            "with .to('cpu') or .to('cuda') first"
        )


def to_device(array, device):
    """Copy ``array`` to ``device`` (``"cpu"`` or ``"cuda"``); returns it unchanged if it is there."""
    if device not in DEVICES:
        raise ValueError(f"unknown device {device!r}; accepted: {', '.join(DEVICES)}")
    if device == "cpu":
        cupy = _loaded_cupy()
        if cupy is not None and isinstance(array, cupy.ndarray):
            return cupy.asnumpy(array)
        return numpy.asarray(array)
    cupy = _import_cupy()
    return cupy.asarray(array)


def cpu_model():
    """The CPU's model name (``/proc/cpuinfo``'s, else the platform's), for manifests: BLAS and
    oneDNN pick their kernels per CPU, so float32 results agree across CPUs only to rounding."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_description(device):
    """What ``device`` is, in words, for manifests and benchmarks: the CPU model and core count,
    or the current CUDA GPU's name, memory and the CUDA runtime version (CuPy is only asked when
    ``device`` is ``"cuda"``; an unreadable GPU is described as unknown, never an error)."""
    if device != "cuda":
        return f"{cpu_model()}, {os.cpu_count()} logical cores"
    try:
        import cupy

        dev = cupy.cuda.Device()
        props = cupy.cuda.runtime.getDeviceProperties(dev.id)
        name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        memory = props["totalGlobalMem"] / 2 ** 30
        return f"{name} ({memory:.0f} GiB), CUDA runtime {cupy.cuda.runtime.runtimeGetVersion()}"
    except Exception as exc:  # describing a device must not fail a run
        return f"cuda (unknown GPU: {type(exc).__name__})"
