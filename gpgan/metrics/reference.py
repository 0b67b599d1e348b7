"""Reference statistics of data sets, and statistics files.

FID compares the Gaussian of generated features with the data set's, which is computed once and
kept: :func:`dataset_statistics` reads a data set through :mod:`gpgan.data` (CIFAR-10, an image
folder), takes its pool3 features and saves ``(mu, sigma)`` in
``~/.cache/gpgan/fid_stats/`` under the name :func:`statistics_path` gives (the data set, what
selects its images, and the Inception weights). Files use pytorch-fid's ``.npz`` layout (arrays
``mu`` and ``sigma``), so published statistics files load with :func:`load_statistics` too.

Generated images reach the network as real ones do, through the same 256 levels: quantize them
with :func:`gpgan.data.to_uint8` (the inverse of the loader's unit range) first.
"""
import hashlib
import os
import zipfile

import numpy

from gpgan.files import atomic_write, cache_dir
from gpgan.metrics.scores import feature_statistics

__all__ = ["statistics_path", "save_statistics", "load_statistics", "dataset_statistics", "DATASETS"]

DATASETS = ("cifar10", "image_folder")


# -- statistics files ------------------------------------------------------------------------------
def save_statistics(path, mu, sigma):
    """Write ``mu`` (D,) and ``sigma`` (D, D) as pytorch-fid's ``.npz`` (atomic)."""
    mu, sigma = numpy.asarray(mu, numpy.float64), numpy.asarray(sigma, numpy.float64)
    if mu.ndim != 1 or sigma.shape != (mu.shape[0],) * 2:
        raise ValueError(f"save_statistics: mu must be (D,) and sigma (D, D), got {mu.shape} and {sigma.shape}")
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    atomic_write(path, lambda f: numpy.savez(f, mu=mu, sigma=sigma))
    return path


def load_statistics(path):
    """``(mu, sigma)`` float64 from an ``.npz`` with arrays ``mu`` and ``sigma`` (pytorch-fid's and
    TTUR's published files included; other arrays in it are ignored)."""
    try:
        with numpy.load(path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files if k in ("mu", "sigma")}
            names = sorted(npz.files)
    except (OSError, EOFError, ValueError, zipfile.BadZipFile) as exc:  # ValueError: not an .npz (numpy refuses a pickle)
        raise ValueError(f"{path}: not a readable .npz statistics file ({exc})") from None
    if len(arrays) != 2:
        raise ValueError(f"{path}: a statistics file holds arrays 'mu' and 'sigma', this one has {names}")
    mu, sigma = arrays["mu"].astype(numpy.float64), arrays["sigma"].astype(numpy.float64)
    if mu.ndim != 1 or sigma.shape != (mu.shape[0],) * 2:
        raise ValueError(f"{path}: mu must be (D,) and sigma (D, D), got {mu.shape} and {sigma.shape}")
    return mu, sigma


# -- data sets ---------------------------------------------------------------------------------------
def _folder_fingerprint(root):
    """A short hash of an image folder: its path and every image's relative path, size and time."""
    from gpgan.data.image_folder import list_images

    digest = hashlib.sha256(os.path.abspath(root).encode())
    for path in list_images(root):
        info = os.stat(path)
        digest.update(f"{os.path.relpath(path, root)}:{info.st_size}:{info.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:12]


def _check_dataset(dataset, root, split):
    if dataset not in DATASETS:
        raise ValueError(f"unknown data set {dataset!r} for statistics; accepted: {', '.join(DATASETS)}")
    if dataset == "cifar10" and split not in ("train", "test"):
        raise ValueError(f"CIFAR-10 split {split!r}: accepted 'train' or 'test'")
    if dataset == "image_folder" and root is None:
        raise ValueError("image_folder statistics need root: a folder of PNG/JPEG images")


def statistics_path(dataset, weights_id, root=None, split="train"):
    """Where the statistics of a data set are cached: the one place their file name is made.

    ``cifar10-<split>-inception-<weights>.npz``, or for an image folder
    ``image_folder-<folder name>-<fingerprint>-inception-<weights>.npz`` (the fingerprint covers
    the folder's path and its files' names, sizes and times, so a changed folder gets new
    statistics), in ``~/.cache/gpgan/fid_stats/``. ``weights_id`` is the Inception network's
    :attr:`~gpgan.metrics.InceptionV3.weights_id` (its first 12 digits are used).
    """
    _check_dataset(dataset, root, split)
    if dataset == "cifar10":
        what = f"cifar10-{split}"
    else:
        root = os.path.abspath(os.path.expanduser(str(root)))
        what = f"image_folder-{os.path.basename(root.rstrip(os.sep)) or 'root'}-{_folder_fingerprint(root)}"
    return os.path.join(cache_dir(), "fid_stats", f"{what}-inception-{weights_id[:12]}.npz")


def _dataset_images(dataset, root, split, download, progress):
    from gpgan.data import load_cifar10, load_image_folder

    if dataset == "cifar10":
        return load_cifar10(root, split=split, download=download, progress=progress)[0]
    return load_image_folder(root)


def dataset_statistics(net, dataset, root=None, split="train", download=False, batch_size=50, progress=True,
                       cache=True):
    """``(mu, sigma)`` of a data set's pool3 features, computed once and then read from the cache.

    Args:
        net: an :class:`~gpgan.metrics.InceptionV3`.
        dataset: "cifar10" (all images of ``split``) or "image_folder" (every image under
            ``root``, loaded as :func:`gpgan.data.load_image_folder` does for training).
        root, split, download: as :func:`gpgan.data.load_cifar10` / ``load_image_folder``.
        batch_size, progress: of the feature extraction (a tqdm bar).
        cache: read and write :func:`statistics_path`; False always recomputes and writes nothing.

    Returns:
        mu (2048,), sigma (2048, 2048), float64.
    """
    path = statistics_path(dataset, net.weights_id, root, split)
    if cache and os.path.isfile(path):
        return load_statistics(path)
    images = _dataset_images(dataset, root, split, download, progress)
    mu, sigma = feature_statistics(net.features(images, batch_size=batch_size, progress=progress)["pool3"])
    if cache:
        save_statistics(path, mu, sigma)
    return mu, sigma
