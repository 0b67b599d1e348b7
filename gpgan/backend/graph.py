"""A device step captured once as a CUDA graph and replayed, with the host work around it.

A captured graph replays kernels with the arguments they had at capture time, so whatever a step
computes on the host and changes from one step to the next (a learning rate from a schedule,
Adam's bias corrections, the step number) must reach the kernels through device memory, and the
host bookkeeping of the step (counters) must still run at every replay. Two calls carry both:

- :func:`host_effect` ``(fn, *args)`` runs ``fn`` now; while a step is being captured it is also
  recorded, and every replay runs it again, in the same order, before the graph is launched.
- :func:`host_number` ``(value, dtype)``, called inside such an effect: outside a captured step
  it is ``dtype(value)``, the plain scalar; inside, it writes the value into the graph's table of
  host numbers and returns a 0-d device view of its slot (the k-th call of a step gets slot k).
  The table is copied to the device before each launch.

:class:`CapturedStep` does the capture: the step runs once on a stream of its own under capture,
with memory from a pool private to the graph (the addresses the graph reads and writes stay its
own; the table of host numbers, which is written from outside, is allocated before the capture),
then every call replays it. What the step keeps from one call to the next must be updated
in place (``a[...] = ``), never rebound, since the graph reads and writes the addresses it saw.
"""
import contextlib

import numpy

__all__ = ["host_effect", "host_number", "CapturedStep"]

_active = None  # the _HostNumbers of the step being captured or replayed, or None


class _HostNumbers:
    """The table of one graph's host numbers: per dtype, a host array and its device copy."""

    _CAPACITY = 1024

    def __init__(self):
        self._host, self._device, self._used = {}, {}, {}
        self.effects = []       # (fn, args) recorded during the capture
        self.recording = False
        self.rehearsing = False  # an eager run: numbers as fresh 0-d device arrays
        self.dtypes = set()      # the dtypes of the rehearsal's numbers

    def begin(self):
        self._used = {dtype: 0 for dtype in self._host}

    def allocate(self, dtype):
        """The table of ``dtype``. Called before the capture for every dtype the rehearsal used:
        memory taken during the capture could be a block that the graph's own kernels write
        earlier in the step (the pool recycles freed blocks), overwriting the uploaded numbers."""
        import cupy

        if dtype not in self._host:
            self._host[dtype] = numpy.zeros(self._CAPACITY, dtype)
            with cupy.cuda.using_allocator(None):  # plain cudaMalloc, never a recycled block
                self._device[dtype] = cupy.empty(self._CAPACITY, dtype)

    def number(self, value, dtype):
        import cupy

        dtype = numpy.dtype(dtype)
        if self.rehearsing:
            self.dtypes.add(dtype)
            return cupy.full((), value, dtype=dtype)
        self.allocate(dtype)
        k = self._used.get(dtype, 0)
        if k == self._CAPACITY:
            raise RuntimeError(f"a captured step uses more than {self._CAPACITY} host numbers of type {dtype}")
        self._host[dtype][k] = value
        self._used[dtype] = k + 1
        return self._device[dtype][k]

    def upload(self):
        for dtype, n in self._used.items():
            if n:
                self._device[dtype][:n].set(self._host[dtype][:n])


@contextlib.contextmanager
def _numbers(table):
    global _active
    previous, _active = _active, table
    try:
        yield
    finally:
        _active = previous


def host_number(value, dtype):
    """``value`` as the kernels of a step should read it: ``dtype(value)`` outside a captured
    step; a 0-d device array holding it inside one (call it only inside a :func:`host_effect`,
    which is what runs again at each replay)."""
    if _active is None:
        return numpy.dtype(dtype).type(value)
    return _active.number(value, dtype)


def host_effect(fn, *args):
    """Run ``fn(*args)`` (host work only: counters, :func:`host_number`), and again before every
    replay of the step being captured; returns what ``fn`` returns."""
    if _active is not None and _active.recording:
        _active.effects.append((fn, args))
    return fn(*args)


class CapturedStep:
    """``fn(*args)`` captured once as a CUDA graph (:meth:`capture`, which also runs it) and
    launched again by :meth:`replay`, on the current stream. ``args`` are the step's fixed input
    arrays: copy each call's inputs into them before :meth:`replay`.

    The first call of ``fn`` must not be the capture: :meth:`rehearse` runs it eagerly first, with
    its host numbers as device arrays, so that every kernel the capture launches is compiled and
    every state array it updates exists before the capture.
    """

    def __init__(self, fn):
        self.fn = fn
        self.graph = None
        self.result = None
        self._numbers = _HostNumbers()
        self._pool = self._stream = None

    def rehearse(self, *args):
        """Run ``fn(*args)`` eagerly (one real step), as the capture will run it; returns its result."""
        numbers = self._numbers
        numbers.rehearsing = True
        try:
            with _numbers(numbers):
                return self.fn(*args)
        finally:
            numbers.rehearsing = False

    def capture(self, *args):
        """Capture ``fn(*args)``, launch it once and return its result (arrays that every later
        replay overwrites in place)."""
        import cupy

        numbers = self._numbers
        for dtype in numbers.dtypes:
            numbers.allocate(dtype)
        numbers.begin()
        numbers.recording = True
        self._pool = cupy.cuda.MemoryPool()
        self._stream = stream = cupy.cuda.Stream(non_blocking=True)  # kept: libraries key state by stream
        graph = None
        try:
            with _numbers(numbers), cupy.cuda.using_allocator(self._pool.malloc), stream:
                stream.begin_capture()
                try:
                    self.result = self.fn(*args)
                finally:
                    graph = stream.end_capture()
        finally:
            numbers.recording = False
        self.graph = graph
        self._launch()
        return self.result

    def replay(self):
        """Run the recorded host effects, copy the host numbers over and launch the graph;
        returns the capture's result, now holding this step's values."""
        numbers = self._numbers
        numbers.begin()
        with _numbers(numbers):
            for fn, args in numbers.effects:
                fn(*args)
        self._launch()
        return self.result

    def pool_bytes(self):
        """Device memory held by the graph's private pool."""
        return 0 if self._pool is None else self._pool.total_bytes()

    def _launch(self):
        self._numbers.upload()
        self.graph.launch()
