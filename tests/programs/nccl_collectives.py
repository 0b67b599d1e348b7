"""NCCL through gpgan.parallel on every GPU there is (for test_parallel's CUDA test).

    mpiexec -n NGPUS python nccl_collectives.py

Checks sums and broadcasts of CuPy arrays against closed forms, and DataParallelStep's averaging
(and its exact sums of ADA's counts); prints "ok <rank> <size> <gpu>" on success and exits 1 on a
mismatch.
"""
import sys

import numpy
from mpi4py import MPI

from gpgan.parallel import MPICommunicator

host = MPICommunicator(MPI.COMM_WORLD)  # works for one process too: a one-rank NCCL communicator
comm = host.for_device("cuda")
import cupy  # noqa: E402  (after the communicator picked this process's GPU)

rank, size = comm.rank, comm.size
failures = []
for dtype in (numpy.float32, numpy.float64):
    x = cupy.arange(1000, dtype=dtype) * (rank + 1)
    comm.all_reduce_sum(x)
    expected = numpy.arange(1000, dtype=dtype) * (size * (size + 1) / 2)
    if not numpy.array_equal(cupy.asnumpy(x), expected):
        failures.append(f"all_reduce_sum {numpy.dtype(dtype).name}")
y = cupy.full(17, float(rank), dtype=cupy.float32)
comm.broadcast(y)
if not numpy.array_equal(cupy.asnumpy(y), numpy.zeros(17, numpy.float32)):
    failures.append("broadcast")
if comm.mean({"a": float(rank)})["a"] != (size - 1) / 2:
    failures.append("mean")

from gpgan.train.parallel import DataParallelStep  # noqa: E402

step = DataParallelStep.__new__(DataParallelStep)
step.comm = comm
grads = [cupy.full((3, 2), rank + 1.0, dtype=cupy.float32), None, cupy.full(4, 2.0 * rank, dtype=cupy.float32)]
values = {"loss/critic": cupy.asarray(rank, dtype=cupy.float32)}
counts = cupy.asarray([2.0 * rank - 1, 3.0], dtype=cupy.float64)  # ADA's sign and image counts
reduced, averaged, summed = step.reduce_gradients(grads, "critic", values, counts)
mean_rank = (size - 1) / 2
if not (reduced[1] is None and numpy.allclose(cupy.asnumpy(reduced[0]), mean_rank + 1)
        and numpy.allclose(cupy.asnumpy(reduced[2]), 2 * mean_rank)
        and abs(float(averaged["loss/critic"]) - mean_rank) < 1e-6
        and summed.dtype == cupy.float64
        and cupy.asnumpy(summed).tolist() == [size * (size - 1) - size, 3.0 * size]):
    failures.append("DataParallelStep.reduce_gradients")
if failures:
    print(f"rank {rank}: failed: {', '.join(failures)}", flush=True)
    sys.exit(1)
print(f"ok {rank} {size} {comm.device_id}", flush=True)
