"""CIFAR-10 reader (restricted unpickler, download, safe extraction), image folders, loaders.

Every test writes its own tiny fixtures in the official format; none reads the real data.
"""
import hashlib
import os
import pickle
import re
import tarfile

import numpy as np
import pytest

from gpgan.data import (
    ImageLoader,
    ToyLoader,
    download_cifar10,
    load_cifar10,
    load_image_folder,
    make_loader,
    restricted_load,
    safe_extract,
    to_uint8,
)
from gpgan.backend import stream
from gpgan.data.cifar import TEST_FILES, TRAIN_FILES
from helpers import write_cifar


@pytest.mark.parametrize("protocol", [2, pickle.DEFAULT_PROTOCOL])
def test_cifar_reads_official_format(tmp_path, protocol):
    train, test, labels = write_cifar(tmp_path / "c", protocol=protocol)
    images, got_labels = load_cifar10(tmp_path / "c")
    assert images.dtype == np.uint8 and images.shape == (30, 3, 32, 32)
    np.testing.assert_array_equal(images, train)
    np.testing.assert_array_equal(got_labels, labels)
    images, _ = load_cifar10(tmp_path / "c", split="test")
    np.testing.assert_array_equal(images, test)


class _Evil:
    def __reduce__(self):
        return (os.system, ("touch pwned_by_pickle",))


def test_malicious_pickle_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_cifar(tmp_path / "c")
    with open(tmp_path / "c" / "data_batch_3", "wb") as f:
        pickle.dump({b"data": _Evil(), b"labels": []}, f, protocol=2)
    with pytest.raises(ValueError, match=r"data_batch_3: refused to unpickle \(refused global '(posix|os|nt)\.system'"):
        load_cifar10(tmp_path / "c")
    assert not (tmp_path / "pwned_by_pickle").exists()


class _TamperedDtype:
    """Pickles as ``numpy.dtype(spec)`` followed by a crafted state (its flags)."""

    def __init__(self, spec, flags):
        self.spec, self.flags = spec, flags

    def __reduce__(self):
        return (np.dtype, (self.spec, False, True), (3, "|", None, None, None, -1, -1, self.flags))


class _TamperedArray:
    """Pickles as NumPy's own array reduction, with a dtype of tampered flags and raw bytes."""

    def __init__(self, spec, flags, n, raw=None):
        self.spec, self.flags, self.n, self.raw = spec, flags, n, raw

    def __reduce__(self):
        from numpy._core.multiarray import _reconstruct
        raw = self.raw if self.raw is not None else b"\x41" * (8 * self.n)
        return (_reconstruct, (np.ndarray, (0,), b"b"), (1, (self.n,), _TamperedDtype(self.spec, self.flags), False, raw))


@pytest.mark.parametrize("payload, message", [
    # an object array from raw bytes: NumPy would read 0x4141... as a pointer (a crash, or worse)
    ({b"data": np.zeros((1, 3072), np.uint8), b"labels": _TamperedArray("O8", 0, 1)}, "array type 'O8' is refused"),
    ({b"data": _TamperedArray("O8", 0, 1), b"labels": [0]}, "array type 'O8' is refused"),
    # a number type with the object flags set: built afresh, the flags are dropped, and the shape is checked
    ({b"data": _TamperedArray("u1", 63, 8, raw=b"\x41" * 8), b"labels": [0]}, "b'data' must be uint8 of shape (N, 3072)"),
    ({b"data": _TamperedArray("u1", 0, 3072, raw=b"\x00" * 100), b"labels": [0]}, "an array of shape (3072,) with 100 bytes"),
])
def test_array_states_are_checked_before_numpy_builds_them(tmp_path, payload, message):
    write_cifar(tmp_path / "c")
    with open(tmp_path / "c" / "data_batch_1", "wb") as f:
        pickle.dump(payload, f, protocol=2)
    with pytest.raises(ValueError, match=re.escape(message)):
        load_cifar10(tmp_path / "c")


