"""oneDNN's CPU convolutions and products for float32 NumPy arrays: an optional accelerator.

gpgan's own CPU convolution is im2col (or col2im) around one OpenBLAS GEMM. oneDNN, the library
PyTorch's CPU convolutions run on, has JIT-compiled direct convolutions for channels-last data that
need no column copy, and a matmul (brgemm kernels) for large products.

It comes from the package index as ``onednn-cpu-gomp`` (``pip install 'gpgan[cpu]'`` on x86-64
Linux), a build of oneDNN 3 with the GNU OpenMP runtime and no SYCL, and is called through ctypes:
three convolution primitives, forward, backward data and backward weights, cover every convolution
the engine runs (a transposed convolution is the backward data of a convolution), and the matmul
primitive takes 2-D products of at least ``MIN_PRODUCT_MACS`` multiply-adds, with a Linear's bias
and the ReLU family's rectifier after it fused into the product's pass over its output when asked.
Convolutions may be grouped (depthwise ones included): gpgan's (O, C/G, kH, kW) weights are
oneDNN's (G, O/G, C/G, kH, kW) ``goihw`` as they lie in memory. Results agree with gpgan's own
kernels to float32 rounding, not bit for bit (other summation orders); float64, batched products
and CuPy arrays keep gpgan's own code.
Switched off by ``GPGAN_ONEDNN=0`` or :func:`gpgan.kernels.set_onednn` (the switch is
:data:`gpgan.kernels.switches.onednn_switch`); a library that fails to load turns it off with one
warning. Callers go through :mod:`gpgan.kernels` (which arrays it takes is decided there).

Each call runs on the NumPy buffers themselves (no copies of the data: activations are
channels-last already, see :mod:`gpgan.functions.conv`), with a NumPy scratchpad (a convolution's
fresh at each call, a product's kept by the calling thread). The memory
objects that point oneDNN at them are made once per operation and calling thread and re-pointed at
each call's arrays, so calls from several threads share nothing but the cached primitives, which
oneDNN allows. Where Numba is on (:data:`gpgan.kernels.switches.numba_switch`) and loaded, a
product's call goes from its arrays to oneDNN in compiled code (:func:`_product_runner`), not
through ctypes, whose argument conversions weigh on a small product's call (measured:
docs/benchmarks.md).
Its OpenMP threads follow ``OMP_NUM_THREADS``, which :func:`gpgan.configure_process` sets to an
MPI rank's share of the cores as it does for OpenBLAS.
"""
import ctypes
import importlib.metadata
import sys
import threading
import warnings
from collections import OrderedDict

import numpy

from gpgan.backend.mechanisms import off
from gpgan.kernels.record import recording
from gpgan.kernels.switches import ONEDNN_DISTRIBUTION, ONEDNN_ENV, numba_switch
from gpgan.kernels.switches import onednn_switch

__all__ = ["ONEDNN_ENV", "MIN_PRODUCT_MACS", "conv_forward",
           "conv_backward_data", "conv_backward_weights", "matmul", "product_for", "implementation_names"]

_LIBRARY = "libdnnl.so.3"

# Constants of oneDNN 3's C API (dnnl_types.h, dnnl_common_types.h).
_CPU, _IN_ORDER, _F32 = 1, 1, 3
_TAG_ANY, _TAG_ROWS, _TAG_NCHW, _TAG_NHWC = 1, 3, 5, 22  # dnnl_format_tag_any, dnnl_ab, dnnl_abcd, dnnl_acdb
_TAG_GOIHW = 6  # dnnl_abcde: grouped weights (G, O/G, C/G, kH, kW)
_FORWARD_TRAINING, _CONVOLUTION_DIRECT = 64, 1
_SCRATCHPAD_USER = 1
_QUERY_IMPL_INFO, _QUERY_WEIGHTS_MD, _QUERY_DIFF_WEIGHTS_MD, _QUERY_SCRATCHPAD_MD = 8, 131, 132, 136
_ARG_SRC, _ARG_DST, _ARG_WEIGHTS, _ARG_BIAS, _ARG_SCRATCHPAD = 1, 17, 33, 41, 80
_ELTWISE_RELU = 0x20  # dnnl_eltwise_relu: x for x > 0, else alpha * x
_BINARY_ADD = 0x1fff0  # dnnl_binary_add
_ARG_SRC_1 = 2
_ARG_POST_OP_BASE = 32768  # DNNL_ARG_ATTR_MULTIPLE_POST_OP_BASE of oneDNN 3
_ARG_DIFF_SRC, _ARG_DIFF_DST, _ARG_DIFF_WEIGHTS = 129, 145, 161

_handle = ctypes.c_void_p
_Dims = ctypes.c_int64 * 12  # dnnl_dims_t


class _ExecArg(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_int), ("memory", _handle)]


class _Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_int), ("minor", ctypes.c_int), ("patch", ctypes.c_int),
                ("hash", ctypes.c_char_p), ("cpu_runtime", ctypes.c_uint), ("gpu_runtime", ctypes.c_uint)]


class OneDNNError(RuntimeError):
    """A oneDNN call returned a status other than success."""


