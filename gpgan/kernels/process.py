"""The process settings gpgan's CPU kernels run best under, made by one explicit call.

Importing gpgan changes nothing in the process. :func:`configure_process` makes these settings;
the command-line tools (``gpgan-train``, ``gpgan-eval``, ...) and :class:`gpgan.train.Trainer`
call it, and a library user calls it once, early (in a script ``configure_process(restart=True)``,
see below):

* OpenBLAS's idle spin (``OPENBLAS_THREAD_TIMEOUT``). After each GEMM, OpenBLAS's worker threads
  spin on their core waiting for the next one, by default for 2**28 CPU cycles, far longer than
  the gaps between a step's products. A CPU training step runs GEMMs between large copies and
  elementwise passes, which are split over the cores (:mod:`gpgan.backend.threads`) and only gain
  where no BLAS worker spins on the other cores. The spin is set to 2**20 cycles
  (:data:`SHORT_TIMEOUT`: back-to-back small GEMMs still find the workers awake), or 2**4
  (:data:`ONEDNN_TIMEOUT`) where oneDNN runs the convolutions: its OpenMP threads split each call
  statically, and one BLAS worker spinning on one of their cores stretches the whole call.
* libgomp's idle spin (``GOMP_SPINCOUNT``). oneDNN's and Numba's OpenMP threads wait for the
  next parallel region by spinning, by default 300,000 times; beside another busy process a
  spinning thread takes the core that the thread it waits for needs, and a step takes many times
  as long. The spin is set to 1,000 (:data:`SHORT_SPIN`), unless ``OMP_WAIT_POLICY`` or
  ``GOMP_SPINCOUNT`` was set (docs/benchmarks.md, "Beside another busy process").
* In an MPI run that shares this machine, the BLAS and OpenMP thread counts
  (:data:`gpgan.backend.core_share.BLAS_THREAD_VARS`) default to this process's share of the cores
  (:func:`gpgan.backend.core_share.process_cores`).
* Host memory that the process frees is kept for the next step
  (:func:`gpgan.backend.host_memory.keep_freed_host_memory`; ``GPGAN_KEEP_HOST_MEMORY=0`` leaves
  glibc's defaults).

A value the user set in the environment is always kept. OpenBLAS reads its variables once, when it
is loaded, which NumPy's import does, and importing gpgan imports NumPy: so its two take effect
in this process only where they were in its environment when it started. libgomp reads the spin
when it is loaded, usually by the first oneDNN or Numba kernel, after this call: the spin set here
takes effect unless libgomp was loaded before. With
``restart=True``, :func:`configure_process` then starts this same command line again (``os.execv``,
the same process id) with them in the environment, once, where a library had already read its
variables; the command-line tools do that. Without,
the process goes on with OpenBLAS's own settings (the variables are set for the processes it
starts), and :attr:`ProcessSettings.blas_idles_briefly` says so; exporting
``OPENBLAS_THREAD_TIMEOUT=20`` (``4`` where oneDNN runs) before starting Python has the same effect.
The order of imports never changes anything: the thread count of the array passes is the same
either way (:func:`gpgan.get_num_threads`).

This module imports the standard library, :mod:`gpgan.kernels.switches` and
:mod:`gpgan.backend`'s pure helpers only.
"""
import os
import sys
from collections import namedtuple

from gpgan.backend.core_share import BLAS_THREAD_VARS, blas_loaded, local_processes, openmp_loaded, process_cores
from gpgan.backend.host_memory import keep_freed_host_memory
from gpgan.backend.threads import get_num_threads
from gpgan.kernels.switches import onednn_switch

__all__ = ["TIMEOUT_ENV", "SHORT_TIMEOUT", "ONEDNN_TIMEOUT", "SPIN_ENV", "SHORT_SPIN", "RESTARTED_ENV", "ProcessSettings",
           "configure_process", "process_environment", "blas_idles_briefly"]

