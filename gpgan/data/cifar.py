"""CIFAR-10 from the official "python version" folder, read without trusting pickle.

The folder (``cifar-10-batches-py``) holds ``data_batch_1`` ... ``data_batch_5`` and
``test_batch``: pickles written by Python 2's cPickle, each a dict with byte-string keys
``b'data'`` (uint8, (10000, 3072), channel-major R, G, B planes of 32x32) and ``b'labels'``.

Pickle can run arbitrary code, so batches are read with :class:`CifarUnpickler`, which
admits only the globals a NumPy array needs; anything else raises ``pickle.UnpicklingError``
naming the refused global. When the folder is missing and downloading is allowed, the official
archive is fetched (tqdm progress), its md5 checked, and it is extracted without letting any
member escape the target folder.
"""
import io
import math
import os
import pickle
import shutil
import tarfile
import tempfile

import numpy

from gpgan.files import DownloadError, RefusedPickle, RestrictedUnpickler, digest, download

__all__ = [
    "CIFAR10_URL", "CIFAR10_MD5", "CIFAR10_FILE_MD5", "TRAIN_FILES", "TEST_FILES", "CifarUnpickler", "RefusedPickle",
    "restricted_load", "load_cifar10", "download_cifar10", "safe_extract",
]

CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CIFAR10_MD5 = "c58f30108f718f92721af3b95e74349a"
TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_FILES = ("test_batch",)
# The md5 of each batch file of the official archive (as torchvision lists them): how a folder is
# recognized as the whole official data set rather than a subset or another copy.
CIFAR10_FILE_MD5 = {
    "data_batch_1": "c99cafc152244af753f735de768cd75f", "data_batch_2": "d4bba439e000b95fd0a9bffe97cbabec",
    "data_batch_3": "54ebc095f3ab1f0389bbae665268c751", "data_batch_4": "634d18415352ddfa80567beed471001a",
    "data_batch_5": "482c414d41f54cd18b22e5b47cb7c3cb", "test_batch": "40351d587109b95175f43aff81a1287e",
}
_FOLDER = "cifar-10-batches-py"


class _PickledDtype:
    """Stands in for ``numpy.dtype`` while a batch is unpickled: it keeps the type string, and
    :meth:`dtype` makes a fresh dtype of a plain number type from it. A real dtype would take the
    pickle's state as it comes, and that state can set flags under which NumPy reads an array's
    raw bytes as object pointers."""

    def __init__(self, spec, align=False, copy=False):
        self.spec, self.state = spec, None

    def __setstate__(self, state):
        self.state = state

    def dtype(self):
        # The official batches are Python 2 pickles: read with encoding="bytes", their strings
        # (the type 'u1', the byte order '|') come as bytes.
        spec = self.spec.decode("latin1") if isinstance(self.spec, bytes) else self.spec
        try:
            dtype = numpy.dtype(spec) if isinstance(spec, str) else None
        except TypeError:
            dtype = None
        if dtype is None or dtype.kind not in "biuf" or dtype.fields is not None:
            raise RefusedPickle(f"array type {spec!r} is refused: only plain numbers (bool, int, uint, float)")
        order = self.state[1] if isinstance(self.state, tuple) and len(self.state) > 1 else "|"
        order = order.decode("latin1") if isinstance(order, bytes) else order
        return dtype.newbyteorder(order) if order in ("<", ">") else dtype


class _PickledArray(numpy.ndarray):
    """What ``_reconstruct`` gives while a batch is unpickled: its state (pickle's BUILD) is
    checked before NumPy's own ``__setstate__`` sees it: a :class:`_PickledDtype`, a shape of
    non-negative integers and raw bytes of exactly that many items."""

    def __setstate__(self, state):
        version, shape, dtype, fortran, raw = state if isinstance(state, tuple) and len(state) == 5 else (None,) * 5
        if (not isinstance(dtype, _PickledDtype) or not isinstance(raw, bytes) or not isinstance(shape, tuple)
                or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)):
            raise RefusedPickle("an array state that is not (version, shape, dtype, fortran, bytes)")
        dtype = dtype.dtype()
        if len(raw) != math.prod(shape) * dtype.itemsize:
            raise RefusedPickle(f"an array of shape {shape} with {len(raw)} bytes of data")
        super().__setstate__((version, shape, dtype, bool(fortran), raw))