def _library_path():
    """Path of the wheel's ``libdnnl.so.3``, or None when ``onednn-cpu-gomp`` is not installed."""
    try:
        files = importlib.metadata.files(ONEDNN_DISTRIBUTION) or ()
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in files:
        if f.name == _LIBRARY:
            return str(f.locate())
    return None


class _Library:
    """The loaded library with typed entry points, one CPU engine and one in-order stream."""

    def __init__(self, path):
        lib = ctypes.CDLL(path)
        p, i = ctypes.POINTER, ctypes.c_int
        sig = {
            "dnnl_version": (p(_Version), []),
            "dnnl_engine_create": (i, [p(_handle), i, ctypes.c_size_t]),
            "dnnl_stream_create": (i, [p(_handle), _handle, ctypes.c_uint]),
            "dnnl_stream_wait": (i, [_handle]),
            "dnnl_primitive_attr_create": (i, [p(_handle)]),
            "dnnl_primitive_attr_set_scratchpad_mode": (i, [_handle, i]),
            "dnnl_primitive_attr_set_post_ops": (i, [_handle, _handle]),
            "dnnl_primitive_attr_destroy": (i, [_handle]),
            "dnnl_post_ops_create": (i, [p(_handle)]),
            "dnnl_post_ops_append_eltwise": (i, [_handle, i, ctypes.c_float, ctypes.c_float]),
            "dnnl_post_ops_append_binary": (i, [_handle, i, _handle]),
            "dnnl_post_ops_destroy": (i, [_handle]),
            "dnnl_memory_desc_create_with_tag": (i, [p(_handle), i, _Dims, i, i]),
            "dnnl_memory_desc_create_with_strides": (i, [p(_handle), i, _Dims, i, _Dims]),
            "dnnl_matmul_primitive_desc_create": (i, [p(_handle), _handle, _handle, _handle, _handle, _handle, _handle]),
            "dnnl_memory_desc_destroy": (i, [_handle]),
            "dnnl_memory_desc_get_size": (ctypes.c_size_t, [_handle]),
            "dnnl_memory_desc_equal": (i, [_handle, _handle]),
            "dnnl_memory_create": (i, [p(_handle), _handle, _handle, _handle]),
            "dnnl_memory_destroy": (i, [_handle]),
            "dnnl_memory_set_data_handle": (i, [_handle, _handle]),
            "dnnl_convolution_forward_primitive_desc_create": (
                i, [p(_handle), _handle, i, i, _handle, _handle, _handle, _handle,
                    _Dims, _Dims, _Dims, _Dims, _handle]),
            "dnnl_convolution_backward_data_primitive_desc_create": (
                i, [p(_handle), _handle, i, _handle, _handle, _handle,
                    _Dims, _Dims, _Dims, _Dims, _handle, _handle]),
            "dnnl_convolution_backward_weights_primitive_desc_create": (
                i, [p(_handle), _handle, i, _handle, _handle, _handle, _handle,
                    _Dims, _Dims, _Dims, _Dims, _handle, _handle]),
            "dnnl_reorder_primitive_desc_create": (i, [p(_handle), _handle, _handle, _handle, _handle, _handle]),
            "dnnl_primitive_desc_query": (i, [_handle, i, i, _handle]),
            "dnnl_primitive_desc_query_md": (_handle, [_handle, i, i]),
            "dnnl_primitive_desc_destroy": (i, [_handle]),
            "dnnl_primitive_create": (i, [p(_handle), _handle]),
            "dnnl_primitive_execute": (i, [_handle, _handle, i, _handle]),
            "dnnl_primitive_destroy": (i, [_handle]),
        }
        for name, (restype, argtypes) in sig.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = restype, argtypes
        self.lib = lib
        v = lib.dnnl_version().contents
        if v.major != 3:
            raise OSError(f"{path} is oneDNN {v.major}.{v.minor}; gpgan's binding needs oneDNN 3")
        self.engine, self.stream, self.attr = _handle(), _handle(), _handle()
        self.call("dnnl_engine_create", ctypes.byref(self.engine), _CPU, 0)
        self.call("dnnl_stream_create", ctypes.byref(self.stream), self.engine, _IN_ORDER)
        self.call("dnnl_primitive_attr_create", ctypes.byref(self.attr))
        self.call("dnnl_primitive_attr_set_scratchpad_mode", self.attr, _SCRATCHPAD_USER)

    def call(self, name, *args):
        status = getattr(self.lib, name)(*args)
        if status != 0:
            raise OneDNNError(f"{name} returned oneDNN status {status}")

    def post_ops_attr(self, negative_slope=None, addend=None):
        """``(attr, addend_argument)``: a new attribute (the caller destroys it) with a user
        scratchpad, then the operations after the product, in this order: ``relu`` with
        ``negative_slope`` (None: none), and the addition of a tensor of memory desc ``addend``
        (None: none), which each call passes under ``addend_argument`` (None without one)."""
        attr, post_ops, addend_argument = _handle(), _handle(), None
        self.call("dnnl_primitive_attr_create", ctypes.byref(attr))
        try:
            self.call("dnnl_primitive_attr_set_scratchpad_mode", attr, _SCRATCHPAD_USER)
            self.call("dnnl_post_ops_create", ctypes.byref(post_ops))
            try:
                index = 0
                if negative_slope is not None:
                    self.call("dnnl_post_ops_append_eltwise", post_ops, _ELTWISE_RELU, negative_slope, 0.0)
                    index += 1
                if addend is not None:
                    self.call("dnnl_post_ops_append_binary", post_ops, _BINARY_ADD, addend)
                    addend_argument = _post_op_source(index)
                self.call("dnnl_primitive_attr_set_post_ops", attr, post_ops)
            finally:
                self.lib.dnnl_post_ops_destroy(post_ops)
        except OneDNNError:
            self.lib.dnnl_primitive_attr_destroy(attr)
            raise
        return attr, addend_argument

    def memory_desc(self, dims, tag):
        md = _handle()
        self.call("dnnl_memory_desc_create_with_tag", ctypes.byref(md), len(dims), _Dims(*dims), _F32, tag)
        return md

    def strided_desc(self, shape, strides):
        """A float32 memory desc of ``shape`` with ``strides`` in elements."""
        md = _handle()
        self.call("dnnl_memory_desc_create_with_strides", ctypes.byref(md), len(shape), _Dims(*shape), _F32,
                  _Dims(*strides))
        return md

    def primitive(self, pd):
        prim = _handle()
        self.call("dnnl_primitive_create", ctypes.byref(prim), pd)
        return prim

    def execute(self, prim, bound, arrays):
        """Run ``prim`` on ``arrays``, the NumPy arrays of its arguments in the order of ``bound``,
        the calling thread's :class:`_BoundArguments` for them."""
        bound.point_at(arrays)
        # The two C functions called directly: :meth:`call` looks each up by name, on every call.
        status = self.lib.dnnl_primitive_execute(prim, self.stream, len(arrays), bound.packed)
        if status == 0:
            status = self.lib.dnnl_stream_wait(self.stream)
        if status != 0:
            raise OneDNNError(f"dnnl_primitive_execute returned oneDNN status {status}")

    def execute_product(self, run, prim, bound, a, b, c, bias, addend, scratchpad):
        """Run a product's ``prim`` through :func:`_product_runner`'s compiled ``run``: ``bound``
        holds the memory objects of (source ``a``, weights ``b``, output ``c``, ``bias`` and
        ``addend`` where not None, ``scratchpad``), in that order."""
        status = run(prim.value, self.stream.value, bound.packed_address, bound.handles, bound.pointers,
                     a, b, c, _NO_BIAS if bias is None else bias, _NO_ADDEND if addend is None else addend,
                     bias is not None, addend is not None, scratchpad)
        if status != 0:
            raise OneDNNError(f"a oneDNN product returned oneDNN status {status}")


