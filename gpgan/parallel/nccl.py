"""NCCL through CuPy (``cupy.cuda.nccl``): sums CuPy arrays between the GPUs of a run, one GPU per
process, on the current CUDA stream; host-side agreements stay on MPI.

Each process uses the GPU of its rank on its machine (``local_rank``; with one visible GPU per
process, as ``srun --gpus-per-task=1`` arranges, that one). The NCCL communicator is bootstrapped
over MPI: rank 0's unique id is broadcast to the others. Collectives are queued on the stream and
never wait for the device, so a training step stays free of host reads.
"""
from gpgan.parallel.communicator import Communicator

__all__ = ["NCCLCommunicator", "pick_gpu"]


def pick_gpu(local_rank, local_size, device_count):
    """The CUDA device index of the process ``local_rank`` of ``local_size`` on a machine whose
    processes each see ``device_count`` GPUs.

    Raises:
        RuntimeError: fewer GPUs than processes (NCCL needs one GPU per process), unless each
            process sees one GPU of its own (``CUDA_VISIBLE_DEVICES`` set per process).
    """
    if device_count >= local_size:
        return local_rank
    if device_count == 1:
        return 0
    raise RuntimeError(f"{local_size} processes on this machine but {device_count} GPUs: NCCL needs one GPU "
                       "per process; start at most as many processes per machine as it has GPUs")


class NCCLCommunicator(Communicator):
    """Device collectives over NCCL for CuPy arrays; host collectives through ``host`` (an
    :class:`gpgan.parallel.MPICommunicator` over the same processes)."""

    backend = "nccl"

    def __init__(self, host):
        self.host = host
        self.rank, self.size = host.rank, host.size
        self.local_rank, self.local_size = host.local_rank, host.local_size
        # Any process may lack CuPy, NCCL or a GPU: agree before NCCL's initialization, which
        # waits for every process and would wait forever for one that failed.
        self.device_id = host.together(self._use_gpu)
        from cupy.cuda import nccl

        self._nccl = nccl
        unique_id = host.on_root(nccl.get_unique_id)
        self.comm = nccl.NcclCommunicator(self.size, unique_id, self.rank)

    def _use_gpu(self):
        import cupy
        from cupy.cuda import nccl

        if not getattr(nccl, "available", True):
            raise RuntimeError("CuPy was built without NCCL; install it with `pip install -e '.[cuda]'` "
                               "(the nvidia-nccl wheel)")
        device = pick_gpu(self.local_rank, self.local_size, cupy.cuda.runtime.getDeviceCount())
        cupy.cuda.Device(device).use()
        return device

    @property
    def host_name(self):
        return self.host.host_name

    def for_device(self, device):
        return self.host.for_device(device)

    def _buffer(self, array, what):
        import cupy

        if not isinstance(array, cupy.ndarray):
            raise TypeError(f"{what}: the NCCL communicator takes CuPy arrays, got {type(array).__name__}")
        if not array.flags.c_contiguous:
            raise ValueError(f"{what}: the array must be C-contiguous")
        types = {"float16": self._nccl.NCCL_FLOAT16, "float32": self._nccl.NCCL_FLOAT32,
                 "float64": self._nccl.NCCL_FLOAT64, "int32": self._nccl.NCCL_INT32,
                 "int64": self._nccl.NCCL_INT64}
        if array.dtype.name not in types:
            raise TypeError(f"{what}: dtype {array.dtype} is not one NCCL sums here ({', '.join(types)})")
        return array.data.ptr, array.size, types[array.dtype.name], cupy.cuda.get_current_stream().ptr

    def all_reduce_sum(self, array):
        ptr, count, dtype, stream = self._buffer(array, "all_reduce_sum")
        self.comm.allReduce(ptr, ptr, count, dtype, self._nccl.NCCL_SUM, stream)
        return array

    def broadcast(self, array, root=0):
        ptr, count, dtype, stream = self._buffer(array, "broadcast")
        self.comm.bcast(ptr, count, dtype, root, stream)
        return array

    def all_reduce_host(self, values, op="sum"):
        return self.host.all_reduce_host(values, op)

    def broadcast_object(self, obj, root=0):
        return self.host.broadcast_object(obj, root)

    def all_gather_object(self, obj):
        return self.host.all_gather_object(obj)

    def finish(self, status, timeout=120.0):
        return self.host.finish(status, timeout)

    def abort(self, status):
        self.host.abort(status)
