"""The cores this process should use: its affinity mask, shared with the other processes of a run
that an MPI launcher started on this machine, or with the other trainers of a sweep.

``mpiexec -n 2 gpgan-train`` on a 2-core machine starts two processes that would each run one BLAS
thread and one array-pass thread per core, four of each on two cores. Launchers that pin their
ranks (Open MPI's default for two ranks, Slurm with ``--cpus-per-task``) leave each one a
smaller affinity mask, which :func:`available_cores` already reads; launchers that do not (MPICH's
Hydra, Intel MPI) say how many ranks share the machine (:data:`LOCAL_SIZE_VARIABLES`), and then
each takes ``cores // ranks``.

BLAS libraries read their thread count once, when they are loaded, which NumPy's import does:
:func:`gpgan.configure_process` sets :data:`BLAS_THREAD_VARS` to this share for a shared machine
(a value the user set is kept). This module only computes; it imports nothing but the standard
library, and must keep it that way.
"""
import os
import sys

__all__ = ["LOCAL_SIZE_VARIABLES", "BLAS_THREAD_VARS", "blas_loaded", "openmp_loaded", "available_cores",
           "local_processes", "cores_per_process", "process_cores"]

#: variables by which MPI launchers tell a process how many ranks run on its machine
#: (MPICH's Hydra and Intel MPI; Open MPI; MVAPICH2)
LOCAL_SIZE_VARIABLES = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "MV2_COMM_WORLD_LOCAL_SIZE")
#: the variables that set the threads of BLAS and OpenMP, read when those libraries load
BLAS_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def blas_loaded():
    """True once NumPy, and with it the BLAS library, is loaded: from then on the environment
    variables that BLAS reads when it loads (threads, idle spin) no longer take effect."""
    return "numpy" in sys.modules


def openmp_loaded():
    """True once GNU OpenMP (libgomp: oneDNN's and Numba's threads) is loaded in this process (it
    reads its variables, such as the idle spin, then). Read from /proc/self/maps; False where there
    is none (other systems ship other OpenMP runtimes)."""
    try:
        with open("/proc/self/maps") as maps:
            return any("libgomp" in line for line in maps)
    except OSError:
        return False


def available_cores():
    """The number of cores this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def local_processes(environ=None):
    """How many processes of this run an MPI launcher started on this machine (1 without one)."""
    env = os.environ if environ is None else environ
    for name in LOCAL_SIZE_VARIABLES:
        text = env.get(name, "")
        if text.isdigit() and int(text) > 0:
            return int(text)
    return 1


def cores_per_process(processes, cores=None):
    """Each one's share when ``processes`` processes split ``cores`` (default: this process's
    :func:`available_cores`): ``cores // processes``, at least 1."""
    cores = available_cores() if cores is None else cores
    return max(1, cores // max(1, int(processes)))


def process_cores(environ=None):
    """The cores this process should use: :func:`available_cores`, divided among the local ranks
    of an MPI run unless the launcher pinned this process to fewer than all the machine's cores."""
    cores = available_cores()
    ranks = local_processes(environ)
    if ranks > 1 and cores >= (os.cpu_count() or cores):
        return cores_per_process(ranks, cores)
    return cores