class _BoundArguments:
    """One thread's memory objects for one primitive's arguments: made once, then pointed at each
    call's arrays (``dnnl_memory_set_data_handle``, only where the address changed): making and
    destroying them at every call was the larger part of a small product's Python and ctypes work
    (docs/benchmarks.md). A product's binding also keeps its thread's scratchpad
    (:meth:`keep_scratchpad`)."""

    def __init__(self, lib, args):
        self.lib, self.memories, self.scratchpad = lib, [], None
        self.set_handle = lib.lib.dnnl_memory_set_data_handle
        self.keys = [(k, md) for k, (md, _) in args]
        for _, md in self.keys:
            memory = _handle()
            lib.call("dnnl_memory_create", ctypes.byref(memory), md, lib.engine, None)
            self.memories.append(memory)
        # Each memory object's data address, 0 before the first: kept in arrays, because the
        # compiled call path (_product_runner) reads and updates them too.
        self.handles = numpy.array([m.value for m in self.memories], numpy.uint64)
        self.pointers = numpy.zeros(len(args), numpy.uint64)
        self.packed = (_ExecArg * len(args))(*[_ExecArg(k, m) for (k, _), m in zip(self.keys, self.memories)])
        self.packed_address = ctypes.addressof(self.packed)

    def fits(self, args):
        """True when ``args`` name the same arguments with the same memory descs, in order."""
        if len(args) != len(self.keys):
            return False
        for (k, (md, _)), (key, desc) in zip(args, self.keys):
            if k != key or md is not desc:
                return False
        return True

    def point_at(self, arrays):
        """Point each memory object at its array in ``arrays`` (in the order of the arguments this
        binding :meth:`fits`); the kept scratchpad is pointed at already."""
        pointers, kept = self.pointers, self.scratchpad
        for i, array in enumerate(arrays):
            if array is kept and pointers[i]:
                continue
            pointer = array.ctypes.data
            if pointer != pointers[i]:
                if self.set_handle(self.memories[i], pointer) != 0:
                    raise OneDNNError("dnnl_memory_set_data_handle failed")
                pointers[i] = pointer

    def keep_scratchpad(self, scratchpad):
        """Point the last argument, the scratchpad, at ``scratchpad`` once, for every later call of
        this thread (which waits for each call to end, so its calls never share it)."""
        i = len(self.memories) - 1
        pointer = scratchpad.ctypes.data
        if self.set_handle(self.memories[i], pointer) != 0:
            raise OneDNNError("dnnl_memory_set_data_handle failed")
        self.pointers[i] = pointer
        self.scratchpad = scratchpad

    def __del__(self):
        for memory in getattr(self, "memories", ()):
            self.lib.lib.dnnl_memory_destroy(memory)


