"""Reference statistics and features of data sets, statistics files, and the reference a metric
compares generated images with.

FID compares the Gaussian of generated features with the data set's, which is computed once and
kept: :func:`dataset_statistics` reads a data set through :mod:`gpgan.data` (CIFAR-10, an image
folder), takes its pool3 features and saves ``(mu, sigma)`` in
``~/.cache/gpgan/fid_stats/`` under the name :func:`statistics_path` gives (the data set, what
selects its images, and the network's features: weights, dtype, version). Files use pytorch-fid's ``.npz`` layout (arrays
``mu`` and ``sigma``), so published statistics files load with :func:`load_statistics` too. KID and
precision/recall need the features themselves: :func:`dataset_features` keeps them beside the
statistics (:func:`features_path`).

:func:`load_reference` turns a reference as users name it (``cifar10:train``, a statistics file, a
folder of images) into a :class:`Reference`.

Generated images reach the network as real ones do, through the same 256 levels: quantize them
with :func:`gpgan.data.to_uint8` (the inverse of the loader's unit range) first.
"""
import hashlib
import os

import numpy

from gpgan.data.image_folder import FOLDER_ACCEPTED
from gpgan.files import NpzError, atomic_write, cache_dir, digest, open_npz, read_arrays, read_entry
from gpgan.metrics.scores import feature_statistics

__all__ = ["statistics_path", "features_path", "save_statistics", "load_statistics", "dataset_statistics",
           "dataset_features", "DATASETS", "ACCEPTED_REFERENCES", "SOURCES_ACCEPTED", "Reference", "parse_reference",
           "load_reference"]

DATASETS = ("cifar10", "image_folder")
CIFAR10_ACCEPTED = "cifar10:train, cifar10:test"
#: what a data set to read may be (images to score, or a reference's images), for messages
SOURCES_ACCEPTED = f"{CIFAR10_ACCEPTED} or {FOLDER_ACCEPTED}"
#: what a reference may be, for messages
ACCEPTED_REFERENCES = f"{CIFAR10_ACCEPTED}, a statistics file (.npz with mu and sigma) or {FOLDER_ACCEPTED}"


# -- statistics files ------------------------------------------------------------------------------
def save_statistics(path, mu, sigma):
    """Write ``mu`` (D,) and ``sigma`` (D, D) as pytorch-fid's ``.npz`` (atomic)."""
    mu, sigma = numpy.asarray(mu, numpy.float64), numpy.asarray(sigma, numpy.float64)
    if mu.ndim != 1 or sigma.shape != (mu.shape[0],) * 2:
        raise ValueError(f"save_statistics: mu must be (D,) and sigma (D, D), got {mu.shape} and {sigma.shape}")
    # (atomic_write makes the folders, names a file standing in their way, and removes them again
    # when the write fails)
    atomic_write(path, lambda f: numpy.savez(f, mu=mu, sigma=sigma))
    return path


def load_statistics(path, width=None):
    """``(mu, sigma)`` float64 from an ``.npz`` with arrays ``mu`` and ``sigma`` (pytorch-fid's and
    TTUR's published files included; other arrays in it are ignored).

    Args:
        width: the number of features the statistics must describe (the network's, 2048 for the
            FID Inception), or None for any.

    Raises:
        ValueError: one line naming the file, what it holds and what is expected: not an ``.npz``,
            no ``mu`` or ``sigma``, shapes other than mu (D,) and sigma (D, D) with D ``width``,
            or NaN or infinite values.
    """
    with open_npz(path, "statistics file") as npz:
        names = sorted(npz.files)
        arrays = {k: read_entry(npz, k, path, "statistics file") for k in ("mu", "sigma") if k in names}
    if len(arrays) != 2:
        raise ValueError(f"{path}: a statistics file holds arrays 'mu' and 'sigma', this one has {names}")
    mu, sigma = arrays["mu"], arrays["sigma"]
    d = "D" if width is None else int(width)
    expected = f"mu ({d},) and sigma ({d}, {d})" + (f", the mean and covariance of the Inception network's {d} "
                                                   "pool3 features" if width is not None else "")
    if not all(a.dtype.kind in "fiu" for a in (mu, sigma)):  # (not text, objects or complex numbers)
        raise ValueError(f"statistics file {path} holds mu of dtype {mu.dtype} and sigma of dtype {sigma.dtype}; "
                         f"expected real numbers: {expected}")
    if mu.ndim != 1 or sigma.shape != (mu.shape[0],) * 2 or (width is not None and mu.shape[0] != width):
        raise ValueError(f"statistics file {path} holds mu of shape {mu.shape} and sigma of shape {sigma.shape}; "
                         f"expected {expected}")
    mu, sigma = mu.astype(numpy.float64), sigma.astype(numpy.float64)
    bad = [name for name, value in (("mu", mu), ("sigma", sigma)) if not numpy.isfinite(value).all()]
    if bad:
        raise ValueError(f"statistics file {path}: {' and '.join(bad)} hold{'s' if len(bad) == 1 else ''} NaN or "
                         f"infinite values; expected {expected}, finite numbers")
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


