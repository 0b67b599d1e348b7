"""Matrix products on CuPy arrays through cuBLAS itself, called with ctypes.

Why not ``cupy.matmul``: CuPy refuses every cuBLAS call while a stream is being captured into a
CUDA graph (its cuBLAS wrappers raise ``NotImplementedError``; cupy/cupy#6290), although cuBLAS
itself supports capture once the handle has a workspace of its own. gpgan captures whole training
steps (:mod:`gpgan.backend.graph`), so every product of the engine goes through :func:`matmul`
here, eager or captured, and both give the same bits. The library is the ``libcublas`` that CuPy
already loaded; nothing new is installed.

Operands may be C-contiguous matrices or transposed views of them (cuBLAS reads either without a
copy), with an optional leading batch axis (a strided-batched call). Anything else is made
contiguous first.

Under ``matmul_precision('bf16')`` (:mod:`gpgan.backend.precision`) float32 operands are rounded
to bfloat16 copies (held as uint16, which CuPy has; it has no bfloat16) and multiplied by
``cublasGemmEx`` with float32 accumulation into a float32 result.
"""
import ctypes
import threading

import numpy

from gpgan.backend.precision import get_matmul_precision

__all__ = ["matmul", "to_bf16"]

_OP_N, _OP_T = 0, 1
_R_32F, _R_16BF = 0, 14               # cudaDataType
_COMPUTE_32F = 68                     # cublasComputeType_t: float32 accumulation
_GEMM_DEFAULT = -1                    # cublasGemmAlgo_t: cuBLAS's heuristic (tensor cores for bf16)
_WORKSPACE_BYTES = 32 << 20  # cuBLAS's recommendation for Hopper is 32 MiB
_state = threading.local()
_lib = None


def _library():
    global _lib
    if _lib is None:
        import cupy
        from cupy_backends.cuda.libs import cublas  # noqa: F401  (loads libcublas into the process)

        major = cupy.cuda.runtime.runtimeGetVersion() // 1000
        errors = []
        for name in (f"libcublas.so.{major}", "libcublas.so"):
            try:
                lib = ctypes.CDLL(name)
                break
            except OSError as e:
                errors.append(str(e))
        else:
            raise RuntimeError("cuBLAS could not be loaded through ctypes: " + "; ".join(errors))
        for fn in ("cublasSgemm_v2", "cublasDgemm_v2"):
            getattr(lib, fn).argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                         ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                         ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
        for fn in ("cublasSgemmStridedBatched", "cublasDgemmStridedBatched"):
            getattr(lib, fn).argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                         ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                                         ctypes.c_longlong, ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong,
                                         ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong,
                                         ctypes.c_int]
        void, i, ll = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
        lib.cublasGemmEx.argtypes = [void, i, i, i, i, i, void, void, i, i, void, i, i, void, void, i, i, i, i]
        lib.cublasGemmStridedBatchedEx.argtypes = [void, i, i, i, i, i, void, void, i, i, ll, void, i, i, ll,
                                                   void, void, i, i, ll, i, i, i]
        _lib = lib
    return _lib


_bf16_kernel = None


def to_bf16(x):
    """A C-contiguous uint16 CuPy array of ``x``'s (float32) values rounded to bfloat16, to
    nearest even; NaN stays NaN (quiet), infinities stay infinite. Same shape as ``x``."""
    global _bf16_kernel
    import cupy

    if _bf16_kernel is None:
        _bf16_kernel = cupy.ElementwiseKernel(
            "float32 x", "uint16 y",
            """
            unsigned int u = __float_as_uint(x);
            if ((u & 0x7fffffffu) > 0x7f800000u) {
                y = (unsigned short)((u >> 16) | 0x40u);
            } else {
                y = (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
            }
            """, "gpgan_float32_to_bf16")
    return _bf16_kernel(x, cupy.empty(x.shape, dtype=numpy.uint16))


def _check(status, what):
    if status != 0:
        raise RuntimeError(f"cuBLAS {what} failed with status {status}")


def _handle():
    """This thread's cuBLAS handle on the current device, with a workspace of its own (which is
    what makes its calls capturable), bound to the current stream."""
    import cupy

    lib = _library()
    device = cupy.cuda.Device().id
    handles = getattr(_state, "handles", None)
    if handles is None:
        handles = _state.handles = {}
    entry = handles.get(device)
    if entry is None:
        handle = ctypes.c_void_p()
        _check(lib.cublasCreate_v2(ctypes.byref(handle)), "cublasCreate")
        entry = handles[device] = (handle, cupy.cuda.alloc(_WORKSPACE_BYTES))
    handle, workspace = entry
    _check(lib.cublasSetStream_v2(handle, ctypes.c_void_p(cupy.cuda.get_current_stream().ptr)), "cublasSetStream")
    # After every cublasSetStream: it resets the handle to cuBLAS's own workspace pool, whose
    # memory a captured graph would then use without owning it.
    _check(lib.cublasSetWorkspace_v2(handle, ctypes.c_void_p(workspace.ptr), ctypes.c_size_t(_WORKSPACE_BYTES)),
           "cublasSetWorkspace")
    return handle