_lock = threading.Lock()
_library = None


def _load():
    """The loaded library, or None (not installed, switched off, or failed to load: one warning)."""
    global _library
    if not onednn_switch.enabled():
        return None
    if _library is None:
        with _lock:
            if _library is None:
                try:
                    path = _library_path()
                    if path is None:
                        raise OSError(f"{_LIBRARY} is not among {ONEDNN_DISTRIBUTION}'s files")
                    _library = _Library(path)
                except (OSError, AttributeError, OneDNNError) as exc:
                    onednn_switch.disable_after_failure()
                    warnings.warn(f"gpgan: oneDNN convolutions and products unavailable ({exc}); using gpgan's own "
                                  "convolutions and NumPy's products", RuntimeWarning, stacklevel=3)
                    return None
    return _library


#: The compiled product call's stand-ins for an absent bias and addend (its arguments are typed).
_NO_BIAS = numpy.empty(0, numpy.float32)
_NO_ADDEND = numpy.empty((0, 0), numpy.float32)
_runners = {}  # library -> its compiled product call, or False where Numba failed to compile it


def _product_runner(lib):
    """A Numba-compiled function that points a product's memory objects at its arrays (where an
    address changed) and runs its primitive, for ``lib``; None until Numba is loaded, and where it
    fails (one warning).

    Made once a process, and only once the process has loaded Numba (gpgan's kernels load it on
    their first array of 256 KiB or more): compiling it takes time at every start (the C
    functions' addresses are constants of the code, so it is not cached on disk) and loading
    Numba's LLVM takes resident memory, which a run of small arrays would pay for about what it
    gains, where the runs that load Numba anyway only gain (measured: docs/benchmarks.md).

    ``run(prim, stream, packed_args, handles, pointers, a, b, c, bias, addend, has_bias,
    has_addend, scratchpad) -> status``: ``handles`` and ``pointers`` are a
    :class:`_BoundArguments`' memory objects and their current addresses, in the order of
    :meth:`_Product.arguments` with the scratchpad last."""
    run = _runners.get(lib)
    if run is None:
        if "numba" not in sys.modules:
            return None
        with _lock:
            run = _runners.get(lib)
            if run is None:
                try:
                    run = _runners[lib] = _compile_product_runner(lib)
                except Exception as exc:  # noqa: BLE001 - any failure of Numba leaves the ctypes path
                    run = _runners[lib] = False
                    warnings.warn(f"gpgan: Numba could not compile oneDNN's product call ({exc}); products "
                                  "are called through ctypes", RuntimeWarning, stacklevel=4)
    return run or None


def _compile_product_runner(lib):
    import numba
    from numba import types

    address = ctypes.c_size_t

    def c_function(name, *argtypes):
        pointer = ctypes.cast(getattr(lib.lib, name), ctypes.c_void_p).value
        return ctypes.CFUNCTYPE(ctypes.c_int, *argtypes)(pointer)

    set_handle = c_function("dnnl_memory_set_data_handle", address, address)
    execute = c_function("dnnl_primitive_execute", address, address, ctypes.c_int, address)
    wait = c_function("dnnl_stream_wait", address)

    @numba.njit(nogil=True)
    def point(handles, pointers, i, data):
        if pointers[i] == data:
            return 0
        pointers[i] = data
        return set_handle(handles[i], data)

    @numba.njit(nogil=True)
    def run(prim, stream, packed_args, handles, pointers, a, b, c, bias, addend, has_bias, has_addend, scratchpad):
        status = point(handles, pointers, 0, a.ctypes.data)
        status |= point(handles, pointers, 1, b.ctypes.data)
        status |= point(handles, pointers, 2, c.ctypes.data)
        n = 3
        if has_bias:
            status |= point(handles, pointers, n, bias.ctypes.data)
            n += 1
        if has_addend:
            status |= point(handles, pointers, n, addend.ctypes.data)
            n += 1
        status |= point(handles, pointers, n, scratchpad.ctypes.data)
        if status != 0:
            pointers[:] = 0  # a failed re-pointing leaves no address trusted
            return status
        status = execute(prim, stream, n + 1, packed_args)
        return status if status != 0 else wait(stream)

    u64, f32 = types.uint64, types.float32

    def read_only(ndim, layout):  # writable arrays convert to it too
        return types.Array(f32, ndim, layout, readonly=True)

    run.compile((u64, u64, u64, u64[::1], u64[::1], read_only(2, "A"), read_only(2, "A"), f32[:, ::1],
                 read_only(1, "C"), read_only(2, "C"), types.boolean, types.boolean, types.uint8[::1]))
    run.disable_compile()  # every call converts to the one signature: no second compilation
    run.c_functions = (set_handle, execute, wait)  # kept alive with the code that calls them
    return run


