"""Benchmark-only switches, one per CPU speed mechanism that has no switch of its own.

Issue 39: a mechanism that gains less than about 5% on every benchmark step goes, unless it
carries correctness. To measure what each gains, ``scripts/ab_mechanisms.py`` runs
``scripts/bench_engine.py`` with the mechanism on and off; the mechanisms that have a switch of
their own (``GPGAN_NUMBA``, ``GPGAN_ONEDNN``, ``GPGAN_KEEP_HOST_MEMORY``,
``OPENBLAS_THREAD_TIMEOUT``) keep it, and the others are turned off here.

Private, for benchmarks and tests: not a config key, not part of gpgan's interface, and nothing a
user should set. ``GPGAN_BENCH_WITHOUT=name,name`` in the environment turns those mechanisms off
for the process (read once, when this module is imported); :func:`without` does it in-process (the
tests). Each site asks ``off.<name>``, one attribute read, True while the mechanism is off, and
then runs the code it would run without the mechanism. :data:`MECHANISMS` names each one, what it
does, and how close the results stay with it off: ``"bits"`` (the same bits) or ``"float32"``
(within float32 rounding: other summation orders); ``tests/test_mechanisms.py`` checks each.

This module imports only the standard library, so that every layer may ask it.
"""
import difflib
import os
from contextlib import contextmanager

__all__ = ["ENV", "MECHANISMS", "off", "parse", "set_off", "without"]

ENV = "GPGAN_BENCH_WITHOUT"

#: name -> (what the mechanism does, what runs with it off, results with it off: "bits" | "float32")
MECHANISMS = {
    "onednn_products": ("oneDNN's matmul for large 2-D float32 products (fused ones included)",
                        "NumPy's matmul (OpenBLAS)", "float32"),
    "onednn_convolutions": ("oneDNN's forward, backward-data and backward-weights convolutions",
                            "gpgan's im2col / col2im and OpenBLAS", "float32"),
    "fused_linear": ("a Linear's bias and rectifier as oneDNN post-ops of its product; small products "
                     "with a large fused output (MIN_FUSED_OUTPUT) on oneDNN too",
                     "the product, then NumPy's bias add and the rectifier's own pass", "float32"),
    "fused_addend": ("a Linear's weight gradient adds the earlier gradient as a oneDNN post-op "
                     "(backward_accumulate)", "the product, then add_arrays", "float32"),
    "product_runner": ("oneDNN's product called from Numba-compiled code (_product_runner)",
                       "the ctypes call", "bits"),
    "bound_memory": ("oneDNN's memory objects made once per operation and thread, re-pointed each call",
                     "new memory objects at every call", "bits"),
    "split_passes": ("large NumPy copies and ufunc passes split over Python threads (parallel_range)",
                     "one call on the calling thread", "bits"),
    "numba_passes": ("compiled elementwise passes (ReLU family, gradient sums, outer products) and "
                     "channel sums", "NumPy's passes (einsum / sum for the channel sums)", "float32"),
    "numba_threads": ("the compiled passes' prange loops on Numba's OpenMP threads",
                      "the same kernels on one thread (an upper bound of the gain: they replaced a "
                      "Python-thread split)", "bits"),
    "layout_copy": ("an operand in another memory layout copied into the first's, so the compiled pass runs",
                    "NumPy's strided passes", "bits"),
    "numba_batch_norm": ("batch norm's moments, affine and gradients as compiled row passes",
                         "NumPy's passes", "float32"),
    "numba_conv_copies": ("im2col with its zero padding and col2im as single compiled passes (used where "
                          "oneDNN does not run the convolution)", "NumPy's padded copy and strided passes",
                          "bits"),
    "einsum_sums": ("sums over all axes but one in one einsum pass", "NumPy's sum over the axes",
                    "float32"),
    "blas_operand": ("a broadcast (zero-stride) matmul operand made contiguous so BLAS takes it",
                     "NumPy's own matmul loop", "float32"),
}


class _Off:
    """One attribute per mechanism: True while it is off."""

    __slots__ = tuple(MECHANISMS)

    def __init__(self):
        for name in MECHANISMS:
            setattr(self, name, False)

    def names(self):
        """The mechanisms off now, in :data:`MECHANISMS`' order."""
        return [name for name in MECHANISMS if getattr(self, name)]


off = _Off()


def parse(text):
    """The mechanism names in ``text`` (comma-separated; blanks ignored), validated.

    Raises:
        ValueError: a name that is not in :data:`MECHANISMS` (naming the closest and all accepted).
    """
    names = [n.strip() for n in (text or "").split(",") if n.strip()]
    for name in names:
        if name not in MECHANISMS:
            close = difflib.get_close_matches(name, MECHANISMS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"{ENV}: unknown mechanism {name!r}{hint}; accepted: {', '.join(MECHANISMS)}")
    return names


def set_off(names):
    """Turn exactly ``names`` off (every other mechanism on)."""
    names = set(parse(",".join(names)))
    for name in MECHANISMS:
        setattr(off, name, name in names)


@contextmanager
def without(*names):
    """Turn ``names`` off inside the ``with`` block, then back to what they were."""
    before = off.names()
    set_off(set(before) | set(names))
    try:
        yield
    finally:
        set_off(before)


set_off(parse(os.environ.get(ENV, "")))
