"""MPI (mpi4py): finding the processes an MPI launcher started, and a communicator that sums NumPy
arrays between them and carries every host-side agreement (NCCL's too).

``mpiexec -n N`` (MPICH's Hydra, Open MPI) and ``srun --mpi=pmi2|pmix`` under Slurm tell each
process its rank through the environment; :func:`connect` imports mpi4py only then, so a plain
``gpgan-train`` never initializes MPI.
"""
import os
import sys
import time

import numpy

from gpgan.parallel.communicator import Communicator, LocalCommunicator

__all__ = ["MPICommunicator", "connect", "launched_by_mpi", "LAUNCHER_VARIABLES"]

#: environment variables by which MPI launchers tell a process its rank
LAUNCHER_VARIABLES = ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK")


def launched_by_mpi(environ=None):
    """Whether an MPI launcher started this process (it set one of :data:`LAUNCHER_VARIABLES`)."""
    env = os.environ if environ is None else environ
    return any(v in env for v in LAUNCHER_VARIABLES)


def _slurm_tasks(env):
    text = env.get("SLURM_STEP_NUM_TASKS", "")
    return int(text) if text.isdigit() else 1


def connect(environ=None):
    """The processes of this run: an :class:`MPICommunicator` over ``MPI.COMM_WORLD`` when an MPI
    launcher started more than one, else a :class:`LocalCommunicator` (the one-process run,
    exactly as without MPI).

    Raises:
        RuntimeError: started by an MPI launcher without mpi4py installed, by another MPI's
            launcher, or by ``srun`` with several tasks but no MPI process-management interface
            (in both last cases every process would train the same run alone).
    """
    env = os.environ if environ is None else environ
    if not launched_by_mpi(env):
        tasks = _slurm_tasks(env)
        if tasks > 1:
            raise RuntimeError(f"srun started {tasks} tasks, but without an MPI process manager each would "
                               "train the whole run alone: use `srun --mpi=pmi2` (or pmix), or mpiexec")
        return LocalCommunicator()
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise RuntimeError(f"this process was started by an MPI launcher, but mpi4py cannot be imported "
                           f"({exc}); install it with `pip install -e '.[mpi]'`") from None
    size = MPI.COMM_WORLD.Get_size()
    started = next((int(env[v]) for v in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE") if env.get(v, "").isdigit()), size)
    if started != size:  # e.g. another MPI's mpiexec: each process would train the run alone
        raise RuntimeError(f"the launcher started {started} processes but MPI sees {size}: the mpiexec on PATH "
                           "does not belong to the MPI that mpi4py uses (use the one `pip install -e '.[mpi]'` "
                           "put beside python)")
    if size == 1:
        return LocalCommunicator()
    return MPICommunicator(MPI.COMM_WORLD)


class MPICommunicator(Communicator):
    """The processes of ``comm`` (an mpi4py intracommunicator); device collectives take NumPy
    arrays (:meth:`for_device` gives NCCL for CuPy arrays)."""

    backend = "mpi"
    ABORT_GRACE_S = 1.0  # see abort()

    def __init__(self, comm):
        from mpi4py import MPI

        self._MPI = MPI
        self.comm = comm
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=self.rank)
        self.local_rank, self.local_size = local.Get_rank(), local.Get_size()
        local.Free()
        # Exit agreement on a communicator of its own: it can never be matched with a
        # collective that a stuck process is still waiting in.
        self._control = comm.Dup()
        self._devices = {}

    @property
    def host_name(self):
        return self._MPI.Get_processor_name()

    def for_device(self, device):
        if device == "cpu":
            return self
        if device != "cuda":
            raise ValueError(f"for_device: device must be 'cpu' or 'cuda', got {device!r}")
        if device not in self._devices:
            from gpgan.parallel.nccl import NCCLCommunicator

            self._devices[device] = NCCLCommunicator(self)
        return self._devices[device]

    def _op(self, op):
        ops = {"sum": self._MPI.SUM, "max": self._MPI.MAX}
        if op not in ops:
            raise ValueError(f"all_reduce_host: op must be 'sum' or 'max', got {op!r}")
        return ops[op]

    @staticmethod
    def _host_array(array, what):
        if not isinstance(array, numpy.ndarray):
            raise TypeError(f"{what}: the MPI communicator takes NumPy arrays, got {type(array).__name__} "
                            "(CuPy arrays go through NCCL: for_device('cuda'))")
        if not array.flags.c_contiguous:
            raise ValueError(f"{what}: the array must be C-contiguous")
        return array

    def all_reduce_sum(self, array):
        self.comm.Allreduce(self._MPI.IN_PLACE, self._host_array(array, "all_reduce_sum"), op=self._MPI.SUM)
        return array

    def broadcast(self, array, root=0):
        self.comm.Bcast(self._host_array(array, "broadcast"), root=root)
        return array

    def all_reduce_host(self, values, op="sum"):
        buffer = numpy.array(values, dtype=numpy.float64)
        self.comm.Allreduce(self._MPI.IN_PLACE, buffer, op=self._op(op))
        return buffer

    def broadcast_object(self, obj, root=0):
        return self.comm.bcast(obj, root=root)

    def all_gather_object(self, obj):
        return self.comm.allgather(obj)

    def finish(self, status, timeout=120.0):
        mine = numpy.array([status], dtype=numpy.int64)
        agreed = numpy.zeros(1, dtype=numpy.int64)
        request = self._control.Iallreduce(mine, agreed, op=self._MPI.MAX)
        deadline = time.monotonic() + timeout
        while not request.Test():
            if time.monotonic() > deadline:
                print(f"gpgan: rank {self.rank} of {self.size}: another process did not finish within "
                      f"{timeout:.0f} s; ending the run", file=sys.stderr)
                self.abort(status or 1)
            time.sleep(0.01)
        return int(agreed[0])

    def abort(self, status):
        sys.stdout.flush()
        sys.stderr.flush()
        # Abort tears the job down at once, and the launcher may not yet have passed on what this
        # process just wrote (its message is the only account of why the run ended): give it a moment.
        time.sleep(self.ABORT_GRACE_S)
        self.comm.Abort(status)
