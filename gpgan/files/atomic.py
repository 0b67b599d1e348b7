"""Atomic file writes: write a temporary file beside the target, flush and fsync it, then rename
it over the target, so a crash leaves the old file or the new one, never a torn one.

The temporary files are named ``.<target name>.<random>.tmp``; :func:`is_temporary` recognizes
them, so whoever prunes a folder can also remove the ones a killed process left behind.
"""
import contextlib
import errno
import os
import re
import shutil
import tempfile

__all__ = ["append_text", "atomic_write", "check_folder_path", "check_writable_folder_path", "describe_os_error",
           "error_text", "is_temporary", "make_folder", "replaced_folder", "staged_folder"]

_TMP_SUFFIX = ".tmp"
_MAKE_ATTEMPTS = 3  # of a temporary whose folder a concurrent writer's rollback removed
_TEMPORARY = re.compile(r"^\..+\.[^.]+" + re.escape(_TMP_SUFFIX) + "$")


def is_temporary(name):
    """Whether a file name (no folder) is one of :func:`atomic_write`'s temporary files."""
    return bool(_TEMPORARY.match(name))


def check_folder_path(folder):
    """Raise the NotADirectoryError :func:`make_folder` would raise, naming the file that stands
    where a folder of ``folder``'s path must be; makes nothing (a check before long work)."""
    part = os.path.abspath(folder)
    while part != os.path.dirname(part):
        if os.path.lexists(part) and not os.path.isdir(part):
            raise NotADirectoryError(errno.ENOTDIR, "a file, not a folder", part)
        part = os.path.dirname(part)


def check_writable_folder_path(folder):
    """:func:`check_folder_path`, and raise the PermissionError that making or writing ``folder``
    would meet, naming the nearest folder of its path that exists and cannot be written; makes
    nothing (a check before long work, and what a dry run promises)."""
    check_folder_path(folder)
    part = os.path.abspath(folder)
    while not os.path.isdir(part):
        part = os.path.dirname(part)
    if not os.access(part, os.W_OK | os.X_OK):
        raise PermissionError(errno.EACCES, "Permission denied (a folder this process cannot write in)", part)


def make_folder(folder):
    """``os.makedirs(folder, exist_ok=True)``; when a file stands where a folder of the path must be,
    the NotADirectoryError names that file (Python's own error names ``folder`` and says "File
    exists" or "Not a directory")."""
    try:
        os.makedirs(folder, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        try:
            check_folder_path(folder)
        except NotADirectoryError as exc:
            raise exc from None
        raise


def missing_folders(path):
    """The folders above ``path`` that do not exist yet, outermost first (those a write of
    ``path`` makes, and a failed one removes again)."""
    missing = []
    folder = os.path.dirname(os.path.abspath(path))
    while not os.path.lexists(folder):
        missing.append(folder)
        folder = os.path.dirname(folder)
    return missing[::-1]


def remove_empty_folders(folders):
    """Remove ``folders`` (from :func:`missing_folders`) innermost first while they are empty. A
    concurrent writer that made the same folders may see one go between making it and creating its
    temporary there; :func:`atomic_write` and :func:`staged_folder` make it again and go on."""
    for folder in reversed(folders):
        try:
            os.rmdir(folder)
        except OSError:  # not empty (another writer's files), or gone: leave it and those above
            return


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _temporary_beside(path, folder):
    """A new empty temporary file (or ``folder``) beside ``path``, named as :func:`is_temporary`
    knows, with the mode a plain new file (folder) would get; the folders above are made. An
    OSError names ``path``, not the temporary, which the user never asked for."""
    parent = os.path.dirname(os.path.abspath(path))
    options = dict(dir=parent, prefix="." + os.path.basename(os.path.abspath(path)) + ".", suffix=_TMP_SUFFIX)
    for attempt in range(_MAKE_ATTEMPTS):
        make_folder(parent)
        try:
            if folder:
                tmp = tempfile.mkdtemp(**options)
            else:
                fd, tmp = tempfile.mkstemp(**options)
                os.close(fd)
            os.chmod(tmp, (0o777 if folder else 0o666) & ~_umask())  # tempfile makes them owner-only
            return tmp
        except OSError as exc:
            # A folder gone between make_folder and the create was removed by a concurrent
            # writer's failed write (remove_empty_folders, the folder then empty): make it again.
            if not (isinstance(exc, FileNotFoundError) and attempt + 1 < _MAKE_ATTEMPTS):
                raise OSError(exc.errno, exc.strerror, os.fspath(path)) from None


def _temporary_making_folders(path, folder):
    """``(temporary, made)``: :func:`_temporary_beside` of ``path``, and the folders above ``path``
    that it made, for a failed write to hand to :func:`remove_empty_folders` (they are removed at once
    when the temporary itself cannot be made)."""
    made = missing_folders(path)
    try:
        return _temporary_beside(path, folder), made
    except BaseException:
        remove_empty_folders(made)
        raise


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


def error_text(exc):
    """An exception's message for a one-line error: an OSError as :func:`describe_os_error` gives
    it, any other as its text."""
    return describe_os_error(exc) if isinstance(exc, OSError) else str(exc)


def _name_the_file(exc, path):
    """An OSError from writing into an open file (ENOSPC, EIO) names no file: name ``path``."""
    if isinstance(exc, OSError) and exc.filename is None and exc.errno is not None and exc.strerror:
        exc.filename = path  # (an OSError made from a message alone keeps its plain text)


def append_text(path, text):
    """Append ``text`` (UTF-8) to ``path``, all of it or nothing: a failed write (a full disk) cuts
    the file back to its length before, so no partial line is left; the OSError names ``path``."""
    path = os.fspath(path)
    data = text.encode("utf-8")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    except OSError as exc:
        _name_the_file(exc, path)
        raise
    try:
        # Unbuffered: a buffered file would flush again on truncate and on close, fail again on a
        # full disk, and so neither cut the file back nor name it.
        start = os.lseek(fd, 0, os.SEEK_END)
        try:
            written = 0
            while written < len(data):
                written += os.write(fd, data[written:])
        except OSError as exc:
            _name_the_file(exc, path)
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)
            raise
    finally:
        os.close(fd)


