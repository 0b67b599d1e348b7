"""Array passes over all the cores, with the same values as one call.

NumPy runs a ufunc on one core; a pass over a large activation split into batch slices, one per
thread (:func:`gpgan.backend.parallel_range`), runs on all of them. Where the Numba kernels run,
the elementwise passes (:func:`compiled_elementwise`, :func:`add_arrays`) and the sums over all
axes but one (:func:`channel_sum`) are single kernel calls split over Numba's threads instead.
Elementwise results do not depend on the split, and sums run over fixed blocks of rows
(:data:`ROW_BLOCKS`). CuPy arrays are never split: a GPU kernel is parallel already.
"""
import numpy

from gpgan.backend.mechanisms import off
from gpgan.backend.threads import parallel_range, would_split
from gpgan.kernels.cpu.select import cpu_kernels

__all__ = ["over_batch", "elementwise", "flat_view", "kernels_for", "compiled_elementwise", "COMPILED_MIN_BYTES",
           "add_arrays", "ROW_BLOCKS", "row_blocks", "block_partials", "add_in_block_order", "channel_sum"]


def over_batch(xp, fn, n, nbytes):
    """``fn(start, stop)`` over batch slices covering ``range(n)``: split over the cores for NumPy
    (when ``nbytes``, the bytes the pass moves, make it worth it), one call for CuPy."""
    if xp.__name__ == "numpy":
        parallel_range(fn, n, nbytes)
    else:
        fn(0, n)


def elementwise(xp, fn, *arrays, dtype=None):
    """A new array ``out`` like ``arrays[0]`` (its shape and memory layout; ``dtype`` or its
    dtype), filled by ``fn(out_slice, *array_slices)`` on batch slices of ``out`` and ``arrays``.

    ``fn`` must compute its slice of ``out`` elementwise from the slices it is given (ufuncs with
    ``out=``). Arrays of other shapes than the first (broadcasting) get one call on the whole.
    """
    first = arrays[0]
    out = xp.empty_like(first, dtype=dtype)
    nbytes = first.nbytes * (len(arrays) + 1)  # the bytes moved, when all have one shape
    if (xp.__name__ != "numpy" or first.ndim == 0 or not would_split(first.shape[0], nbytes)
            or any(a.shape != first.shape for a in arrays[1:])):
        fn(out, *arrays)  # one call: nothing to split (small, broadcasting, or a GPU array)
        return out

    def run(a, b):
        fn(out[a:b], *(x[a:b] for x in arrays))

    parallel_range(run, first.shape[0], nbytes)
    return out


def flat_view(a):
    """A 1-D view of NumPy array ``a`` in its memory order, or None when there is none (``a`` is
    0-d, or not contiguous in any order of its axes)."""
    if a.ndim == 0:
        return None
    if a.flags.c_contiguous:  # the common case, without sorting the axes
        return a.reshape(-1)
    order = sorted(range(a.ndim), key=lambda k: (-a.strides[k], k))
    v = a.transpose(order)
    return v.reshape(-1) if v.flags.c_contiguous else None


def _in_layout_of(like, a):
    """A copy of ``a`` in the memory layout of ``like`` (same shape)."""
    out = numpy.empty_like(like)
    numpy.copyto(out, a)
    return out


#: Arrays smaller than this take the NumPy passes even where the compiled kernels run: they stay in
#: cache, where one NumPy pass costs about what starting Numba's threads does, and a process whose
#: arrays never reach it never loads Numba (nor its compiler's resident memory). The toy MLP's
#: 512 KiB activations (width 512, batch 256) are above it.
COMPILED_MIN_BYTES = 1 << 18


def kernels_for(xp, array):
    """The Numba kernels (:mod:`gpgan.kernels.cpu.numba_kernels`) for a pass over ``array``, or None:
    the kernels off or not installed, not a NumPy float array, or ``array`` smaller than
    :data:`COMPILED_MIN_BYTES` (its NumPy passes run)."""
    if array.nbytes < COMPILED_MIN_BYTES:
        return None
    return cpu_kernels(xp, array.dtype)


