"""The communicator interface, the one-process communicator, and the rules by which the processes
of a run agree: a decision that one process makes (:meth:`Communicator.on_root`), a step that any
process may fail (:meth:`Communicator.together`), and the exit (:meth:`Communicator.finish`).

Collectives must be called by every process in the same order; a process that leaves the run
while the others wait in one would hang them. So every failure either reaches every process (the
two helpers above raise the same exception everywhere) or ends the whole run
(:meth:`Communicator.abort`).
"""
import os
import pickle
import platform
import sys

import numpy

__all__ = ["Communicator", "LocalCommunicator", "PeerFailure"]


class PeerFailure(RuntimeError):
    """Another process's exception, carried as text because it could not be sent as it was."""


def _portable(exc):
    """``exc`` if it survives pickling unchanged, else a :class:`PeerFailure` with its text."""
    try:
        copy = pickle.loads(pickle.dumps(exc))
        if type(copy) is type(exc) and str(copy) == str(exc):
            return exc
    except Exception:  # any exception may hold anything: fall back to its text
        pass
    return PeerFailure(f"{type(exc).__name__}: {exc}")


class Communicator:
    """The processes of one run, as seen from one of them.

    Attributes:
        rank: this process's index, 0 .. size - 1 (rank 0 is the *root*: it alone writes files).
        size: the number of processes.
        local_rank, local_size: its index among the processes on its machine, and their number.
        backend: "local", "mpi" or "nccl".

    Device collectives take arrays of the device the communicator was made for
    (:meth:`for_device`) and work in place; host collectives take small host values.
    """

    rank, size, local_rank, local_size = 0, 1, 0, 1
    backend = "local"

    @property
    def is_root(self):
        return self.rank == 0

    @property
    def host_name(self):
        return platform.node()

    def for_device(self, device):
        """The communicator for arrays on ``device`` ("cpu" or "cuda")."""
        return self

    # -- collectives (every process calls them, in the same order) ------------------------------
    def all_reduce_sum(self, array):
        """Replace ``array`` (a contiguous array on this communicator's device) by its sum over
        the processes; returns it."""
        raise NotImplementedError

    def broadcast(self, array, root=0):
        """Overwrite ``array`` with rank ``root``'s; returns it."""
        raise NotImplementedError

    def all_reduce_host(self, values, op="sum"):
        """The elementwise ``op`` ("sum" or "max") over the processes of ``values`` (a sequence of
        numbers), as a float64 NumPy array."""
        raise NotImplementedError

    def broadcast_object(self, obj, root=0):
        """Rank ``root``'s ``obj`` (picklable), on every process."""
        raise NotImplementedError

    def all_gather_object(self, obj):
        """``[obj of rank 0, obj of rank 1, ...]`` on every process."""
        raise NotImplementedError

    def mean(self, values):
        """``{name: mean over the processes}`` of ``values`` (name -> number; the same names, in
        the same order, on every process)."""
        names = list(values)
        sums = self.all_reduce_host([values[k] for k in names], "sum")
        return {k: float(s) / self.size for k, s in zip(names, sums)}

    # -- agreement -----------------------------------------------------------------------------
    def on_root(self, fn):
        """Call ``fn()`` on rank 0 only (a decision, a file written once); every process returns
        its result (which must pickle) or raises its exception."""
        outcome = failure = None
        if self.is_root:
            try:
                outcome = (True, fn())
            except Exception as exc:
                outcome, failure = (False, _portable(exc)), exc
        ok, value = self.broadcast_object(outcome)
        if ok:
            return value
        exc = failure if failure is not None else value  # the root raises its own, with its traceback
        exc.rank = 0
        raise exc

    def together(self, fn):
        """Call ``fn()`` on every process (a step that one of them may fail, such as reading the
        data); returns this process's result when none failed, else raises the exception of the
        lowest failing rank on every process, with its ``rank`` attribute set."""
        try:
            result, failure = fn(), None
        except Exception as exc:
            result, failure = None, exc
        failures = self.all_gather_object(None if failure is None else _portable(failure))
        for rank, exc in enumerate(failures):
            if exc is not None:
                if rank == self.rank:
                    exc = failure  # raise our own with its traceback
                exc.rank = rank
                raise exc
        return result

    def finish(self, status, timeout=120.0):
        """Agree on the exit status (the largest of every process's ``status``) before leaving;
        a process that does not arrive within ``timeout`` seconds (stuck in a collective that
        another process left) is taken down by :meth:`abort`."""
        return status

    def abort(self, status):
        """End every process of the run now with ``status`` (a process left the run alone)."""
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


class LocalCommunicator(Communicator):
    """A run of one process: every collective returns its input."""

    def all_reduce_sum(self, array):
        return array

    def broadcast(self, array, root=0):
        return array

    def all_reduce_host(self, values, op="sum"):
        if op not in ("sum", "max"):
            raise ValueError(f"all_reduce_host: op must be 'sum' or 'max', got {op!r}")
        return numpy.asarray(values, dtype=numpy.float64).copy()

    def broadcast_object(self, obj, root=0):
        return obj

    def all_gather_object(self, obj):
        return [obj]

    def mean(self, values):
        return {k: float(v) for k, v in values.items()}

    def on_root(self, fn):
        return fn()

    def together(self, fn):
        return fn()
