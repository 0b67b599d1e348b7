"""Downloads that are checked before they are kept, and the cache folder of downloaded files.

A download streams into a temporary file beside its target (a progress bar on a terminal), is
checked for size and digest, and only then renamed into place: an interrupted or corrupt download
never leaves a file under the final name, nor a partial one beside it.
"""
import hashlib
import http.client
import os
import urllib.error
import urllib.request

from gpgan.files.atomic import atomic_write

__all__ = ["DownloadError", "cache_dir", "digest", "download", "store_checked"]


_NAMES = {"sha256": "SHA-256", "md5": "md5"}


class DownloadError(RuntimeError):
    """A download failed (offline, HTTP error) or its size or digest was wrong."""


def cache_dir():
    """``~/.cache/gpgan`` (expanded; not created): downloaded weights and derived statistics."""
    return os.path.join(os.path.expanduser("~"), ".cache", "gpgan")


def digest(path, algorithm="sha256", chunk=1 << 20):
    """The hex digest of the file at ``path`` (``algorithm``: a hashlib name, e.g. "md5")."""
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def store_checked(dest, chunks, checksum, size=None, algorithm="sha256", what=None):
    """Write the byte blocks ``chunks`` yields into ``dest``, keeping the file only with digest
    ``checksum`` (and ``size`` bytes, when given): the one rule by which a download or a copy
    out of an archive takes its name.

    Args:
        chunks: an iterable of ``bytes``; reading stops once more than ``size`` bytes came.
        what: the source, for the error message (default: ``dest``).

    Raises:
        DownloadError: a size or digest mismatch; ``dest`` is then untouched and no partial file
            is left. Errors ``chunks`` raises pass through, with the same guarantee.
    """
    def write(out):
        h, count = hashlib.new(algorithm), 0
        for block in chunks:
            out.write(block)
            h.update(block)
            count += len(block)
            if size is not None and count > size:
                break
        if (size is not None and count != size) or h.hexdigest() != checksum:
            name = _NAMES.get(algorithm, algorithm)
            got = f"{count} bytes" if size is not None and count != size else f"{name} {h.hexdigest()}"
            expected = (f"{size} bytes with " if size is not None else "") + f"{name} {checksum}"
            raise DownloadError(f"{what or dest} has {got}, expected {expected} (corrupt or changed file; nothing "
                                "was kept)")

    atomic_write(dest, write)
    return dest


def network_reason(exc):
    """What went wrong with a request, in words (``"HTTP 404 Not Found"``, ``"Name or service not
    known"``, ``"timed out"``), without Python's exception names or ``[Errno N]``."""
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, OSError):
        return reason.strerror or str(reason) or "connection failed"
    if isinstance(reason, http.client.IncompleteRead):
        return f"the connection closed after {len(reason.partial)} bytes"
    return str(reason) or "connection failed"


def download(url, dest, checksum, size=None, algorithm="sha256", progress=True, desc=None):
    """Fetch ``url`` into ``dest``, keeping it only with digest ``checksum`` (and ``size`` bytes,
    when given; see :func:`store_checked`).

    Raises:
        DownloadError: on a network error or a size / digest mismatch; ``dest`` is then untouched
            and no partial file is left.
    """
    from tqdm import tqdm

    try:
        response = urllib.request.urlopen(url, timeout=60)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise DownloadError(f"could not download {url} ({network_reason(exc)})") from None
    total = size or int(response.headers.get("Content-Length") or 0) or None
    with response, tqdm(total=total, unit="B", unit_scale=True, desc=desc or os.path.basename(dest),
                        disable=None if progress else True) as bar:
        def blocks():
            while True:
                try:  # a failure here is the network's; one in writing is the disk's (an OSError naming dest)
                    block = response.read(1 << 20)
                except (OSError, http.client.HTTPException) as exc:
                    raise DownloadError(f"the download of {url} broke off ({network_reason(exc)}); nothing "
                                        "was kept") from None
                if not block:
                    return
                bar.update(len(block))
                yield block

        return store_checked(dest, blocks(), checksum, size, algorithm, what=f"the download of {url}")