TIMEOUT_ENV = "OPENBLAS_THREAD_TIMEOUT"
#: 2**20 cycles: back-to-back small GEMMs find the workers awake, and they sleep before the array
#: passes that follow a GEMM need the cores.
SHORT_TIMEOUT = 20
#: 2**4 cycles where oneDNN's convolutions run (see the module docstring).
ONEDNN_TIMEOUT = 4
SPIN_ENV = "GOMP_SPINCOUNT"
#: libgomp's spins before an idle OpenMP thread sleeps (its default: 300,000); what 1,000 gains
#: beside a busy process and costs alone: docs/benchmarks.md, "Beside another busy process".
SHORT_SPIN = 1000
#: Set by a user who chose how OpenMP threads wait: then the spin is theirs too.
WAIT_POLICY_ENV = "OMP_WAIT_POLICY"
#: Set in the environment of the process that :func:`configure_process` restarted (so that it
#: restarts once at most, and knows that its libraries loaded with the settings).
RESTARTED_ENV = "GPGAN_PROCESS_CONFIGURED"
# A longer spin than 2**20 cycles already slowed the convolution steps (docs/benchmarks.md).
_BRIEF_ENOUGH = 20

#: What :func:`configure_process` did: ``environment`` the variables it set (name -> value, none
#: that the user had set), ``blas_idles_briefly`` whether this process's OpenBLAS runs with a short
#: idle spin, ``threads`` the threads of the array passes, ``host_memory_kept`` whether freed
#: host memory is kept (glibc).
ProcessSettings = namedtuple("ProcessSettings", "environment blas_idles_briefly threads host_memory_kept")


def _onednn_will_run():
    try:
        return onednn_switch.enabled()
    except ValueError:  # a bad GPGAN_ONEDNN: reported where a convolution first asks for oneDNN
        return False


def process_environment(environ=None):
    """The variables :func:`configure_process` would add to ``environ`` (default ``os.environ``):
    name -> value, for those not set there already. Changes nothing."""
    env = os.environ if environ is None else environ
    wanted = {TIMEOUT_ENV: str(ONEDNN_TIMEOUT if _onednn_will_run() else SHORT_TIMEOUT)}
    if WAIT_POLICY_ENV not in env:
        wanted[SPIN_ENV] = str(SHORT_SPIN)
    if local_processes(env) > 1:
        share = str(process_cores(env))
        wanted.update((name, share) for name in BLAS_THREAD_VARS)
    return {name: value for name, value in wanted.items() if name not in env}


def blas_idles_briefly(environ=None):
    """True when ``OPENBLAS_THREAD_TIMEOUT`` in ``environ`` (default ``os.environ``) asks for a
    spin of at most 2**20 cycles (it takes effect where it was set before NumPy was loaded)."""
    env = os.environ if environ is None else environ
    try:
        return int(env.get(TIMEOUT_ENV, "")) <= _BRIEF_ENOUGH
    except ValueError:
        return False


def _restart():
    """Run this process's command line again with the current environment (never returns)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable] + list(sys.orig_argv[1:]))


def configure_process(restart=False, host_memory=True):
    """Make the process settings of the module docstring; returns a :class:`ProcessSettings`.

    Idempotent. ``restart``: where NumPy was loaded before the variables could be set, start this
    command line again with them (once; POSIX only); otherwise go on without them.
    ``host_memory``: keep freed host memory (False leaves glibc's defaults, for a process that
    does not train).

    Raises:
        ValueError: ``GPGAN_KEEP_HOST_MEMORY`` or ``GPGAN_NUM_THREADS`` is malformed.
    """
    added = process_environment()
    loaded = blas_loaded()
    # Each library reads its variables when it loads: NumPy's import loads OpenBLAS, while libgomp
    # usually loads later, with the first oneDNN or Numba kernel, and then sees the spin set here.
    late = [name for name in added if (openmp_loaded() if name == SPIN_ENV else loaded)]
    os.environ.update(added)
    if late and restart and os.name == "posix" and RESTARTED_ENV not in os.environ:
        os.environ[RESTARTED_ENV] = "1"
        _restart()
    brief = blas_idles_briefly() and not (loaded and TIMEOUT_ENV in added)
    kept = keep_freed_host_memory() if host_memory else False
    return ProcessSettings(added, brief, get_num_threads(), kept)
