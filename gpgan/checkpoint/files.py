"""Checkpoint files of a run folder: ``ckpt_<step:08d>.npz``, listed by step, pruned to the last K."""
import contextlib
import os
import re

from gpgan.checkpoint.npz import TMP_SUFFIX

__all__ = ["checkpoint_path", "checkpoint_step", "list_checkpoints", "latest_checkpoint", "prune_checkpoints"]

_NAME = re.compile(r"^ckpt_(\d+)\.npz$")
# temporary files of save_checkpoint: ".ckpt_00000100.npz.<random>.tmp"
_TEMP = re.compile(r"^\.ckpt_\d+\.npz\..+" + re.escape(TMP_SUFFIX) + "$")


def checkpoint_path(folder, step):
    """``folder/ckpt_<step:08d>.npz``."""
    if int(step) != step or step < 0:
        raise ValueError(f"checkpoint_path: step must be a non-negative integer, got {step!r}")
    return os.path.join(os.fspath(folder), f"ckpt_{int(step):08d}.npz")


def checkpoint_step(path):
    """The step in a checkpoint file name (``ckpt_00001000.npz`` -> 1000)."""
    match = _NAME.match(os.path.basename(os.fspath(path)))
    if match is None:
        raise ValueError(f"{path!r} is not a checkpoint file name (expected ckpt_<step>.npz)")
    return int(match.group(1))


def list_checkpoints(folder):
    """Paths of the ``ckpt_<step>.npz`` files in ``folder``, by increasing step ([] if the folder
    does not exist)."""
    folder = os.fspath(folder)
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    found = [(int(m.group(1)), name) for name in names if (m := _NAME.match(name))]
    return [os.path.join(folder, name) for _, name in sorted(found)]


def latest_checkpoint(folder):
    """The checkpoint with the largest step in ``folder``, or None."""
    paths = list_checkpoints(folder)
    return paths[-1] if paths else None


def prune_checkpoints(folder, keep_last):
    """Delete all but the ``keep_last`` checkpoints with the largest steps, and any temporary file
    an interrupted :func:`save_checkpoint` left behind. Returns the deleted paths."""
    if int(keep_last) != keep_last or keep_last < 0:
        raise ValueError(f"prune_checkpoints: keep_last must be a non-negative integer, got {keep_last!r}")
    folder = os.fspath(folder)
    paths = list_checkpoints(folder)
    doomed = paths[:max(len(paths) - int(keep_last), 0)]
    with contextlib.suppress(FileNotFoundError):
        doomed += [os.path.join(folder, name) for name in sorted(os.listdir(folder)) if _TEMP.match(name)]
    removed = []
    for path in doomed:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
            removed.append(path)
    return removed