class _Python2Array:
    """Pickles as Python 2's NumPy wrote the official batches: the type and byte order as bytes."""

    def __init__(self, array):
        self.array = array

    def __reduce__(self):
        from numpy._core.multiarray import _reconstruct
        state = (1, self.array.shape, _Py2Dtype(self.array.dtype.str[1:].encode()), False, self.array.tobytes())
        return (_reconstruct, (np.ndarray, (0,), b"b"), state)


class _Py2Dtype:
    def __init__(self, spec):
        self.spec = spec

    def __reduce__(self):
        return (np.dtype, (self.spec, 0, 1), (3, b"|", None, None, None, -1, -1, 0))


def test_batches_pickled_as_python_2_did_load(tmp_path):
    write_cifar(tmp_path / "c")
    data = np.random.default_rng(1).integers(0, 256, (2, 3072), dtype=np.uint8)
    with open(tmp_path / "c" / "data_batch_1", "wb") as f:
        pickle.dump({b"data": _Python2Array(data), b"labels": _Python2Array(np.array([4, 7], np.int64))}, f, protocol=2)
    images, labels = load_cifar10(tmp_path / "c")
    np.testing.assert_array_equal(images[:2].reshape(2, -1), data)
    assert labels[:2].tolist() == [4, 7] and type(images) is np.ndarray


def test_labels_outside_the_ten_classes_are_refused(tmp_path):
    write_cifar(tmp_path / "c")
    with open(tmp_path / "c" / "data_batch_4", "wb") as f:
        pickle.dump({b"data": np.zeros((3, 3072), np.uint8), b"labels": [3, 12, -1]}, f, protocol=2)
    with pytest.raises(ValueError, match=r"data_batch_4: labels must be classes 0 to 9, got values from -1 to 12"):
        load_cifar10(tmp_path / "c")


def test_a_pickle_that_asks_for_too_much_memory_is_corrupt(tmp_path):
    write_cifar(tmp_path / "c")
    (tmp_path / "c" / "data_batch_5").write_bytes(b"\x80\x02}r\xff\xff\xff\x7f.")
    with pytest.raises(ValueError, match=r"data_batch_5: truncated or corrupt pickle"):
        load_cifar10(tmp_path / "c")


def test_truncated_batch_names_the_file(tmp_path):
    write_cifar(tmp_path / "c")
    path = tmp_path / "c" / "data_batch_2"
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(ValueError, match=r"data_batch_2: truncated or corrupt pickle"):
        load_cifar10(tmp_path / "c")


def test_restricted_unpickler_refuses_other_callables(tmp_path):
    path = tmp_path / "p"
    with open(path, "wb") as f:
        pickle.dump({b"x": np.random.default_rng(0)}, f, protocol=2)  # needs numpy.random globals
    with pytest.raises(pickle.UnpicklingError, match="refused global 'numpy.random"):
        restricted_load(path)


def test_missing_cifar_without_download_says_where_to_put_files(tmp_path):
    with pytest.raises(FileNotFoundError) as info:
        load_cifar10(tmp_path / "nowhere", download=False)
    msg = str(info.value)
    assert str(tmp_path / "nowhere") in msg and "data_batch_1" in msg and "data.download" in msg


def _archive_of(tmp_path, members):
    """A .tar.gz of ``members``: (arcname, bytes) pairs; returns (path, md5)."""
    path = tmp_path / "cifar-10-python.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, payload in members:
            src = tmp_path / "payload.bin"
            src.write_bytes(payload)
            tar.add(src, arcname=name)
    return path, hashlib.md5(path.read_bytes()).hexdigest()


