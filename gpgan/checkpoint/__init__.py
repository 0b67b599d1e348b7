"""Checkpoints: the ``.npz`` file format of a training state (arrays plus one JSON entry, no
pickles), written atomically and read with clear errors for damaged or foreign files.

Which checkpoints a run keeps, and their names, are the run folder's business
(:class:`gpgan.train.run.RunFolder`).

Public names: :func:`save_checkpoint`, :func:`load_checkpoint`, :func:`read_meta`, :func:`verify`,
:class:`CheckpointError`.
"""
from gpgan.checkpoint.npz import CheckpointError, load_checkpoint, read_meta, save_checkpoint, verify

__all__ = ["save_checkpoint", "load_checkpoint", "read_meta", "verify", "CheckpointError"]