class _Primitive:
    """One oneDNN operation: its primitive descriptor (made at once; it says whether oneDNN has a
    kernel) and the primitive (JIT-compiled on the first call), with its scratchpad's size queried
    once. Owns and destroys both."""

    def __init__(self, lib, pd):
        self.lib, self.pd, self.prim = lib, pd, None
        self.bound = threading.local()  # each calling thread's _BoundArguments
        self.scratchpad = self.md(_QUERY_SCRATCHPAD_MD)
        self.scratchpad_size = max(lib.lib.dnnl_memory_desc_get_size(self.scratchpad), 1)

    @classmethod
    def create(cls, lib, name, *args):
        """``name(&pd, *args)``, the C function making a primitive descriptor, as a primitive;
        None where oneDNN has no implementation."""
        pd = _handle()
        if getattr(lib.lib, name)(ctypes.byref(pd), *args) != 0:
            return None
        return cls(lib, pd)

    def md(self, query):
        """A memory desc of the descriptor (owned by it, not to be destroyed)."""
        return _handle(self.lib.lib.dnnl_primitive_desc_query_md(self.pd, query, 0))

    def implementation(self):
        s = ctypes.c_char_p()
        self.lib.call("dnnl_primitive_desc_query", self.pd, _QUERY_IMPL_INFO, 0, ctypes.byref(s))
        return s.value.decode()

    def __call__(self, args):
        """Run on ``args``, pairs of (argument index, (memory desc, NumPy array)), with a fresh
        scratchpad (so that threads calling one primitive share no buffer)."""
        scratchpad = numpy.empty(self.scratchpad_size, numpy.uint8)
        args = list(args) + [(_ARG_SCRATCHPAD, (self.scratchpad, scratchpad))]
        bound = self.bind(args)  # makes the primitive on the first call
        self.lib.execute(self.prim, bound, [array for _, (_, array) in args])

    def bind(self, args):
        """The calling thread's :class:`_BoundArguments` for ``args`` (the scratchpad's last),
        made when it has none that fits; the primitive is made on the first call."""
        if self.prim is None:
            with _lock:
                if self.prim is None:
                    self.prim = self.lib.primitive(self.pd)
        bound = getattr(self.bound, "arguments", None)
        if bound is None or not bound.fits(args) or off.bound_memory:
            bound = self.bound.arguments = _BoundArguments(self.lib, args)
        return bound

    def __del__(self):
        lib = getattr(self, "lib", None)
        if lib is None:
            return
        if self.prim is not None:
            lib.lib.dnnl_primitive_destroy(self.prim)
        lib.lib.dnnl_primitive_desc_destroy(self.pd)


class _Descs:
    """Memory descs made with :meth:`_Library.memory_desc` and friends, destroyed with the object."""

    def __del__(self):
        lib = getattr(self, "lib", None)
        for md in getattr(self, "descs", ()) if lib is not None else ():
            lib.lib.dnnl_memory_desc_destroy(md)