def test_download_checks_md5_and_extracts(tmp_path):
    write_cifar(tmp_path / "src" / "cifar-10-batches-py")
    src = tmp_path / "src" / "cifar-10-batches-py"
    archive_dir = tmp_path / "archive"
    archive_dir.mkdir()
    members = [(f"cifar-10-batches-py/{n}", (src / n).read_bytes()) for n in TRAIN_FILES + TEST_FILES]
    archive, md5 = _archive_of(archive_dir, members)
    root = tmp_path / "user" / "cifar"
    with pytest.raises(RuntimeError, match="md5"):
        download_cifar10(root, url=archive.as_uri(), md5="0" * 32, progress=False)
    download_cifar10(root, url=archive.as_uri(), md5=md5, progress=False)
    images, _ = load_cifar10(root)
    reference, _ = load_cifar10(src)
    np.testing.assert_array_equal(images, reference)


def test_offline_download_fails_with_instructions(tmp_path):
    root = tmp_path / "c"
    with pytest.raises(RuntimeError) as info:
        download_cifar10(root, url=(tmp_path / "no-such-archive.tar.gz").as_uri(), progress=False)
    assert "could not download" in str(info.value) and str(root) in str(info.value)


def test_safe_extract_refuses_path_traversal_and_links(tmp_path):
    archive, _ = _archive_of(tmp_path, [("ok.txt", b"fine"), ("../escape.txt", b"bad")])
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(ValueError, match="escape.txt"):
        safe_extract(archive, dest)
    assert not (tmp_path / "escape.txt").exists() and not (dest / "ok.txt").exists()

    link_archive = tmp_path / "link.tar.gz"
    with tarfile.open(link_archive, "w:gz") as tar:
        info = tarfile.TarInfo("evil_link")
        info.type = tarfile.SYMTYPE
        info.linkname = "/etc/passwd"
        tar.addfile(info)
    with pytest.raises(ValueError, match="evil_link"):
        safe_extract(link_archive, dest)


def test_image_loader_range_epochs_and_determinism():
    rng = np.random.default_rng(3)
    images = rng.integers(0, 256, size=(12, 3, 4, 4), dtype=np.uint8)
    loader = ImageLoader(images, batch_size=4, seed=7)
    epoch = np.concatenate([loader.next() for _ in range(3)])
    assert epoch.dtype == np.float32 and epoch.shape == (12, 3, 4, 4)
    expected = images.astype(np.float64) / 127.5 - 1.0
    # One epoch visits every image exactly once.
    order = [int(np.flatnonzero(np.all(np.isclose(expected, e, atol=1e-6), axis=(1, 2, 3)))[0]) for e in epoch]
    assert sorted(order) == list(range(12))
    assert order != list(range(12))  # shuffled
    # The next epoch has another order; the same seed gives the same batches.
    second = np.concatenate([loader.next() for _ in range(3)])
    assert not np.array_equal(epoch, second)
    again = ImageLoader(images, batch_size=4, seed=7)
    np.testing.assert_array_equal(np.concatenate([again.next() for _ in range(6)]),
                                  np.concatenate([epoch, second]))


def test_image_loader_resumes_mid_epoch():
    images = np.random.default_rng(0).integers(0, 256, size=(10, 3, 2, 2), dtype=np.uint8)
    loader = ImageLoader(images, batch_size=3, seed=1, hflip=True)
    for _ in range(4):
        loader.next()
    state = loader.state_dict()
    rest = [loader.next() for _ in range(5)]
    resumed = ImageLoader(images, batch_size=3, seed=1, hflip=True)
    resumed.load_state_dict(state)
    for a, b in zip(rest, [resumed.next() for _ in range(5)]):
        np.testing.assert_array_equal(a, b)
    # A folder that gained an image orders its epochs otherwise: no resume, and it says why.
    grown = ImageLoader(np.concatenate([images, images[:1]]), batch_size=3, seed=1, hflip=True)
    with pytest.raises(ValueError, match=r"^the data changed: the run trained on 10 images and now finds 11,"):
        grown.load_state_dict(state)
    older = {k: v for k, v in state.items() if k != "images"}  # checkpoints written before the count
    grown.load_state_dict(older)
    assert (grown.epoch, grown.position) == (state["epoch"], state["position"])