def atomic_write(path, content):
    """Write ``path`` atomically. ``content``: bytes, str (UTF-8), or a function that writes
    into the binary file object it is given. The folder is created if needed. On failure (a full
    disk) the temporary file is removed, ``path`` keeps what it held, and the OSError names
    ``path``; the folders it made for ``path`` are removed again."""
    path = os.fspath(path)
    tmp, made = _temporary_making_folders(path, folder=False)
    try:
        with open(tmp, "wb") as f:
            if callable(content):
                content(f)
            else:
                f.write(content.encode("utf-8") if isinstance(content, str) else content)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        remove_empty_folders(made)
        _name_the_file(exc, path)
        raise
    _fsync_folder(os.path.dirname(os.path.abspath(path)))


@contextlib.contextmanager
def staged_folder(out_dir):
    """Fill ``out_dir`` all at once: yields a new hidden folder beside it (same filesystem) to
    write into; when the block ends without an error its files are moved into ``out_dir`` (made
    if needed; renames, so no new space is needed), else they are removed and ``out_dir`` is left
    as it was (with the folders above it that were made for it). An OSError that names a file of
    the staging folder names its place in ``out_dir`` instead (one that names no file names
    ``out_dir``)."""
    out_dir = os.fspath(out_dir)
    staging, made = _temporary_making_folders(out_dir, folder=True)
    filled = False
    try:
        try:
            yield staging
        except OSError as exc:
            if exc.filename is None:
                _name_the_file(exc, out_dir)
            elif os.path.dirname(os.fspath(exc.filename)) == staging:
                exc.filename = os.path.join(out_dir, os.path.basename(exc.filename))
            raise
        if not os.path.isdir(out_dir):
            os.rename(staging, out_dir)
            filled = True
            return
        for name in sorted(os.listdir(staging)):
            os.replace(os.path.join(staging, name), os.path.join(out_dir, name))
        filled = True
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # nothing left where the block failed (or all moved)
        if not filled:
            remove_empty_folders(made)


@contextlib.contextmanager
def replaced_folder(folder):
    """Make ``folder`` anew all at once: yields a new hidden folder beside it to fill; when the
    block ends without an error that folder takes ``folder``'s place and the old ``folder`` (if
    any) is removed, else the new one is removed and ``folder`` is left as it was. Between the two
    renames a crash leaves the old folder under a hidden temporary name beside it, never a torn one
    under ``folder``'s; such leftovers of a replacement that was killed are removed when the next
    one starts. ``folder`` may not be a symbolic link (ValueError): replacing it would replace the
    link, not the folder it points to."""
    folder = os.fspath(folder)
    _remove_leftovers(folder)
    staging = _temporary_beside(folder, folder=True)
    try:
        yield staging
        old = None
        if os.path.lexists(folder):
            old = _temporary_beside(folder, folder=True)
            os.rmdir(old)  # only its name is wanted: the old folder is renamed onto it
            os.rename(folder, old)
        try:
            os.rename(staging, folder)
        except OSError:
            if old is not None:
                os.rename(old, folder)
            raise
        _fsync_folder(os.path.dirname(os.path.abspath(folder)))
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # nothing left where the block failed


def _remove_leftovers(folder):
    """Remove the hidden temporary folders a killed :func:`replaced_folder` of ``folder`` left
    beside it (refusing a ``folder`` that is a symbolic link)."""
    if os.path.islink(folder):
        raise ValueError(f"{folder} is a symbolic link; name the folder it points to")
    parent, base = os.path.split(os.path.abspath(folder))
    try:
        names = os.listdir(parent)
    except OSError:
        return
    prefix = "." + base + "."
    for name in names:
        path = os.path.join(parent, name)
        middle = name[len(prefix):-len(_TMP_SUFFIX)] if name.startswith(prefix) and name.endswith(_TMP_SUFFIX) else ""
        # tempfile's random part has no dot: ".records.x.abc.tmp" is another folder's ("records.x")
        if middle and "." not in middle and os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
