"""Processes of one data-parallel run: communicators that sum arrays across them (MPI for NumPy
arrays, NCCL for CuPy arrays) and make every process take the same decisions.

    comm = connect()                      # the processes mpiexec / srun started (1 without them)
    comm = comm.for_device("cuda")        # this rank's GPU, and NCCL for CuPy arrays
    comm.all_reduce_sum(flat_gradients)   # in place, on the arrays' device
    comm.on_root(make_folder)             # rank 0 does it, every rank gets its result or error

A process not started by an MPI launcher is a run of one (:class:`LocalCommunicator`) and never
imports mpi4py. Nothing else of gpgan is imported here; :mod:`gpgan.train.parallel` builds the
data-parallel trainer on these.
"""
from gpgan.parallel.communicator import Communicator, LocalCommunicator, PeerFailure
from gpgan.parallel.mpi import MPICommunicator, connect, launched_by_mpi

__all__ = ["Communicator", "LocalCommunicator", "PeerFailure", "MPICommunicator", "NCCLCommunicator", "connect",
           "launched_by_mpi"]


def __getattr__(name):
    if name == "NCCLCommunicator":  # imports nothing of CuPy until asked for
        from gpgan.parallel.nccl import NCCLCommunicator

        return NCCLCommunicator
    raise AttributeError(f"module 'gpgan.parallel' has no attribute {name!r}")
