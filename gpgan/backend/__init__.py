"""Array backends: picks NumPy or CuPy for an array, moves arrays between devices.

Owns everything device- and randomness-specific below the engine (the array module of an array,
device names and descriptions, the global random generator and ``manual_seed``, the host
allocator's policy, the threads of array passes, and the optional CPU accelerators: the Numba
kernels' switch and oneDNN's convolutions);
it knows nothing of Variables or graphs.

CuPy is imported lazily, only when a user asks for ``cuda``; CPU code never imports it.
"""
# First, before anything imports NumPy: OpenBLAS reads its idle spin and thread count when it is
# loaded.
from gpgan.backend.blas_idle import BLAS_IDLES_BRIEFLY  # noqa: I001
from gpgan.backend import core_share  # noqa: F401, I001
from gpgan.backend.array_module import (
    DEVICES,
    check_same_device,
    cpu_model,
    cupy_available,
    device_description,
    device_of,
    constant_array,
    fused_affine,
    get_array_module,
    matmul,
    scalar_array,
    to_device,
)
from gpgan.backend.compiled import compiled_kernels_enabled, compiled_kernels_version, set_compiled_kernels
from gpgan.backend.host_memory import keep_freed_host_memory
from gpgan.backend.onednn import onednn_enabled, onednn_version, set_onednn
from gpgan.backend.random import get_rng, manual_seed
from gpgan.backend.threads import available_cores, get_num_threads, parallel_range, set_num_threads

__all__ = [
    "BLAS_IDLES_BRIEFLY",
    "DEVICES",
    "check_same_device",
    "cupy_available",
    "device_description",
    "cpu_model",
    "device_of",
    "fused_affine",
    "get_array_module",
    "matmul",
    "scalar_array",
    "constant_array",
    "to_device",
    "get_rng",
    "manual_seed",
    "available_cores",
    "get_num_threads",
    "set_num_threads",
    "parallel_range",
    "keep_freed_host_memory",
    "compiled_kernels_enabled",
    "compiled_kernels_version",
    "set_compiled_kernels",
    "onednn_enabled",
    "onednn_version",
    "set_onednn",
]
