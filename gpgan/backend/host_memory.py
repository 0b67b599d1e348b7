"""Host memory that a training process frees is kept for its next step (glibc malloc).

A CPU step allocates and frees the same large arrays (im2col columns, activations, gradients)
every step. By default glibc hands large freed blocks back to the operating system (``munmap`` of
blocks above its mmap threshold, trimming of the heap's free top), so the next step's arrays are
fresh pages and every first touch is a page fault in which the kernel zeroes memory: system
time on every step, a noticeable part of a convolutional network's CPU step (measured:
docs/benchmarks.md, "Kept host memory").

:func:`keep_freed_host_memory` raises glibc's thresholds (``mallopt``) so that blocks of up to
32 MiB (the largest mmap threshold glibc accepts) come from the heap and freed heap memory stays
in the process: after the first steps a step faults almost never. The resident set stays at its
high-water mark instead of shrinking between steps, which a training process reaches every step
anyway. Nothing changes in the numbers computed.

It acts only under glibc (Linux); elsewhere, and when ``GPGAN_KEEP_HOST_MEMORY=0``, it does
nothing and says so by returning False.
"""
import ctypes
import os
import sys

__all__ = ["keep_freed_host_memory", "MMAP_THRESHOLD", "TRIM_THRESHOLD"]

# mallopt's parameter numbers (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

#: Blocks below this many bytes come from the heap: glibc's largest accepted value on 64-bit
#: (HEAP_MAX_SIZE / 2); larger ones are mapped and unmapped as before.
MMAP_THRESHOLD = 32 << 20
#: Free memory at the heap's top is handed back only above this many bytes (mallopt takes an int).
TRIM_THRESHOLD = (1 << 31) - 1

_ENV = "GPGAN_KEEP_HOST_MEMORY"
_applied = False


def _glibc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)  # the symbols already loaded into this process
    except OSError:
        return None
    if not (hasattr(libc, "gnu_get_libc_version") and hasattr(libc, "mallopt")):
        return None  # not glibc (musl has no mallopt thresholds)
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.mallopt.restype = ctypes.c_int
    return libc


def keep_freed_host_memory():
    """Keep freed host memory in this process for reuse (see the module docstring).

    Idempotent; returns True when glibc's thresholds are (now or already) raised, False when this
    is not glibc or ``GPGAN_KEEP_HOST_MEMORY`` is ``0``.

    Raises:
        ValueError: ``GPGAN_KEEP_HOST_MEMORY`` is set to something other than ``0`` or ``1``.
    """
    global _applied
    env = os.environ.get(_ENV, "1").strip()
    if env not in ("0", "1"):
        raise ValueError(f"{_ENV} must be 0 (leave glibc's defaults) or 1 (keep freed memory), got {env!r}")
    if env == "0":
        return False
    if _applied:
        return True
    libc = _glibc()
    if libc is None:
        return False
    # Trim first: setting the mmap threshold alone would leave glibc's dynamic trim threshold.
    _applied = bool(libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)) and bool(
        libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    return _applied
