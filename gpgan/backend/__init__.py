"""Array backends: picks NumPy or CuPy for an array, moves arrays between devices.

Owns everything device- and randomness-specific below the engine (the array module of an array,
device names and descriptions, the global random generator and ``manual_seed``, the host
allocator's policy, the threads and core share of array passes, CUDA-graph capture, and the
benchmark-only switches of the CPU speed mechanisms, :mod:`.mechanisms`: names and flags only, which
every layer may ask); it knows nothing of Variables or graphs, nor of the accelerated kernels
(:mod:`gpgan.kernels`, a layer above). Importing it changes nothing in the process.

CuPy is imported lazily, only when a user asks for ``cuda``; CPU code never imports it.
"""
from gpgan.backend.array_module import (
    DEVICES,
    check_same_device,
    cpu_model,
    cupy_available,
    device_description,
    device_of,
    constant_array,
    get_array_module,
    scalar_array,
    to_device,
)
from gpgan.backend.host_memory import keep_freed_host_memory
from gpgan.backend.random import STREAMS, get_rng, manual_seed, stream
from gpgan.backend.threads import available_cores, get_num_threads, parallel_range, set_num_threads

__all__ = [
    "DEVICES",
    "check_same_device",
    "cupy_available",
    "device_description",
    "cpu_model",
    "device_of",
    "get_array_module",
    "scalar_array",
    "constant_array",
    "to_device",
    "get_rng",
    "manual_seed",
    "STREAMS",
    "stream",
    "available_cores",
    "get_num_threads",
    "set_num_threads",
    "parallel_range",
    "keep_freed_host_memory",
]