def _cifar_fingerprint(root, split):
    """A short hash of the md5s of a CIFAR-10 split's batch files, or None when they are the official
    files (or missing: the loader then downloads the official ones, or fails)."""
    from gpgan.data.cifar import CIFAR10_FILE_MD5, TEST_FILES, TRAIN_FILES

    if root is None:
        return None
    root = os.path.abspath(os.path.expanduser(str(root)))
    files = TRAIN_FILES if split == "train" else TEST_FILES
    paths = [os.path.join(root, name) for name in files]
    if not all(os.path.isfile(path) for path in paths):
        return None
    sums = [digest(path, "md5") for path in paths]
    if sums == [CIFAR10_FILE_MD5[name] for name in files]:
        return None
    return hashlib.sha256(" ".join(sums).encode()).hexdigest()[:12]


def _check_dataset(dataset, root, split):
    if dataset not in DATASETS:
        raise ValueError(f"unknown data set {dataset!r} for statistics; accepted: {', '.join(DATASETS)}")
    if dataset == "cifar10" and split not in ("train", "test"):
        raise ValueError(f"CIFAR-10 split {split!r}: accepted 'train' or 'test'")
    if dataset == "image_folder" and root is None:
        raise ValueError("image_folder statistics need root: a folder of PNG/JPEG images")


def statistics_path(dataset, features_id, root=None, split="train"):
    """Where the statistics of a data set are cached: the one place their file name is made.

    ``cifar10-<split>-inception-<features>.npz`` for the official CIFAR-10 files (or ``root``
    None), ``cifar10-<split>-<fingerprint>-inception-<features>.npz`` for other files in CIFAR-10's
    layout (a subset, say: the fingerprint hashes the batch files' md5s), or for an image folder
    ``image_folder-<folder name>-<fingerprint>-inception-<features>.npz`` (the fingerprint covers
    the folder's path and its files' names, sizes and times, so a changed folder gets new
    statistics), in ``~/.cache/gpgan/fid_stats/``. ``features_id`` is the Inception network's
    :attr:`~gpgan.metrics.InceptionV3.features_id` (its weights, dtype and features version).
    """
    _check_dataset(dataset, root, split)
    if dataset == "cifar10":
        fingerprint = _cifar_fingerprint(root, split)
        what = f"cifar10-{split}" + (f"-{fingerprint}" if fingerprint else "")
    else:
        root = os.path.abspath(os.path.expanduser(str(root)))
        what = f"image_folder-{os.path.basename(root.rstrip(os.sep)) or 'root'}-{_folder_fingerprint(root)}"
    return os.path.join(cache_dir(), "fid_stats", f"{what}-inception-{features_id}.npz")


def features_path(dataset, features_id, root=None, split="train"):
    """Where the pool3 features of a data set are cached: beside its statistics
    (:func:`statistics_path`), ending in ``-pool3.npz`` (array ``pool3``, (N, 2048))."""
    return statistics_path(dataset, features_id, root, split)[:-len(".npz")] + "-pool3.npz"


def _load_features(path):
    try:
        return read_arrays(path, "features cache", ("pool3",))["pool3"]
    except (OSError, KeyError, NpzError):
        return None  # missing, damaged or another layout: computed again