_NDARRAY = object()  # the pickle's ``numpy.ndarray``: only ever the first argument of _reconstruct


def _reconstruct(cls, shape, typecode):
    """NumPy's ``_reconstruct(ndarray, (0,), b'b')``, giving a :class:`_PickledArray` to fill."""
    if cls is not _NDARRAY:
        raise RefusedPickle("_reconstruct of something other than numpy.ndarray")
    return _PickledArray((0,), numpy.uint8)


def _codecs_encode(text, encoding="latin1"):
    # Python 3 writes bytes in protocol-2 pickles as _codecs.encode(str, 'latin1'); only that
    # harmless string -> bytes conversion is admitted.
    if encoding not in ("latin1", "latin-1"):
        raise RefusedPickle(f"_codecs.encode with encoding {encoding!r} is refused")
    return text.encode("latin1")


class CifarUnpickler(RestrictedUnpickler):
    """Admits only what NumPy arrays of plain numbers and plain containers need: ``_reconstruct``
    of ``numpy.core.multiarray`` (and its NumPy 2 spelling ``numpy._core.multiarray``),
    ``numpy.ndarray`` and ``numpy.dtype``, each as a stand-in that builds the array from checked
    parts (:class:`_PickledArray`), and ``_codecs.encode`` (latin1 only: how Python 3 spells
    bytes in protocol-2 pickles). Everything else raises :class:`RefusedPickle` naming the
    refused ``module.name``.
    """

    what = ("a CIFAR-10 batch may only contain NumPy arrays and plain containers (the file is corrupt or was "
            "not written as a CIFAR batch)")
    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"): lambda: _reconstruct,
        ("numpy._core.multiarray", "_reconstruct"): lambda: _reconstruct,
        ("numpy", "ndarray"): lambda: _NDARRAY,
        ("numpy", "dtype"): lambda: _PickledDtype,
        ("_codecs", "encode"): lambda: _codecs_encode,
    }

    def allowed(self, module, name):
        getter = self._ALLOWED.get((module, name))
        return None if getter is None else getter()


def restricted_load(path):
    """Unpickle ``path`` (bytes keys kept as bytes) through :class:`CifarUnpickler`."""
    with open(path, "rb") as f:
        return CifarUnpickler(io.BufferedReader(f), encoding="bytes").load()


def _read_batch(path):
    try:
        batch = restricted_load(path)
    except RefusedPickle as exc:
        raise ValueError(f"{path}: refused to unpickle ({exc}); official CIFAR-10 batches hold only NumPy "
                         "arrays, lists and dicts, so this file is not one (replace it with the official "
                         "batch)") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError, AttributeError,
            MemoryError, OverflowError, RecursionError, SystemError) as exc:  # what a damaged pickle raises
        raise ValueError(f"{path}: truncated or corrupt pickle{f' ({exc})' if str(exc) else ''}; replace it with "
                         "the official batch") from None
    if not isinstance(batch, dict) or b"data" not in batch or b"labels" not in batch:
        keys = sorted(batch) if isinstance(batch, dict) else type(batch).__name__
        raise ValueError(f"{path}: not a CIFAR-10 batch (expected a dict with keys b'data' and "
                         f"b'labels', got {keys})")
    data = numpy.asarray(batch[b"data"])
    labels = numpy.asarray(batch[b"labels"], dtype=numpy.int64)
    if data.dtype != numpy.uint8 or data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise ValueError(f"{path}: b'data' must be uint8 of shape (N, 3072), got {data.dtype} {data.shape}")
    if len(labels) != len(data):
        raise ValueError(f"{path}: {len(data)} images but {len(labels)} labels")
    if labels.size and not (0 <= labels.min() and labels.max() < 10):
        raise ValueError(f"{path}: labels must be classes 0 to 9, got values from {labels.min()} to {labels.max()}")
    return data.reshape(-1, 3, 32, 32), labels


def _where_to_put(root, elsewhere="set data.root to the folder that holds them"):
    return (f"put the official python-version batches (data_batch_1 ... data_batch_5, test_batch, "
            f"from {CIFAR10_URL}, extracted) in {root}, or {elsewhere}")


