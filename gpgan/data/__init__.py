"""Data: CIFAR-10 (official python batches), image folders, and toy 2-D distributions.

:func:`make_loader` (a data set's name and the ``data`` section's keys as arguments) returns
``(loader, sampler)``: an endless batch iterator with a resumable ``state_dict()``
(:mod:`gpgan.data.loader`), and the toy distribution (None for images).
"""
from gpgan.data.cifar import (  # noqa: F401
    CIFAR10_MD5,
    CIFAR10_URL,
    CifarFilesMissing,
    CifarUnpickler,
    download_cifar10,
    load_cifar10,
    restricted_load,
    safe_extract,
)
from gpgan.data.image_folder import load_image_folder  # noqa: F401
from gpgan.data.loader import ImageLoader, ToyLoader, to_uint8, to_unit_range  # noqa: F401

IMAGE_DATASETS = ("cifar10", "image_folder")
#: data sets with class labels, and how many classes
LABELED_DATASETS = {"cifar10": 10}

__all__ = [
    "IMAGE_DATASETS", "LABELED_DATASETS", "CIFAR10_URL", "CIFAR10_MD5", "CifarFilesMissing", "CifarUnpickler", "restricted_load",
    "load_cifar10", "download_cifar10", "safe_extract", "load_image_folder", "ImageLoader",
    "ToyLoader", "to_unit_range", "to_uint8", "is_toy", "make_loader",
]


def is_toy(name):
    """Whether ``name`` is a toy 2-D data set (points rather than images)."""
    return name not in IMAGE_DATASETS


def make_loader(name, batch_size, seed=0, root=None, download=False, split="train", hflip=False,
                options=None, progress=True, labels=False):
    """An endless, resumable batch iterator for the data set ``name``.

    Args:
        name: "cifar10", "image_folder", or a toy name from :data:`gpgan.data.toy.TOY_DATASETS`.
        batch_size: samples per ``next()``.
        seed: seeds the data order / flips (images) or the samples (toy).
        root, download, split: where the images are (see :func:`load_cifar10`,
            :func:`load_image_folder`).
        hflip: random horizontal flips (images).
        options: keyword options of :func:`gpgan.data.toy.make_toy` (toy data).
        labels: keep the class labels (``loader.next_with_labels()``; CIFAR-10 only).

    Returns:
        (loader, sampler): the loader has ``next()``, ``state_dict()``, ``load_state_dict()``;
        ``sampler`` is the toy distribution (with ``.sample``, ``.means``, ``.std``) or None
        for images.
    """
    if name == "cifar10":
        images, classes = load_cifar10(root, split=split, download=download, progress=progress)
        return ImageLoader(images, batch_size, seed=seed, hflip=hflip, labels=classes if labels else None), None
    if labels:
        raise ValueError(f"data set {name!r} has no class labels; class-conditional training needs cifar10")
    if name == "image_folder":
        return ImageLoader(load_image_folder(root), batch_size, seed=seed, hflip=hflip), None
    from gpgan.data.toy import TOY_DATASETS, make_toy

    if name not in TOY_DATASETS:
        accepted = ", ".join(IMAGE_DATASETS + tuple(TOY_DATASETS))
        raise ValueError(f"unknown data set {name!r}; accepted: {accepted}")
    sampler = make_toy(name, **(options or {}))
    return ToyLoader(sampler, batch_size, seed=seed), sampler
