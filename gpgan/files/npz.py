"""Reading ``.npz`` files without pickles, with one set of checks and one wording for every reader
(checkpoints, FID statistics, Inception weights, the feature caches).

NumPy's own refusals are not for users: a file that is not a zip archive reaches its pickle path
and is refused with advice to load it unsafely. So the archive is checked first, and every
failure becomes an :class:`NpzError` whose message names the file (``what`` and ``path``) and
what is wrong with it.
"""
import os
import zipfile
import zlib

import numpy

__all__ = ["NpzError", "open_npz", "read_entry", "read_arrays"]

# What zipfile, zlib and NumPy raise on a damaged archive: flipped bytes (a CRC mismatch), a file
# cut short, a garbled member header.
_DAMAGE = (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, KeyError)


class NpzError(ValueError):
    """An ``.npz`` file that cannot be read: not a zip archive, damaged, or holding a pickle."""


def _damaged(what, path, exc):
    reason = str(exc).splitlines()[0] if str(exc) else "an entry does not read back"
    return NpzError(f"{what} {path} is damaged and cannot be read ({reason})")


def open_npz(path, what):
    """The open archive at ``path`` (NumPy's ``NpzFile``, a context manager; no entry read yet).
    ``what`` names the file in messages, e.g. ``"checkpoint"``. FileNotFoundError when it does not
    exist, :class:`NpzError` when it is not a readable zip archive."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{what} {path} does not exist")
    if not zipfile.is_zipfile(path):  # also keeps NumPy from trying (and refusing) to unpickle it
        raise NpzError(f"{what} {path} is not an .npz file (not a zip archive: cut short, or another format)")
    try:
        return numpy.load(path, allow_pickle=False)
    except _DAMAGE as exc:
        raise _damaged(what, path, exc) from exc


def read_entry(npz, key, path, what):
    """The array ``key`` of an archive opened by :func:`open_npz`; a pickled entry or a damaged
    one (a CRC mismatch is found here, when the entry is read) is an :class:`NpzError`."""
    try:
        return npz[key]
    except ValueError as exc:
        if "allow_pickle" in str(exc):
            raise NpzError(f"{what} {path}: entry {key!r} holds pickled Python objects; .npz files are "
                           "read without pickles and such entries are refused") from exc
        raise _damaged(what, path, exc) from exc
    except _DAMAGE as exc:
        raise _damaged(what, path, exc) from exc


def read_arrays(path, what, keys=None):
    """``{name: array}`` of every entry of the ``.npz`` at ``path``, or of those named in ``keys``
    that it has (a missing one is left out: the caller says what it needed)."""
    with open_npz(path, what) as npz:
        names = [k for k in npz.files if keys is None or k in keys]
        return {k: read_entry(npz, k, path, what) for k in names}