class CifarFilesMissing(FileNotFoundError):
    """CIFAR-10's batches are not in ``root`` (``missing``: their names). The message advises in a
    training config's terms (``data.root``, ``data.download``); a command line with options of its
    own asks :meth:`advice` for the same advice in those."""

    def __init__(self, root, missing):
        self.root, self.missing = root, list(missing)
        super().__init__(self.advice("set data.root to the folder that holds them", "set data.download: true"))

    def advice(self, elsewhere, download):
        """The message, with the advice ``elsewhere`` (files in another folder) and ``download``."""
        return (f"CIFAR-10 files missing in {self.root}: {', '.join(self.missing)}; "
                + _where_to_put(self.root, elsewhere) + f", or {download}")


def safe_extract(archive, dest):
    """Extract a .tar.gz into ``dest``, refusing links, devices, absolute paths and ``..``.

    Raises:
        ValueError: naming the first member that would land outside ``dest`` or is not a plain
            file or folder; nothing is extracted in that case.
    """
    dest = os.path.realpath(dest)
    with tarfile.open(archive, "r:*") as tar:
        members = tar.getmembers()
        for m in members:
            target = os.path.realpath(os.path.join(dest, m.name))
            if os.path.isabs(m.name) or not (target == dest or target.startswith(dest + os.sep)):
                raise ValueError(f"{archive}: member {m.name!r} would be extracted outside {dest}; refused")
            if not (m.isfile() or m.isdir()):
                raise ValueError(f"{archive}: member {m.name!r} is not a plain file or folder; refused")
        for m in members:
            target = os.path.join(dest, m.name)
            if m.isdir():
                os.makedirs(target, exist_ok=True)
                continue
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with tar.extractfile(m) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out)


def download_cifar10(root, url=CIFAR10_URL, md5=CIFAR10_MD5, progress=True):
    """Download the official archive and extract its batches into ``root``.

    The archive is fetched next to ``root`` (a tqdm bar shows progress), its md5 is checked,
    and the ``cifar-10-batches-py`` folder inside is moved to ``root``.

    Raises:
        RuntimeError: when the download fails (e.g. offline), saying where to put the files;
            or when the md5 differs.
    """
    root = os.path.abspath(os.path.expanduser(root))
    parent = os.path.dirname(root)
    os.makedirs(parent, exist_ok=True)
    archive = os.path.join(parent, "cifar-10-python.tar.gz")
    if not (os.path.isfile(archive) and digest(archive, "md5") == md5):
        try:
            download(url, archive, md5, algorithm="md5", progress=progress, desc="CIFAR-10")
        except DownloadError as exc:
            raise RuntimeError(f"{exc}; " + _where_to_put(root)) from None
    with tempfile.TemporaryDirectory(dir=parent) as tmp:
        safe_extract(archive, tmp)
        inner = os.path.join(tmp, _FOLDER)
        if not os.path.isdir(inner):
            raise RuntimeError(f"{archive} holds no {_FOLDER} folder")
        os.makedirs(root, exist_ok=True)
        for name in os.listdir(inner):
            os.replace(os.path.join(inner, name), os.path.join(root, name))
    return root


def load_cifar10(root, split="train", download=False, progress=True):
    """Read CIFAR-10 images and labels.

    Args:
        root: the ``cifar-10-batches-py`` folder ('~' expanded).
        split: "train" (data_batch_1..5) or "test" (test_batch).
        download: fetch the official archive when the files are missing.

    Returns:
        (images uint8 (N, 3, 32, 32), labels int64 (N,)).

    Raises:
        CifarFilesMissing: files missing and ``download`` false (a FileNotFoundError whose message
            says where to put them).
    """
    if split not in ("train", "test"):
        raise ValueError(f"CIFAR-10 split {split!r}: accepted 'train' or 'test'")
    if root is None:
        raise ValueError("CIFAR-10 needs data.root: the folder holding data_batch_1 ... test_batch")
    root = os.path.abspath(os.path.expanduser(str(root)))
    files = TRAIN_FILES if split == "train" else TEST_FILES
    missing = [f for f in files if not os.path.isfile(os.path.join(root, f))]
    if missing:
        if not download:
            raise CifarFilesMissing(root, missing)
        download_cifar10(root, progress=progress)
    images, labels = zip(*(_read_batch(os.path.join(root, f)) for f in files))
    return numpy.concatenate(images), numpy.concatenate(labels)
