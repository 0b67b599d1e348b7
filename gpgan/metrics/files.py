"""Files of the image metrics: the cache folder, verified downloads, atomic ``.npz`` writes.

Everything the metrics download or derive (Inception weights, their ``.npz`` conversion, data-set
statistics) lives in :func:`cache_dir`, ``~/.cache/gpgan``. Downloads stream into a temporary
file beside the target, are checked for size and SHA-256, and only then renamed into place: an
interrupted or corrupt download never leaves a file under the final name.
"""
import hashlib
import os
import tempfile
import urllib.error
import urllib.request

import numpy

__all__ = ["cache_dir", "sha256sum", "download", "DownloadError", "save_npz_atomic"]


class DownloadError(RuntimeError):
    """A download failed (offline, HTTP error) or its size or SHA-256 was wrong."""


def cache_dir():
    """``~/.cache/gpgan`` (expanded; not created)."""
    return os.path.join(os.path.expanduser("~"), ".cache", "gpgan")


def sha256sum(path, chunk=1 << 20):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


def _temporary_beside(path, suffix):
    """An open temporary file in ``path``'s folder (created), with a normal file's mode."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=os.path.basename(path) + ".", suffix=suffix)
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(tmp, 0o666 & ~mask)  # mkstemp makes it owner-only
    return os.fdopen(fd, "wb"), tmp


def download(url, dest, sha256, size, progress=True, desc=None):
    """Fetch ``url`` into ``dest``, accepting it only with exactly ``size`` bytes and ``sha256``.

    Raises:
        DownloadError: on a network error or a size / hash mismatch; ``dest`` is then untouched
            and no partial file is left.
    """
    from tqdm import tqdm

    out, tmp = _temporary_beside(dest, ".part")
    try:
        digest, count = hashlib.sha256(), 0
        with out:
            try:
                response = urllib.request.urlopen(url, timeout=60)
            except (urllib.error.URLError, OSError, ValueError) as exc:
                raise DownloadError(f"could not download {url} ({exc})") from None
            with response, tqdm(total=size, unit="B", unit_scale=True, desc=desc or os.path.basename(dest),
                                disable=None if progress else True) as bar:
                for block in iter(lambda: response.read(1 << 20), b""):
                    out.write(block)
                    digest.update(block)
                    count += len(block)
                    bar.update(len(block))
                    if count > size:
                        break
        if count != size or digest.hexdigest() != sha256:
            got = f"{count} bytes" if count != size else f"SHA-256 {digest.hexdigest()}"
            raise DownloadError(f"the download of {url} has {got}, expected {size} bytes with SHA-256 "
                                f"{sha256} (corrupt or changed file; nothing was kept)")
        os.replace(tmp, dest)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return dest


def save_npz_atomic(path, arrays):
    """``numpy.savez(path, **arrays)`` through a temporary file and a rename."""
    out, tmp = _temporary_beside(path, ".tmp")
    try:
        with out:
            numpy.savez(out, **arrays)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return path