def compiled_elementwise(xp, name, arrays, *scalars):
    """A new array like ``arrays[0]``, filled by the compiled kernel ``name`` of
    :mod:`gpgan.kernels.cpu.numba_kernels` as ``kernel(*flat_arrays, *scalars, flat_out)``: one call
    on the whole arrays, which the kernel splits over Numba's threads; it works on 1-D arrays
    elementwise.

    Returns None, computing nothing, when the kernels are off (no Numba, ``GPGAN_NUMBA=0``, not
    NumPy), when ``arrays[0]`` is smaller than :data:`COMPILED_MIN_BYTES`, when it has no memory
    layout that :func:`flat_view` flattens, or when the arrays differ in shape or dtype: the caller
    then runs its NumPy form, which must give the same values. An array in another memory layout
    than the first (a gradient NCHW after a flatten, its activation channels-last) is first copied
    into the first's: one copy costs a fraction of NumPy's passes over mismatched strides.
    """
    first = arrays[0]
    if xp.__name__ != "numpy":
        return None  # no compiled kernels for CuPy arrays
    kernels = kernels_for(xp, first)  # first: the cheap test that small arrays fail
    if kernels is None or off.numba_passes:  # (off: Numba still loads, as it would)
        return None
    flat_first = flat_view(first)
    if flat_first is None or any(a.shape != first.shape or a.dtype != first.dtype for a in arrays[1:]):
        return None
    if off.layout_copy and any(a.strides != first.strides for a in arrays[1:]):
        return None
    others = [flat_view(a if a.strides == first.strides else _in_layout_of(first, a)) for a in arrays[1:]]
    out = numpy.empty_like(first)
    getattr(kernels, name)(flat_first, *others, *scalars, flat_view(out))
    return out


def add_arrays(a, b):
    """``a + b`` for arrays of one shape and dtype (gradients being accumulated): one compiled pass
    split over the threads where :func:`compiled_elementwise` runs, else NumPy's (same values)."""
    if a.__class__ is numpy.ndarray:  # compiled_elementwise checks shapes and dtypes
        total = compiled_elementwise(numpy, "add", (a, b))
        if total is not None:
            return total
    return a + b


# -- sums over pixel rows --------------------------------------------------------------------------
#: Sums over the rows of an (M, C) array run over this many blocks of rows, whatever the number of
#: threads, and add the per-channel partial sums of the blocks in order: the results do not depend
#: on the thread count.
ROW_BLOCKS = 8


def row_blocks(rows):
    """How many blocks ``rows`` rows are summed in: :data:`ROW_BLOCKS`, fewer for fewer rows."""
    return max(1, min(ROW_BLOCKS, rows))


def block_partials(rows, channels, count=1):
    """``count`` zeroed float64 arrays (blocks, channels) for the per-block sums of ``rows`` rows."""
    return tuple(numpy.zeros((row_blocks(rows), channels)) for _ in range(count))


def add_in_block_order(partials):
    """The per-block partial sums (blocks, C) added in block order (NumPy reduces an outer axis one
    row after another)."""
    return partials.sum(axis=0)


def _channel_sum_compiled(x, kept):
    """``x`` summed over every axis but ``kept`` by the Numba kernel (float64 sums over fixed row
    blocks, split over the threads), or None: no kernels for ``x``, or ``kept`` is not innermost in
    memory with the other axes flattening into rows."""
    kernels = kernels_for(numpy, x)  # first: the cheap test that small arrays fail
    if kernels is None or off.numba_passes:
        return None
    rows = numpy.moveaxis(x, kept, -1)
    if not rows.flags.c_contiguous:
        return None
    rows = rows.reshape(-1, x.shape[kept])
    partials, = block_partials(*rows.shape)
    kernels.channel_sums(rows, partials)
    return add_in_block_order(partials).astype(x.dtype)


def channel_sum(x, kept):
    """A NumPy float array (2 or more axes) summed over every axis but ``kept``, in one pass at
    memory speed: the Numba kernel where it runs and ``kept`` is innermost in memory (a
    channels-last activation, a linear layer's (N, C) gradient), else NumPy's einsum in any layout
    for 3 or more axes, where ``sum`` over several strided axes is several times slower. None where
    neither applies (NumPy's own ``sum`` then runs)."""
    y = _channel_sum_compiled(x, kept)
    if y is None and x.ndim >= 3 and not off.einsum_sums:
        y = numpy.einsum(x, list(range(x.ndim)), [kept])
    return y