def test_a_run_saved_before_the_epoch_stream_resumes_with_its_own_orders():
    """Loader states saved before the image loader had a stream of its own (no "order") keep the
    (seed, epoch) orders they were trained with, so their runs resume exactly; new states keep the
    stream's. A version this gpgan does not know is refused."""
    images = np.zeros((8, 3, 1, 1), dtype=np.uint8)
    images[:, 0, 0, 0] = np.arange(8)

    def orders(loader, n):
        return [to_uint8(loader.next())[:, 0, 0, 0].tolist() for _ in range(n)]
    old = ImageLoader(images, batch_size=8, seed=4)
    old.load_state_dict({"epoch": 2, "position": 8, "images": 8})  # as a run written before
    assert orders(old, 2) == [np.random.default_rng([4, e]).permutation(8).tolist() for e in (3, 4)]
    assert old.state_dict()["order"] == 1
    new = ImageLoader(images, batch_size=8, seed=4)
    new.load_state_dict({"epoch": 2, "position": 8, "images": 8, "order": 2})
    assert orders(new, 2) == [stream(4, "epoch_order", e).permutation(8).tolist() for e in (3, 4)]
    with pytest.raises(ValueError, match="data order is of version 3, which this gpgan does not know"):
        new.load_state_dict({"epoch": 0, "position": 0, "images": 8, "order": 3})


def test_hflip_returns_originals_or_mirror_images():
    images = np.random.default_rng(5).integers(0, 256, size=(64, 3, 3, 5), dtype=np.uint8)
    plain = ImageLoader(images, batch_size=64, seed=2).next()
    flipped = ImageLoader(images, batch_size=64, seed=2, hflip=True).next()  # same order
    same = np.all(flipped == plain, axis=(1, 2, 3))
    mirrored = np.all(flipped == plain[:, :, :, ::-1], axis=(1, 2, 3))
    assert np.all(same | mirrored)
    assert 10 < mirrored.sum() < 54


def test_toy_loader_resumes():
    loader, sampler = make_loader("grid25", batch_size=5, seed=3)
    assert sampler.means.shape == (25, 2)
    loader.next()
    state = loader.state_dict()
    a = loader.next()
    other, _ = make_loader("grid25", batch_size=5, seed=3)
    other.load_state_dict(state)
    np.testing.assert_array_equal(a, other.next())
    assert isinstance(loader, ToyLoader) and a.shape == (5, 2) and a.dtype == np.float32


def test_each_random_stream_of_a_run_draws_its_own_numbers(monkeypatch):
    """The weights, the loaders, the trainer's noise, the sample grids and the evaluations each draw
    from a generator of their own: no two of a run's streams (epochs 0-39 included) start alike.
    The image loader seeded epoch e with (seed, e) before, which is the weights' stream for e = 0
    (NumPy's seed sequence pads with zeros) and the trainer's for e = 2."""
    from gpgan.backend import STREAMS, get_rng, manual_seed, stream
    from gpgan.backend import random as global_random

    monkeypatch.setattr(global_random, "_rng", global_random._rng)  # the other tests' generator, put back after
    for seed in (0, 1, 7):
        manual_seed(seed)
        starts = {"weights": tuple(get_rng().bit_generator.random_raw(4))}
        assert starts["weights"] == tuple(stream(seed, "weights").bit_generator.random_raw(4))
        starts.update({name: tuple(stream(seed, name).bit_generator.random_raw(4))
                       for name in STREAMS if name not in ("weights", "epoch_order")})
        starts.update({("epoch_order", e): tuple(stream(seed, "epoch_order", e).bit_generator.random_raw(4))
                       for e in range(40)})
        assert len(set(starts.values())) == len(starts) == len(STREAMS) - 2 + 40 + 1
    # The loaders draw from their own streams.
    images = np.zeros((64, 3, 1, 1), dtype=np.uint8)
    images[:, 0, 0, 0] = np.arange(64)
    loader = ImageLoader(images, batch_size=64, seed=3)
    for e in range(3):
        order = to_uint8(loader.next())[:, 0, 0, 0]
        np.testing.assert_array_equal(order, stream(3, "epoch_order", e).permutation(64))
    toy, _ = make_loader("grid25", batch_size=5, seed=3)
    assert toy.rng.bit_generator.state == stream(3, "toy_data").bit_generator.state