def _layout(m):
    """``(op, ld)`` of a matrix ``m`` (r, c) as cuBLAS's column-major reading of its memory: a
    C-contiguous matrix is its own transpose there (op N on the product's transpose), a
    transposed view of one is read as op T. None if neither."""
    r, c = m.shape[-2:]
    s0, s1 = (s // m.itemsize for s in m.strides[-2:])
    if (s1 == 1 or c == 1) and (s0 >= max(c, 1) or r == 1):
        return _OP_N, max(s0 if r > 1 else c, 1)
    if (s0 == 1 or r == 1) and (s1 >= max(r, 1) or c == 1):
        return _OP_T, max(s1 if c > 1 else r, 1)
    return None


def _readable(m):
    """:func:`_layout` of ``m``, None also when its batch axis runs backwards."""
    if m.ndim == 3 and m.strides[0] < 0:
        return None
    return _layout(m)


def _batch_stride(m, batch):
    """Elements between the matrices of ``m`` (0 for a single matrix broadcast over ``batch``)."""
    if m.ndim == 2 or m.shape[0] == 1:
        return 0
    return m.strides[0] // m.itemsize


def matmul(a, b):
    """``a @ b`` for CuPy float32/float64 arrays: (m, k) @ (k, n) -> (m, n), or with one leading
    batch axis on either or both ((B, m, k) @ (B, k, n) -> (B, m, n); a batch of 1 broadcasts),
    or a vector on either side ((k,) as a row on the left, a column on the right, its axis
    dropped from the result, as NumPy's matmul does). Other dtypes and dimensions go to
    ``cupy.matmul`` (which cannot be captured)."""
    import cupy

    if (a.ndim == 1 or b.ndim == 1) and a.ndim >= 1 and b.ndim >= 1:
        out = matmul(a[None, :] if a.ndim == 1 else a, b[:, None] if b.ndim == 1 else b)
        if b.ndim == 1:
            out = out[..., 0]
        if a.ndim == 1:
            out = out[..., 0] if b.ndim == 1 else out[..., 0, :]
        return out

    if (a.dtype != b.dtype or a.dtype.type not in (numpy.float32, numpy.float64) or not 2 <= a.ndim <= 3
            or not 2 <= b.ndim <= 3 or a.shape[-1] != b.shape[-2]):
        return cupy.matmul(a, b)
    batch = max(a.shape[0] if a.ndim == 3 else 1, b.shape[0] if b.ndim == 3 else 1)
    for x in (a, b):
        if x.ndim == 3 and x.shape[0] not in (1, batch):
            return cupy.matmul(a, b)
    bf16 = a.dtype.type is numpy.float32 and get_matmul_precision() == "bf16"
    if bf16:  # rounded copies, C-contiguous
        a, b = to_bf16(a), to_bf16(b)
    la, lb = _readable(a), _readable(b)
    if la is None:
        a = cupy.ascontiguousarray(a)
        la = _layout(a)
    if lb is None:
        b = cupy.ascontiguousarray(b)
        lb = _layout(b)
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    three_d = a.ndim == 3 or b.ndim == 3
    out = cupy.empty((batch, m, n) if three_d else (m, n), dtype=numpy.float32 if bf16 else a.dtype)
    if out.size == 0:
        return out
    if k == 0:
        out.fill(0)
        return out
    lib, handle = _library(), _handle()
    single = bf16 or a.dtype.type is numpy.float32  # alpha and beta are float32 for bf16 too
    one, zero = (ctypes.c_float(1.0), ctypes.c_float(0.0)) if single else (ctypes.c_double(1.0), ctypes.c_double(0.0))
    # Row-major C = A B is column-major C^T = B^T A^T: cuBLAS's "A" is our b, its "B" our a.
    args = (handle, lb[0], la[0], n, m, k, ctypes.byref(one))
    if bf16 and batch == 1:
        _check(lib.cublasGemmEx(*args, b.data.ptr, _R_16BF, lb[1], a.data.ptr, _R_16BF, la[1], ctypes.byref(zero),
                                out.data.ptr, _R_32F, n, _COMPUTE_32F, _GEMM_DEFAULT), "gemmEx (bf16)")
    elif bf16:
        _check(lib.cublasGemmStridedBatchedEx(*args, b.data.ptr, _R_16BF, lb[1], _batch_stride(b, batch), a.data.ptr,
                                              _R_16BF, la[1], _batch_stride(a, batch), ctypes.byref(zero),
                                              out.data.ptr, _R_32F, n, m * n, batch, _COMPUTE_32F, _GEMM_DEFAULT),
               "gemmStridedBatchedEx (bf16)")
    elif batch == 1:
        fn = lib.cublasSgemm_v2 if single else lib.cublasDgemm_v2
        _check(fn(*args, b.data.ptr, lb[1], a.data.ptr, la[1], ctypes.byref(zero), out.data.ptr, n),
               "gemm")
    else:
        fn = lib.cublasSgemmStridedBatched if single else lib.cublasDgemmStridedBatched
        _check(fn(*args, b.data.ptr, lb[1], _batch_stride(b, batch), a.data.ptr, la[1], _batch_stride(a, batch),
                  ctypes.byref(zero), out.data.ptr, n, m * n, batch), "gemmStridedBatched")
    return out
