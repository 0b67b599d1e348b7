"""Which library ran each dispatched operation: :func:`record_dispatch`, for tests and benchmarks.

The dispatch functions where gpgan chooses between oneDNN and another library note each call here
(:func:`note`), and only while a :func:`record_dispatch` block is open: outside one, what a call
pays is one test of the module-level list :data:`recording`, which stays empty.

Each record is a :class:`Dispatch` ``(op, library, fused, call)``:

* ``op``: the :mod:`gpgan.kernels` function called: ``"conv2d"``, ``"conv_transpose2d"``,
  ``"conv2d_grad_weight"``, ``"matmul"`` or ``"fused_affine"``;
* ``library``: ``"onednn"``; ``"numpy"`` (NumPy's matmul) or ``"cublas"`` for a :func:`matmul`
  that oneDNN did not take; ``"portable"`` where the function returned None and its caller runs
  the portable NumPy / CuPy form (for :func:`fused_affine`: the product and each fused part apart,
  the product noted as its own ``"matmul"``);
* ``fused``: of a oneDNN :func:`fused_affine`, which parts its product's own pass took, in this
  order: ``"bias"``, ``"rectifier"``, ``"addend"``; else ``()``;
* ``call``: of a oneDNN product, how its call reached the library: ``"compiled"`` (from
  Numba-compiled code) or ``"ctypes"``; else None.

Records come from every thread of the process, in the order the calls ended; nested blocks each
get every record made while they are open.
"""
import contextlib
from typing import NamedTuple, Optional, Tuple

__all__ = ["Dispatch", "record_dispatch", "note", "recording"]


class Dispatch(NamedTuple):
    """One dispatched call: see the module's docstring for each field's values."""
    op: str
    library: str
    fused: Tuple[str, ...] = ()
    call: Optional[str] = None


#: The record lists of the :func:`record_dispatch` blocks open now. The dispatch imports this list
#: itself and tests it before noting (``if recording: note(...)``), so it is changed in place,
#: never rebound.
recording = []


def note(op, library, fused=(), call=None):
    """Add ``Dispatch(op, library, fused, call)`` to each open block's records."""
    record = Dispatch(op, library, fused, call)
    for records in list(recording):
        records.append(record)


@contextlib.contextmanager
def record_dispatch():
    """A block that yields the list of :class:`Dispatch` records of the calls made while it is
    open (its own list: the records stay after the block closes)::

        with gpgan.kernels.record_dispatch() as records:
            y = F.linear(x, w, b, negative_slope=0.0)
        # where oneDNN takes the product (call: "compiled" once Numba is loaded):
        # records == [Dispatch("fused_affine", "onednn", ("bias", "rectifier"), "ctypes")]
    """
    records = []
    recording.append(records)
    try:
        yield records
    finally:
        # By identity: two blocks' lists may be equal.
        del recording[next(i for i, r in enumerate(recording) if r is records)]
