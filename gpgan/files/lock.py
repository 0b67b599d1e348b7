"""A lock file that one process at a time holds: the writer of a run folder, or the sweep that runs
the trainers of an output folder.

It is an advisory ``flock`` on the file, which the kernel lets go when the process ends however it
ends (no stale lock is ever left to remove), with the holder's process id written inside for the
message of whoever is refused. Where the file system cannot lock (some network mounts), the lock
is not taken and the holder goes on as before locks existed.
"""
import errno
import os

try:
    import fcntl
except ImportError:  # not POSIX: no locks
    fcntl = None

__all__ = ["LockHeld", "FileLock"]

# A file system that cannot lock says so with one of these; the holder goes on unlocked.
_CANNOT_LOCK = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}


class LockHeld(RuntimeError):
    """Another process holds the lock; ``pid``: its process id, when it could be read (else None)."""

    def __init__(self, path, pid):
        self.path, self.pid = path, pid
        super().__init__(f"{path} is held by process {pid if pid is not None else '(unknown)'}")


class FileLock:
    """The lock of ``path`` (made when missing): :meth:`acquire` takes it or raises
    :class:`LockHeld`; :meth:`release` lets it go, as the end of the process does. One object
    holds it at a time; a second :class:`FileLock` of the same path is refused, even in this
    process."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self._fd = None

    @property
    def held(self):
        return self._fd is not None

    def acquire(self):
        if self._fd is not None or fcntl is None:
            return
        # A holder may remove the file while it holds it (a folder removed whole): a process that
        # opened it before then and locks it after finds it no longer the path's file, and starts over.
        for _ in range(100):
            opened = self._open()
            if opened is None:
                return
            fd, writable = opened
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pid = _read_pid(fd)
                os.close(fd)
                raise LockHeld(self.path, pid) from None
            except OSError as exc:
                os.close(fd)
                if exc.errno in _CANNOT_LOCK:
                    return
                raise
            if _same_file(fd, self.path):
                break
            os.close(fd)
        else:
            raise OSError(errno.EAGAIN, "the lock file keeps being replaced", self.path)
        if writable:
            try:  # the holder's id, for the message of a process that is refused
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()}\n".encode())
            except OSError:  # (a full disk: the lock holds without it)
                pass
        self._fd = fd

    def _open(self):
        """``(descriptor, writable)`` of the lock file (made when missing), or None where there
        is none and none can be made (a read-only folder: nobody can write there to race with)."""
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666), True
        except OSError as exc:  # a read-only folder or mount: lock the file there, if any, read-only
            if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise
            try:
                return os.open(self.path, os.O_RDONLY), False
            except OSError:
                return None

    def release(self):
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the last descriptor lets the flock go

    def __del__(self):  # an object dropped while holding: as the process's end would
        self.release()

    def __getstate__(self):  # a copy in another process holds nothing (the descriptor is this one's)
        return {"path": self.path, "_fd": None}

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()


def _same_file(fd, path):
    """Whether the open file ``fd`` is still the file at ``path``."""
    try:
        here, there = os.fstat(fd), os.stat(path)
    except OSError:  # (gone)
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def _read_pid(fd):
    try:
        text = os.pread(fd, 32, 0).decode("ascii").strip()
        return int(text) if text.isdigit() else None
    except (OSError, UnicodeDecodeError):
        return None