def test_image_folder_resize_and_center_crop(tmp_path):
    from PIL import Image

    rng = np.random.default_rng(0)
    wide = rng.integers(0, 256, size=(32, 40, 3), dtype=np.uint8)  # H 32, W 40: no resize, crop 4..36
    Image.fromarray(wide).save(tmp_path / "a.png")
    (tmp_path / "sub").mkdir()
    big = np.zeros((64, 96, 3), dtype=np.uint8)
    big[:, :8] = 255  # a white band on the left that the crop removes
    Image.fromarray(big).save(tmp_path / "sub" / "b.JPG", quality=95)
    (tmp_path / "notes.txt").write_text("not an image")
    images = load_image_folder(tmp_path)
    assert images.shape == (2, 3, 32, 32) and images.dtype == np.uint8
    np.testing.assert_array_equal(images[0], wide[:, 4:36].transpose(2, 0, 1))
    assert images[1].max() < 40  # resized to 48x32 the band is columns 0..4; the crop keeps 8..40
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no PNG/JPEG"):
        load_image_folder(tmp_path / "empty")


def test_a_bad_image_folder_names_the_key_it_was_given_as_and_what_it_is(tmp_path):
    """Missing, a file, or without images: one line naming the option or key the caller says the
    path came from (data.root by default), what is wrong, and what is accepted there."""
    from gpgan.data.image_folder import check_image_folder

    afile, missing, empty = tmp_path / "afile", tmp_path / "nope", tmp_path / "empty"
    afile.write_text("not a folder")
    empty.mkdir()
    accepted = "a folder of PNG/JPEG images"
    cases = [(afile, NotADirectoryError, f"{afile} is a file, not a folder of images"),
             (missing, FileNotFoundError, f"image folder {missing} does not exist"),
             (empty, FileNotFoundError, f"no PNG/JPEG images (.png, .jpg, .jpeg) under {empty}")]
    for root, error, what in cases:
        with pytest.raises(error) as info:
            load_image_folder(root)
        assert str(info.value) == f"data.root: {what}; accepted: {accepted}"
        with pytest.raises(error) as info:
            load_image_folder(str(root), option="eval.reference", accepted="cifar10:train or a folder of images")
        assert str(info.value) == f"eval.reference: {what}; accepted: cifar10:train or a folder of images"
        assert "set data.root" not in str(info.value)
    for root, error, what in cases[:2]:  # the check alone, before long work: the same messages
        with pytest.raises(error) as info:
            check_image_folder(str(root), "--root")
        assert str(info.value) == f"--root: {what}; accepted: {accepted}"
    assert check_image_folder(str(empty), "--root") == str(empty)


def test_an_unreadable_image_in_a_folder_is_named_with_what_is_wrong(tmp_path):
    from PIL import Image

    from gpgan.data.image_folder import ImageFileError

    Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(tmp_path / "a.png")
    whole = (tmp_path / "a.png").read_bytes()
    for content, reason in ((b"not an image", "not a PNG or JPEG image"),
                            (whole[:len(whole) // 2], "damaged: image file is truncated")):
        (tmp_path / "b.png").write_bytes(content)
        with pytest.raises(ImageFileError) as info:
            load_image_folder(tmp_path)
        message = str(info.value)  # (Pillow's words about a damaged file may go on, as its version has them)
        assert message.startswith(f"image {tmp_path / 'b.png'} cannot be read ({reason}")
        assert message.endswith("); remove or replace it") and "\n" not in message