class _Convolution(_Descs):
    """The three operations of one convolution geometry (float32, NHWC data, any weight layout):
    ``ops["forward"]``, ``ops["backward_data"]`` and ``ops["backward_weights"]``, each
    ``(primitive, its weights' memory desc, that desc's bytes, a reorder from or to gpgan's
    (O, C/G, kH, kW) weights or None)``; an operation oneDNN has no kernel for is absent.
    ``weights`` is gpgan's shape (O, C/G, kH, kW); with ``groups`` > 1 oneDNN sees the same
    memory as (G, O/G, C/G, kH, kW)."""

    def __init__(self, lib, src, weights, dst, stride, dilation, pad_l, pad_r, groups=1):
        self.lib, self.src_dims, self.dst_dims, self.weight_dims = lib, src, dst, weights
        self.descs = []
        self.src = self._desc(src, _TAG_NHWC)
        self.dst = self._desc(dst, _TAG_NHWC)
        if groups == 1:
            dims, tag = weights, _TAG_NCHW
        else:
            dims, tag = (groups, weights[0] // groups) + tuple(weights[1:]), _TAG_GOIHW
        self.weights_user = self._desc(dims, tag)
        weights_any = self._desc(dims, _TAG_ANY)
        # oneDNN counts dilation from 0 (no gaps), PyTorch and gpgan from 1.
        geometry = (_Dims(*stride), _Dims(*(d - 1 for d in dilation)), _Dims(*pad_l), _Dims(*pad_r))
        self.ops = {}
        fwd = _Primitive.create(lib, "dnnl_convolution_forward_primitive_desc_create", lib.engine,
                                _FORWARD_TRAINING, _CONVOLUTION_DIRECT, self.src, weights_any, None, self.dst,
                                *geometry, lib.attr)
        if fwd is None:
            return
        self.ops["forward"] = self._with_weights(fwd, _QUERY_WEIGHTS_MD, to_op=True)
        bwd_data = _Primitive.create(lib, "dnnl_convolution_backward_data_primitive_desc_create", lib.engine,
                                     _CONVOLUTION_DIRECT, self.src, weights_any, self.dst, *geometry, fwd.pd,
                                     lib.attr)
        if bwd_data is not None:
            self.ops["backward_data"] = self._with_weights(bwd_data, _QUERY_WEIGHTS_MD, to_op=True)
        bwd_weights = _Primitive.create(lib, "dnnl_convolution_backward_weights_primitive_desc_create",
                                        lib.engine, _CONVOLUTION_DIRECT, self.src, weights_any, None, self.dst,
                                        *geometry, fwd.pd, lib.attr)
        if bwd_weights is not None:
            self.ops["backward_weights"] = self._with_weights(bwd_weights, _QUERY_DIFF_WEIGHTS_MD, to_op=False)

    def _desc(self, dims, tag):
        md = self.lib.memory_desc(dims, tag)
        self.descs.append(md)
        return md

    def _with_weights(self, op, query, to_op):
        """``op`` with the layout of its weights (``query``) and, where that is not gpgan's, the
        reorder into it (``to_op``) or out of it."""
        md = op.md(query)
        size = self.lib.lib.dnnl_memory_desc_get_size(md)
        if self.lib.lib.dnnl_memory_desc_equal(md, self.weights_user):
            return op, md, size, None
        src, dst = (self.weights_user, md) if to_op else (md, self.weights_user)
        reorder = _Primitive.create(self.lib, "dnnl_reorder_primitive_desc_create", src, self.lib.engine, dst,
                                    self.lib.engine, self.lib.attr)
        if reorder is None:
            raise OneDNNError("dnnl_reorder_primitive_desc_create failed for a weight layout")
        return op, md, size, reorder

    def _weights(self, md, size, reorder, w):
        """``w`` (O, C/G, kH, kW) contiguous as the operation reads it: itself, or reordered."""
        if reorder is None:
            return self.weights_user, w
        out = numpy.empty(size // 4, numpy.float32)
        reorder([(_ARG_SRC, (self.weights_user, w)), (_ARG_DST, (md, out))])
        return md, out

    def forward(self, x, w):
        op, *weights = self.ops["forward"]
        y = numpy.empty(_nhwc_shape(self.dst_dims), numpy.float32)
        op([(_ARG_SRC, (self.src, x)), (_ARG_WEIGHTS, self._weights(*weights, w)), (_ARG_DST, (self.dst, y))])
        return y

    def backward_data(self, gy, w):
        op, *weights = self.ops["backward_data"]
        gx = numpy.empty(_nhwc_shape(self.src_dims), numpy.float32)
        op([(_ARG_DIFF_DST, (self.dst, gy)), (_ARG_WEIGHTS, self._weights(*weights, w)),
            (_ARG_DIFF_SRC, (self.src, gx))])
        return gx

    def backward_weights(self, x, gy):
        op, md, size, reorder = self.ops["backward_weights"]
        gw = numpy.empty(self.weight_dims, numpy.float32)
        out = gw if reorder is None else numpy.empty(size // 4, numpy.float32)
        op([(_ARG_SRC, (self.src, x)), (_ARG_DIFF_DST, (self.dst, gy)), (_ARG_DIFF_WEIGHTS, (md, out))])
        if reorder is not None:
            reorder([(_ARG_SRC, (md, out)), (_ARG_DST, (self.weights_user, gw))])
        return gw


def _nhwc_shape(nchw):
    n, c, h, w = nchw
    return (n, h, w, c)


# Geometries seen in a run are few (one per layer and batch size); the bound keeps a sweep over
# many shapes from holding every JIT-compiled kernel.
_CACHE_SIZE = 64
_convolutions = OrderedDict()
_products = OrderedDict()


def _post_op_source(index):
    """The argument index of the second source of the binary post-op at ``index``
    (``DNNL_ARG_ATTR_MULTIPLE_POST_OP(index) | DNNL_ARG_SRC_1``)."""
    return _ARG_POST_OP_BASE * (index + 1) | _ARG_SRC_1


def _cached(cache, key, make):
    """``cache[key]``, made by ``make()`` on a miss; beyond ``_CACHE_SIZE`` entries the least
    recently used one goes."""
    with _lock:
        value = cache.get(key)
        if value is None:
            value = cache[key] = make()
            if len(cache) > _CACHE_SIZE:
                cache.popitem(last=False)
        else:
            cache.move_to_end(key)
    return value


def _convolution(src, weights, dst, stride, padding, dilation, op, groups=1):
    """The cached operations of this geometry (``weights`` gpgan's (O, C/G, kH, kW) shape), or
    None where oneDNN cannot run ``op`` on it."""
    lib = _load()
    if lib is None:
        return None
    # Right padding that makes the output size exact: smaller than the left one where rows at
    # the end of the input are never read (a floor in the output size, or a transposed
    # convolution's output padding, seen from its adjoint).
    pad_r = tuple((dst[2 + a] - 1) * stride[a] + dilation[a] * (weights[2 + a] - 1) + 1 - src[2 + a] - padding[a]
                  for a in range(2))
    if min(pad_r) < 0:
        return None
    conv = _cached(_convolutions, (src, weights, dst, stride, padding, dilation, groups),
                   lambda: _Convolution(lib, src, weights, dst, stride, dilation, padding, pad_r, groups))
    return conv if op is None or op in conv.ops else None


def _channels_last(x):
    """``x`` (N, C, H, W) float32 as a C-contiguous (N, H, W, C) array (a view when it is one)."""
    return numpy.ascontiguousarray(x.transpose(0, 2, 3, 1))


def conv_forward(x, w, stride, padding, dilation, out_hw, groups=1):
    """``conv2d(x, w)``: x (N, C, H, W), w (O, C/groups, kH, kW) -> channels-last (N, O, *out_hw),
    or None when oneDNN is off or has no kernel for this geometry (the caller runs its own)."""
    conv = _convolution(x.shape, w.shape, (x.shape[0], w.shape[0]) + tuple(out_hw), stride, padding, dilation,
                        "forward", groups)
    if conv is None:
        return None
    return conv.forward(_channels_last(x), numpy.ascontiguousarray(w)).transpose(0, 3, 1, 2)


def conv_backward_data(gy, w, stride, padding, dilation, in_hw, groups=1):
    """The adjoint of ``conv2d`` (``conv_transpose2d``): gy (N, O, Ho, Wo), w (O, C/groups, kH, kW)
    -> channels-last (N, C, *in_hw), or None as :func:`conv_forward`."""
    conv = _convolution((gy.shape[0], w.shape[1] * groups) + tuple(in_hw), w.shape, gy.shape, stride, padding,
                        dilation, "backward_data", groups)
    if conv is None:
        return None
    return conv.backward_data(_channels_last(gy), numpy.ascontiguousarray(w)).transpose(0, 3, 1, 2)


def conv_backward_weights(x, gy, ksize, stride, padding, dilation, groups=1):
    """``d<gy, conv2d(x, W)>/dW``: x (N, C, H, W), gy (N, O, Ho, Wo) -> (O, C/groups, kH, kW), or
    None as :func:`conv_forward`."""
    weights = (gy.shape[1], x.shape[1] // groups) + tuple(ksize)
    conv = _convolution(x.shape, weights, gy.shape, stride, padding, dilation, "backward_weights", groups)
    if conv is None:
        return None
    return conv.backward_weights(_channels_last(x), _channels_last(gy))


_last_call = threading.local()  # .path: how the thread's last product call went (see _Product.call_path)


class _Product(_Descs):
    """oneDNN's matmul for one pair of 2-D shapes and memory orders, with a bias row, a rectifier
    and the addition of a C-contiguous (M, N) array fused when asked; ``op`` None where it has none."""

    def __init__(self, lib, a, b, bias, negative_slope, addend):
        self.lib, self.shape = lib, (a.shape[0], b.shape[1])
        self.descs = [lib.strided_desc(a.shape, [s // 4 for s in a.strides]),
                      lib.strided_desc(b.shape, [s // 4 for s in b.strides]),
                      lib.memory_desc(self.shape, _TAG_ROWS)]
        self.bias_desc = lib.memory_desc((1, self.shape[1]), _TAG_ROWS) if bias else None
        if bias:
            self.descs.append(self.bias_desc)
        # The addend has the output's shape and memory order: it shares the output's desc.
        attr, self.addend_arg = lib.attr, None
        if negative_slope is not None or addend:
            attr, self.addend_arg = lib.post_ops_attr(negative_slope, self.descs[2] if addend else None)
        try:
            self.op = _Primitive.create(lib, "dnnl_matmul_primitive_desc_create", lib.engine, *self.descs[:2],
                                        self.bias_desc, self.descs[2], attr)
        finally:
            if attr is not lib.attr:
                lib.lib.dnnl_primitive_attr_destroy(attr)

    def arguments(self, a, b, c, bias, addend):
        """The call's arguments in the order :func:`_product_runner` points them too: source,
        weights, output, then the bias and the addend where given (the scratchpad comes last)."""
        args = [(_ARG_SRC, (self.descs[0], a)), (_ARG_WEIGHTS, (self.descs[1], b)), (_ARG_DST, (self.descs[2], c))]
        if bias is not None:
            args.append((_ARG_BIAS, (self.bias_desc, bias)))
        if addend is not None:
            args.append((self.addend_arg, (self.descs[2], addend)))
        return args

    @staticmethod
    def call_path():
        """How the calling thread's last product call reached oneDNN: ``"compiled"``
        (:func:`_product_runner`) or ``"ctypes"``; kept only while a
        :func:`gpgan.kernels.record_dispatch` block is open (None before), for the record the
        dispatch notes right after its product's call."""
        return getattr(_last_call, "path", None)

    def __call__(self, a, b, bias, addend):
        """``a @ b`` (+ ``bias``, rectified, + ``addend`` as this product was made for), a new
        C-contiguous (M, N) array; the operands must be like those it was made for (shapes,
        strides, which of bias and addend are given: :func:`product_for`'s key)."""
        c = numpy.empty(self.shape, numpy.float32)
        op = self.op
        # A product's arguments are the same kind at every call: a thread's first call binds them,
        # with a scratchpad that the thread's later calls reuse.
        bound = getattr(op.bound, "arguments", None) if op.prim is not None and not off.bound_memory else None
        if bound is None:
            scratchpad = numpy.empty(op.scratchpad_size, numpy.uint8)
            bound = op.bind(self.arguments(a, b, c, bias, addend) + [(_ARG_SCRATCHPAD, (op.scratchpad, scratchpad))])
            bound.keep_scratchpad(scratchpad)
        run = _product_runner(self.lib) if numba_switch.enabled() and not off.product_runner else None
        if run is None:
            arrays = (a, b, c)
            if bias is not None:
                arrays += (bias,)
            if addend is not None:
                arrays += (addend,)
            self.lib.execute(op.prim, bound, arrays + (bound.scratchpad,))
            if recording:
                _last_call.path = "ctypes"
        else:
            self.lib.execute_product(run, op.prim, bound, a, b, c, bias, addend, bound.scratchpad)
            if recording:
                _last_call.path = "compiled"
        return c


#: Below this many multiply-adds a product stays with NumPy: a oneDNN call has a larger fixed cost
#: (ctypes, the call itself), which its kernels, faster than OpenBLAS's on large products, make up
#: only from products of about this size (measured: docs/benchmarks.md).
MIN_PRODUCT_MACS = 1 << 22
#: ... unless the product's bias or rectifier is fused and its output has at least this many
#: elements (256 KiB of float32): then each fused step saves a pass over an output out of cache,
#: which outweighs the call's cost (the toy MLP's first layer, (256, 2) @ (2, 512) with bias and
#: ReLU, measured in docs/benchmarks.md).
MIN_FUSED_OUTPUT = 1 << 16


def _strides_ok(a):
    """True for a 2-D float32 array's strides that oneDNN takes: positive, whole elements."""
    rows, columns = a.strides
    return rows > 0 and columns > 0 and not (rows | columns) & 3


def matmul(a, b, bias=None, negative_slope=None, addend=None):
    """``a @ b`` of 2-D float32 NumPy arrays (any positive strides) on oneDNN, a new C-contiguous
    (M, N) array; None when oneDNN is off, the product is small (``MIN_PRODUCT_MACS``, or
    ``MIN_FUSED_OUTPUT`` for a fused one) or its operands' memory order is one oneDNN does not take
    (the caller uses NumPy): :func:`product_for`, then its product called.

    With ``bias`` (a contiguous float32 (N,) array) the row is added to every row of the product,
    with ``negative_slope`` the sum is rectified (``x`` where ``x > 0``, else
    ``negative_slope * x``; 0 is ReLU), and with ``addend`` (a C-contiguous float32 (M, N) array,
    left unchanged) it is added last, each in the product's own pass over its output. The addition
    is one rounded float32 sum per element, as ``addend + a @ b`` after the product.
    """
    product = product_for(a, b, bias, negative_slope, addend)
    return None if product is None else product(a, b, bias, addend)


def product_for(a, b, bias=None, negative_slope=None, addend=None):
    """The oneDNN product that :func:`matmul` runs for these arguments, or None where it returns
    None; computes nothing. Called as ``product(a, b, bias, addend)``, it takes any arguments like
    these: ``a`` and ``b`` of the same classes, dtypes, shapes and strides, ``bias`` and ``addend``
    absent or of the same classes, dtypes, shapes and strides, the same ``negative_slope``. Those
    and the oneDNN switch decide it, so a caller may keep it for such arguments until the switch
    changes (:func:`gpgan.kernels.products.matmul` does); its ``call_path()`` says how the call
    just made reached oneDNN, while a :func:`gpgan.kernels.record_dispatch` block is open."""
    fused = bias is not None or negative_slope is not None or addend is not None
    if (a.shape[0] * a.shape[1] * b.shape[1] < MIN_PRODUCT_MACS
            and not (fused and a.shape[0] * b.shape[1] >= MIN_FUSED_OUTPUT)) or not (_strides_ok(a) and _strides_ok(b)):
        return None
    if bias is not None and not (bias.dtype == numpy.float32 and bias.shape == (b.shape[1],)
                                 and bias.flags.c_contiguous):
        return None
    if addend is not None and not (addend.__class__ is numpy.ndarray and addend.dtype == numpy.float32
                                   and addend.shape == (a.shape[0], b.shape[1]) and addend.flags.c_contiguous):
        return None
    lib = _load()
    if lib is None:
        return None
    slope = None if negative_slope is None else float(negative_slope)
    key = (a.shape, a.strides, b.shape, b.strides, bias is not None, slope, addend is not None)
    product = _cached(_products, key, lambda: _Product(lib, a, b, bias is not None, slope, addend is not None))
    return None if product.op is None else product


def implementation_names(x_shape, w_shape, stride, padding, dilation, out_hw, groups=1):
    """oneDNN's names of the kernels it picked for this geometry (forward, backward data, backward
    weights), for benchmarks and bug reports; None where it has none."""
    conv = _convolution(tuple(x_shape), tuple(w_shape), (x_shape[0], w_shape[0]) + tuple(out_hw),
                        stride, padding, dilation, None, groups)
    if conv is None:
        return None
    return tuple(conv.ops[name][0].implementation() if name in conv.ops else None
                 for name in ("forward", "backward_data", "backward_weights"))
