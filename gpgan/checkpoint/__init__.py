"""Checkpoints: one atomically written ``.npz`` per checkpoint (no pickles), and the helpers a
trainer needs to find and prune them.

Public names: :func:`save_checkpoint`, :func:`load_checkpoint`, :func:`read_meta`,
:class:`CheckpointError`, :func:`checkpoint_path`, :func:`checkpoint_step`,
:func:`list_checkpoints`, :func:`latest_checkpoint`, :func:`prune_checkpoints`.
"""
from gpgan.checkpoint.files import (
    checkpoint_path,
    checkpoint_step,
    latest_checkpoint,
    list_checkpoints,
    prune_checkpoints,
)
from gpgan.checkpoint.npz import CheckpointError, load_checkpoint, read_meta, save_checkpoint

__all__ = ["save_checkpoint", "load_checkpoint", "read_meta", "CheckpointError", "checkpoint_path",
           "checkpoint_step", "list_checkpoints", "latest_checkpoint", "prune_checkpoints"]
