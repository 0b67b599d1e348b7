"""Atomic file writes: write a temporary file beside the target, flush and fsync it, then rename
it over the target, so a crash leaves the old file or the new one, never a torn one.

The temporary files are named ``.<target name>.<random>.tmp``; :func:`is_temporary` recognizes
them, so whoever prunes a folder can also remove the ones a killed process left behind.
"""
import contextlib
import errno
import os
import re
import tempfile

__all__ = ["append_text", "atomic_write", "describe_os_error", "is_temporary", "make_folder"]

_TMP_SUFFIX = ".tmp"
_TEMPORARY = re.compile(r"^\..+\.[^.]+" + re.escape(_TMP_SUFFIX) + "$")


def is_temporary(name):
    """Whether a file name (no folder) is one of :func:`atomic_write`'s temporary files."""
    return bool(_TEMPORARY.match(name))


def make_folder(folder):
    """``os.makedirs(folder, exist_ok=True)``; when a file stands where a folder of the path must be,
    the NotADirectoryError names that file (Python's own error names ``folder`` and says "File
    exists" or "Not a directory")."""
    try:
        os.makedirs(folder, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        part = os.path.abspath(folder)
        while part != os.path.dirname(part):
            if os.path.lexists(part) and not os.path.isdir(part):
                raise NotADirectoryError(errno.ENOTDIR, "a file, not a folder", part) from None
            part = os.path.dirname(part)
        raise


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync_folder(folder):
    """Make the rename itself durable (POSIX); a no-op where folders cannot be opened."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def describe_os_error(exc):
    """``"PATH: reason"`` (e.g. ``"run/checkpoints/ckpt_000400.npz: No space left on device"``)
    for an OSError, without Python's ``[Errno N]``; its plain text when it names no file."""
    reason = exc.strerror or str(exc)
    return f"{exc.filename}: {reason}" if exc.filename is not None else reason


def _name_the_file(exc, path):
    """An OSError from writing into an open file (ENOSPC, EIO) names no file: name ``path``."""
    if isinstance(exc, OSError) and exc.filename is None and exc.errno is not None and exc.strerror:
        exc.filename = path  # (an OSError made from a message alone keeps its plain text)


def append_text(path, text):
    """Append ``text`` (UTF-8) to ``path``, all of it or nothing: a failed write (a full disk) cuts
    the file back to its length before, so no partial line is left; the OSError names ``path``."""
    path = os.fspath(path)
    with open(path, "ab") as f:
        start = f.tell()
        try:
            f.write(text.encode("utf-8"))
            f.flush()
        except OSError as exc:
            _name_the_file(exc, path)
            with contextlib.suppress(OSError):
                f.truncate(start)
            raise


def atomic_write(path, content):
    """Write ``path`` atomically. ``content``: bytes, str (UTF-8), or a function that writes
    into the binary file object it is given. The folder is created if needed. On failure (a full
    disk) the temporary file is removed, ``path`` keeps what it held, and the OSError names
    ``path``."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    make_folder(folder)
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(path) + ".", suffix=_TMP_SUFFIX)
    except OSError as exc:  # it names the temporary file, which the user never asked for
        raise OSError(exc.errno, exc.strerror, path) from None
    try:
        with os.fdopen(fd, "wb") as f:
            if callable(content):
                content(f)
            else:
                f.write(content.encode("utf-8") if isinstance(content, str) else content)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it owner-only; give it a normal file's mode
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        _name_the_file(exc, path)
        raise
    _fsync_folder(folder)
