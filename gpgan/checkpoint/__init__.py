"""Checkpoints: the ``.npz`` file format of a training state (arrays plus one JSON entry, no
pickles), read with clear errors for damaged or foreign files, and atomic file writes.

Which checkpoints a run keeps, and their names, are the run folder's business
(:class:`gpgan.train.run.RunFolder`).

Public names: :func:`save_checkpoint`, :func:`load_checkpoint`, :func:`read_meta`, :func:`verify`,
:class:`CheckpointError`, :func:`atomic_write`, :func:`is_temporary`.
"""
from gpgan.checkpoint.atomic import atomic_write, is_temporary
from gpgan.checkpoint.npz import CheckpointError, load_checkpoint, read_meta, save_checkpoint, verify

__all__ = ["save_checkpoint", "load_checkpoint", "read_meta", "verify", "CheckpointError", "atomic_write",
           "is_temporary"]
