"""The accelerated kernels: one home for every library-specific path, one dispatch per op.

:mod:`gpgan.functions` keeps the maths (each operation, its backward, its checks) and a portable
NumPy / CuPy form of every kernel. Where an accelerator can take an operation it asks this package
once, at the top of that form: the function here returns the result, or None, computing nothing,
when no accelerator takes those arrays, and the portable form runs. Which library runs is decided
here and only here:

* the Numba kernels (:mod:`.cpu.numba_kernels`; switch ``GPGAN_NUMBA``, :func:`set_compiled_kernels`):
  a convolution's col2im and padded im2col, the ReLU family's passes, batch norm's row passes,
  elementwise sums and outer products, bilinear sampling's taps, gather and adjoint
  (:mod:`.sampling`); the same values as the portable form, bit for bit (batch norm's and the
  channel sums to the dtype's rounding: they add in float64);
* oneDNN (:mod:`.cpu.onednn`; switch ``GPGAN_ONEDNN``, :func:`set_onednn`): float32 convolutions
  (grouped and depthwise ones too) and large 2-D float32 products, with a Linear's bias and
  rectifier fused; to float32 rounding;
* array passes split over the cores (:mod:`.cpu.passes`, threads of :mod:`gpgan.backend.threads`):
  :func:`over_batch`, :func:`elementwise`, :func:`add_arrays`; never changes a value;
* sums over every axis but one (:mod:`.reductions`: :func:`array_sum`, :func:`column_sums`,
  :func:`row_blocks`): one pass on the CPU, in chunks on CUDA, where CuPy's own reduction of a
  channels-last activation runs on a few multiprocessors;
* cuBLAS called directly on CUDA (:mod:`.cuda.cublas`), so that a step with products can be
  captured as a CUDA graph.

Which library ran each call of :func:`conv2d`, :func:`conv_transpose2d`,
:func:`conv2d_grad_weight`, :func:`matmul` and :func:`fused_affine` is noted while a
:func:`record_dispatch` block is open (:mod:`.record`; for tests and benchmarks)::

    with gpgan.kernels.record_dispatch() as records:
        y = F.linear(x, w, b, negative_slope=0.0)
    # records: [Dispatch(op="fused_affine", library="onednn", fused=("bias", "rectifier"),
    #                    call="ctypes")], or [Dispatch("fused_affine", "portable"),
    #           Dispatch("matmul", "numpy")] where oneDNN does not take the product

Each record is a :class:`Dispatch` ``(op, library, fused, call)``: ``library`` is ``"onednn"``,
``"numpy"`` or ``"cublas"`` (:func:`matmul`), or ``"portable"`` where the function returned None
and the portable form ran; ``fused`` names the parts of a oneDNN :func:`fused_affine` taken in its
product's pass (``"bias"``, ``"rectifier"``, ``"addend"``); ``call`` says how a oneDNN product was
called (``"compiled"`` or ``"ctypes"``). Outside a block a call pays one test of an empty list.

Each CPU mechanism without a switch of its own above can be turned off for a benchmark
(:mod:`gpgan.backend.mechanisms`, ``GPGAN_BENCH_WITHOUT``; ``scripts/ab_mechanisms.py``).

The process settings these kernels run best under (BLAS threads and idle spin, OpenMP threads,
host memory policy) are one explicit call, :func:`gpgan.kernels.process.configure_process`.

Layers: this package imports :mod:`gpgan.backend` and nothing above it; :mod:`gpgan.functions`
imports it.
"""
from gpgan.kernels.convolution import (
    col2im_channels_last,
    col2im_planes,
    conv2d,
    conv2d_grad_weight,
    conv_transpose2d,
    window_columns,
)
from gpgan.kernels.cpu.passes import add_arrays, elementwise, over_batch
from gpgan.kernels.pointwise import add_at, leaky_relu, rectified_gradient, relu, sums_by_index
from gpgan.kernels.normalization import batch_norm_rows, batch_norm_rows_gradients, column_dots
from gpgan.kernels.process import ProcessSettings, configure_process
from gpgan.kernels.products import fused_affine, matmul, outer
from gpgan.kernels.record import Dispatch, record_dispatch
from gpgan.kernels.reductions import array_sum, column_sums, row_blocks
from gpgan.kernels.sampling import bilinear_gather, bilinear_scatter, bilinear_taps
from gpgan.kernels.switches import (
    compiled_kernels_enabled,
    compiled_kernels_version,
    onednn_enabled,
    onednn_version,
    set_compiled_kernels,
    set_onednn,
)

__all__ = [
    "conv2d", "conv_transpose2d", "conv2d_grad_weight", "window_columns", "col2im_planes", "col2im_channels_last",
    "over_batch", "elementwise", "add_arrays", "array_sum", "column_sums", "row_blocks",
    "relu", "leaky_relu", "rectified_gradient", "add_at", "sums_by_index",
    "batch_norm_rows", "batch_norm_rows_gradients", "column_dots",
    "matmul", "fused_affine", "outer",
    "bilinear_taps", "bilinear_gather", "bilinear_scatter",
    "compiled_kernels_enabled", "compiled_kernels_version", "set_compiled_kernels",
    "onednn_enabled", "onednn_version", "set_onednn",
    "configure_process", "ProcessSettings",
    "record_dispatch", "Dispatch",
]