def _dataset_images(dataset, root, split, download, progress, option=None, accepted=None):
    """The images of a data set; ``option`` and ``accepted``: what an image folder's ``root`` is
    called where it was given (``--root``, ``eval.reference``; default ``root``) and what is
    accepted there (default: a folder of images), for :func:`gpgan.data.load_image_folder`'s
    messages."""
    from gpgan.data import load_cifar10, load_image_folder

    if dataset == "cifar10":
        images = load_cifar10(root, split=split, download=download, progress=progress)[0]
    else:
        images = load_image_folder(root, option=option or "root", accepted=accepted)
    if len(images) < 2:
        what = f"CIFAR-10's {split} split in {root}" if dataset == "cifar10" else f"the image folder {root}"
        raise ValueError(f"{what} holds {len(images)} image; statistics (a covariance) need at least 2")
    return images


def dataset_statistics(net, dataset, root=None, split="train", download=False, batch_size=50, progress=True,
                       cache=True, option=None, accepted=None):
    """``(mu, sigma)`` of a data set's pool3 features, computed once and then read from the cache.

    Args:
        net: an :class:`~gpgan.metrics.InceptionV3`.
        dataset: "cifar10" (all images of ``split``) or "image_folder" (every image under
            ``root``, loaded as :func:`gpgan.data.load_image_folder` does for training).
        root, split, download: as :func:`gpgan.data.load_cifar10` / ``load_image_folder``.
        batch_size, progress: of the feature extraction (a tqdm bar).
        cache: read and write :func:`statistics_path`; False always recomputes and writes nothing.
        option, accepted: what ``root`` is called where it was given (``--root``, ``data.root``)
            and what is accepted there, for the messages about an image folder (default: root).

    Returns:
        mu (2048,), sigma (2048, 2048), float64.
    """
    path = statistics_path(dataset, net.features_id, root, split)
    if cache and os.path.isfile(path):
        return load_statistics(path)
    features = _load_features(features_path(dataset, net.features_id, root, split)) if cache else None
    if features is not None:
        mu, sigma = feature_statistics(features)
        save_statistics(path, mu, sigma)
        return mu, sigma
    images = _dataset_images(dataset, root, split, download, progress, option, accepted)
    mu, sigma = feature_statistics(net.features(images, batch_size=batch_size, progress=progress)["pool3"])
    if cache:
        save_statistics(path, mu, sigma)
    return mu, sigma


def dataset_features(net, dataset, root=None, split="train", download=False, batch_size=50, progress=True,
                     cache=True, option=None, accepted=None):
    """The pool3 features of every image of a data set, computed once and then read from the cache
    (:func:`features_path`; the statistics are saved beside them, so :func:`dataset_statistics`
    needs no second pass).

    Arguments as :func:`dataset_statistics`. Returns (N, 2048), float32 when the network computes
    in float32 (its features are float32 numbers), else float64.
    """
    path = features_path(dataset, net.features_id, root, split)
    features = _load_features(path) if cache else None
    if features is not None:
        return features
    images = _dataset_images(dataset, root, split, download, progress, option, accepted)
    features = net.features(images, batch_size=batch_size, progress=progress)["pool3"]
    if numpy.dtype(getattr(net, "dtype", numpy.float64)) == numpy.float32:
        features = features.astype(numpy.float32)
    if cache:
        mu, sigma = feature_statistics(features)
        atomic_write(path, lambda f: numpy.savez(f, pool3=features))
        save_statistics(statistics_path(dataset, net.features_id, root, split), mu, sigma)
    return features


# -- references ------------------------------------------------------------------------------------
class Reference:
    """What generated images are compared with.

    Attributes:
        mu (D,), sigma (D, D): the Gaussian of the reference's pool3 features (FID).
        features: (N, D) pool3 features of the reference images (KID, precision/recall), or None
            for a statistics file, which holds only ``mu`` and ``sigma``.
        description: what it is, in words (``"cifar10:train (50,000 images)"``).
    """

    def __init__(self, mu, sigma, features=None, description="reference"):
        self.mu, self.sigma, self.features, self.description = mu, sigma, features, description

    def __repr__(self):
        return f"Reference({self.description!r})"


