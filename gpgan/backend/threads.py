"""Large NumPy copies and elementwise passes split over the cores this process may use.

NumPy runs its copies and ufuncs on one core (BLAS alone is multi-threaded), but releases the GIL
while it does, so a few Python threads working on disjoint slices of one array run at once.
:func:`parallel_range` splits a range of indexes (usually the batch axis) into one contiguous
chunk per thread; the calling thread takes the first chunk, a small pool the others.

The number of threads is ``GPGAN_NUM_THREADS`` or :func:`set_num_threads`'s; by default, the cores
this process should use (:func:`gpgan.backend.core_share.process_cores`: its share in an MPI run),
whatever was imported first. Split passes gain most where OpenBLAS's idle workers go to sleep soon
after a product (:func:`gpgan.configure_process`); with OpenBLAS's default spin they gain little,
and lose nothing. CuPy arrays are never split: a GPU kernel is parallel already.
"""
import os
import threading
from concurrent.futures import ThreadPoolExecutor

from gpgan.backend.core_share import available_cores, process_cores
from gpgan.backend.mechanisms import off

__all__ = ["available_cores", "get_num_threads", "set_num_threads", "parallel_range", "would_split"]

# Below this many bytes of work per thread, splitting costs more than it saves: waking a pool
# thread and handing the GIL back and forth is a fixed cost per split, which this much work per
# thread keeps small.
MIN_BYTES_PER_THREAD = 4 << 20


def _default_threads():
    env = os.environ.get("GPGAN_NUM_THREADS")
    if not env:
        return process_cores()
    try:
        value = int(env)
    except ValueError:
        raise ValueError(f"GPGAN_NUM_THREADS must be a positive integer, got {env!r}") from None
    if value < 1:
        raise ValueError(f"GPGAN_NUM_THREADS must be a positive integer, got {env!r}")
    return value


_state = threading.local()
_lock = threading.Lock()
_threads = None
_pool = None
_pool_workers = 0


def get_num_threads():
    """The number of threads large array passes are split over (1: not split)."""
    global _threads
    if _threads is None:
        _threads = _default_threads()
    return _threads


def set_num_threads(n):
    """Split large array passes over ``n`` threads (an int >= 1; 1 turns the splitting off)."""
    global _threads
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"set_num_threads: n must be an int >= 1, got {n!r}")
    with _lock:
        _threads = n


def _get_pool(workers):
    """The pool, (re)made with ``workers`` threads when it has another number."""
    global _pool, _pool_workers
    with _lock:
        if _pool is None or _pool_workers != workers:
            if _pool is not None:
                _pool.shutdown(wait=True)
            _pool = ThreadPoolExecutor(workers, thread_name_prefix="gpgan")
            _pool_workers = workers
        return _pool


def _run_marked(fn, start, stop):
    _state.inside = True
    try:
        fn(start, stop)
    finally:
        _state.inside = False


def _split_count(n, nbytes):
    """How many chunks :func:`parallel_range` cuts ``n`` items moving ``nbytes`` bytes into."""
    if nbytes is not None and nbytes < 2 * MIN_BYTES_PER_THREAD:
        return 1  # the cheap test first: small passes (a toy MLP's activations) come every call
    threads = min(get_num_threads(), n)
    if nbytes is not None and MIN_BYTES_PER_THREAD > 0:
        threads = min(threads, int(nbytes // MIN_BYTES_PER_THREAD))
    if getattr(_state, "inside", False) or off.split_passes:
        return 1
    return max(threads, 1)


def would_split(n, nbytes):
    """True when :func:`parallel_range` would run ``n`` items moving ``nbytes`` bytes on more than
    one thread (callers skip the chunking's own cost otherwise)."""
    return _split_count(n, nbytes) > 1


def parallel_range(fn, n, nbytes=None):
    """Call ``fn(start, stop)`` on contiguous chunks covering ``range(n)``, in parallel.

    ``nbytes`` is the size of the work (bytes moved); with less than ``MIN_BYTES_PER_THREAD`` per
    thread, or from inside a chunk, or with one thread, ``fn(0, n)`` runs alone. The chunks must
    touch disjoint memory. Exceptions of any chunk are raised here after all chunks finished.
    """
    threads = _split_count(n, nbytes)
    if threads <= 1:
        fn(0, n)
        return
    bounds = [n * k // threads for k in range(threads + 1)]
    pool = _get_pool(threads - 1)
    futures = [pool.submit(_run_marked, fn, bounds[k], bounds[k + 1]) for k in range(1, threads)]
    error = None
    try:
        _run_marked(fn, bounds[0], bounds[1])
    except BaseException as exc:  # wait for the other chunks before raising
        error = exc
    for f in futures:
        try:
            f.result()
        except BaseException as exc:
            error = error or exc
    if error is not None:
        raise error
