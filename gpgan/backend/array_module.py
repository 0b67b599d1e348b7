"""One lookup that picks the array module (``numpy`` or ``cupy``) for arrays.

CuPy is optional. It is imported only by :func:`to_device` when ``"cuda"`` is asked for; until
then no CuPy array can exist, so :func:`get_array_module` checks ``sys.modules`` and never pays
for an import.
"""
import os
import platform
import sys

import numpy

from gpgan.backend import compiled, onednn

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
    cupy = _loaded_cupy()
    if cupy is not None:
        for a in arrays:
            if isinstance(a, cupy.ndarray):
                return cupy
    return numpy


def matmul(a, b):
    """``a @ b`` of two arrays on one device: NumPy's ``matmul`` on the CPU, or oneDNN's for large
    2-D float32 products where it is enabled (:mod:`gpgan.backend.onednn`); on CUDA cuBLAS called
    directly (:mod:`gpgan.backend.cublas`), so that a step with products can be captured as a CUDA
    graph."""
    if get_array_module(a, b) is numpy:
        c = fused_affine(a, b)  # oneDNN, where it takes the product
        return numpy.matmul(_blas_operand(a), _blas_operand(b)) if c is None else c
    from gpgan.backend.cublas import matmul as cublas_matmul

    return cublas_matmul(a, b)


def _blas_operand(x):
    """``x`` as NumPy's matmul can hand it to BLAS: a broadcast operand (a zero stride, as the
    gradient of a sum is) made contiguous. NumPy runs its own loop for one, not BLAS: 128 us for
    (1, 256) @ (256, 512) inside the toy MLP's step, against 22 with a contiguous copy."""
    return numpy.ascontiguousarray(x) if 0 in x.strides and x.size > 1 else x


def fused_affine(a, b, bias=None, negative_slope=None, addend=None):
    """``a @ b + bias``, rectified when ``negative_slope`` is given (``x`` where ``x > 0``, else
    ``negative_slope * x``), then plus ``addend``, in one library call, for 2-D float32 NumPy
    products large enough for oneDNN (:func:`gpgan.backend.onednn.matmul`); None for everything
    else (the caller adds the bias, rectifies and adds). ``a`` (M, K), ``b`` (K, N), ``bias`` (N,)
    or None, ``addend`` (M, N) C-contiguous or None -> a new (M, N) array. The one test of which
    products oneDNN takes: :func:`matmul` asks it too."""
    if (isinstance(a, numpy.ndarray) and isinstance(b, numpy.ndarray) and a.ndim == 2 and b.ndim == 2
            and a.dtype == b.dtype == numpy.float32 and compiled.onednn.enabled()):
        return onednn.matmul(a, b, bias, negative_slope, addend)
    return None


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
    cupy = _loaded_cupy()
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