def parse_reference(spec):
    """What a reference names: ``("cifar10", split)`` for ``cifar10`` / ``cifar10:train`` /
    ``cifar10:test``, ``("statistics", path)`` for a path ending in ``.npz`` (pytorch-fid's
    layout), ``("image_folder", path)`` for anything else (a folder of PNG/JPEG images; write
    ``./cifar10`` for a folder of that name). Paths are expanded (``~``) and made absolute.

    Raises:
        ValueError: an empty reference, or a CIFAR-10 split other than train and test.
    """
    text = str(spec).strip() if spec is not None else ""
    if not text:
        raise ValueError(f"the reference is empty; accepted: {ACCEPTED_REFERENCES}")
    if text == "cifar10" or text.startswith("cifar10:"):
        split = text.partition(":")[2] or "train"
        if split not in ("train", "test"):
            raise ValueError(f"reference {text!r}: CIFAR-10's split is train or test ({CIFAR10_ACCEPTED})")
        return "cifar10", split
    path = os.path.abspath(os.path.expanduser(text))
    return ("statistics", path) if text.lower().endswith(".npz") else ("image_folder", path)


def load_reference(net, spec, cifar_root=None, download=False, features=False, batch_size=50, progress=True,
                   compute=True, option="reference", accepted=None):
    """The :class:`Reference` that ``spec`` names (see :func:`parse_reference`).

    Data sets are read and their features computed once, then cached (:func:`dataset_statistics`,
    :func:`dataset_features`).

    Args:
        net: an :class:`~gpgan.metrics.InceptionV3` (its ``features_id`` names the cache files).
        spec: ``cifar10:train``, ``cifar10:test``, a ``.npz`` statistics file or a folder of images.
        cifar_root, download: the ``cifar-10-batches-py`` folder of a CIFAR-10 reference, and
            whether to download the official archive there when it is missing.
        features: also the reference's features (KID, precision/recall); a statistics file has none.
        batch_size, progress: of the feature extraction.
        compute: False checks that the reference can be had without computing any feature (the
            data set's images are read): returns None when they would have to be computed.
        option, accepted: what ``spec`` is called where it was given (``--ref``,
            ``eval.reference``, ``data.root``) and what is accepted there (default: any
            reference), for the messages about an image folder.

    Raises:
        ValueError: ``features`` with a statistics file, or a file that is not one (or not of
            ``net.pool3_width`` features, or with NaN or infinite values).
        FileNotFoundError: a missing file, folder or data set (the message says where to put it).
    """
    kind, what = parse_reference(spec)
    accepted = accepted or ACCEPTED_REFERENCES
    if kind == "statistics":
        if features:
            raise ValueError(f"{what} is a statistics file (mu and sigma only), but KID, precision/recall and "
                             "density/coverage compare features: give a data set (cifar10:train) or a folder of "
                             "images as the reference, or leave kid, pr and dc out")
        if not os.path.isfile(what):
            raise FileNotFoundError(f"statistics file {what} does not exist")
        mu, sigma = load_statistics(what, net.pool3_width)
        return Reference(mu, sigma, None, f"statistics file {what}")
    dataset, root, split = ("cifar10", cifar_root, what) if kind == "cifar10" else ("image_folder", what, "train")
    if dataset == "cifar10" and cifar_root is None:
        raise ValueError(f"reference cifar10:{split} needs the folder of CIFAR-10's batches (cifar-10-batches-py)")
    name = f"cifar10:{split}" if dataset == "cifar10" else what
    cached = features_path if features else statistics_path
    if not compute and not os.path.isfile(cached(dataset, net.features_id, root, split)):
        _dataset_images(dataset, root, split, download, progress, option, accepted)  # can they be read?
        return None
    feats = None
    if features:
        feats = dataset_features(net, dataset, root, split, download, batch_size, progress, option=option,
                                 accepted=accepted)
    mu, sigma = dataset_statistics(net, dataset, root, split, download, batch_size, progress, option=option,
                                   accepted=accepted)
    size = f" ({len(feats):,} images)" if feats is not None else ""
    return Reference(mu, sigma, feats, name + size)
