"""A folder of PNG/JPEG images (searched recursively), resized and center-cropped to a square.

Each image is converted to RGB, scaled so its shorter side is ``size`` (bicubic), and the
central ``size`` x ``size`` square is kept.
"""
import os

import numpy

__all__ = ["IMAGE_EXTENSIONS", "FOLDER_ACCEPTED", "ImageFileError", "check_image_folder", "list_images", "load_image",
           "load_image_folder"]

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg")
#: what an image folder's path must name, for messages
FOLDER_ACCEPTED = "a folder of PNG/JPEG images"


def list_images(root):
    """Sorted paths of the PNG/JPEG files under ``root`` (case-insensitive extensions)."""
    paths = []
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in files:
            if name.lower().endswith(IMAGE_EXTENSIONS):
                paths.append(os.path.join(folder, name))
    return sorted(paths)


class ImageFileError(ValueError):
    """A file with an image's extension that Pillow cannot read."""


def load_image(path, size=32):
    """One image as uint8 (3, size, size): shorter side resized to ``size``, then center-cropped.
    A file Pillow cannot read (another format, cut short) is an :class:`ImageFileError`."""
    try:
        return _load_image(path, size)
    except (OSError, SyntaxError, ValueError) as exc:  # Pillow raises all three on damaged files
        if isinstance(exc, OSError) and exc.filename is not None:  # a permission or I/O error of the file
            raise
        unknown = "cannot identify" in str(exc)
        reason = "not a PNG or JPEG image" if unknown else f"damaged: {str(exc).splitlines()[0]}"
        raise ImageFileError(f"image {path} cannot be read ({reason}); remove or replace it") from None


def _load_image(path, size):
    from PIL import Image

    with Image.open(path) as img:
        img = img.convert("RGB")
        w, h = img.size
        scale = size / min(w, h)
        new_w, new_h = max(size, round(w * scale)), max(size, round(h * scale))
        if (new_w, new_h) != (w, h):
            img = img.resize((new_w, new_h), Image.BICUBIC)
        left, top = (new_w - size) // 2, (new_h - size) // 2
        img = img.crop((left, top, left + size, top + size))
        return numpy.asarray(img, dtype=numpy.uint8).transpose(2, 0, 1).copy()


def check_image_folder(root, option="data.root", accepted=None):
    """``root`` expanded and made absolute, when it is a folder (its images are not looked at).

    Raises:
        FileNotFoundError: ``root`` does not exist; NotADirectoryError: it is a file. The message
            names ``option`` (what ``root`` is called where it was given: ``data.root``,
            ``eval.reference``, ``--root`` ...) and what is ``accepted`` there (default: a
            folder of PNG/JPEG images).
    """
    accepted = accepted or FOLDER_ACCEPTED
    if root is None:
        raise ValueError(f"image_folder needs {option}: {FOLDER_ACCEPTED}")
    root = os.path.abspath(os.path.expanduser(str(root)))
    if not os.path.isdir(root):
        if os.path.exists(root):
            raise NotADirectoryError(f"{option}: {root} is a file, not a folder of images; accepted: {accepted}")
        raise FileNotFoundError(f"{option}: image folder {root} does not exist; accepted: {accepted}")
    return root


def load_image_folder(root, size=32, option="data.root", accepted=None):
    """All images under ``root`` as uint8 (N, 3, size, size), in sorted path order.

    Args:
        option, accepted: as :func:`check_image_folder`, for the messages.

    Raises:
        FileNotFoundError: when ``root`` is missing or holds no PNG/JPEG file.
        NotADirectoryError: when ``root`` is a file.
        ImageFileError: when one of them cannot be read.
    """
    root = check_image_folder(root, option, accepted)
    paths = list_images(root)
    if not paths:
        raise FileNotFoundError(f"{option}: no PNG/JPEG images ({', '.join(IMAGE_EXTENSIONS)}) under {root}; "
                                f"accepted: {accepted or FOLDER_ACCEPTED}")
    return numpy.stack([load_image(p, size) for p in paths])
