"""Reference statistics (files, cache names, data sets), and generated images quantized as real ones."""
import os

import numpy as np
import pytest
from PIL import Image

from gpgan.data import load_image_folder, to_uint8, to_unit_range
from gpgan.metrics import reference
from gpgan.metrics.reference import dataset_statistics, load_statistics, save_statistics, statistics_path
from gpgan.metrics.scores import feature_statistics


# -- generated images reach the network through the loader's 256 levels -----------------------
def test_to_uint8_inverts_the_loaders_unit_range():
    levels = np.arange(256, dtype=np.uint8).reshape(1, 1, 16, 16).repeat(3, axis=1)
    np.testing.assert_array_equal(to_uint8(to_unit_range(levels)), levels)
    np.testing.assert_array_equal(to_uint8(to_unit_range(levels).astype(np.float64)), levels)


def test_to_uint8_rounds_to_the_nearest_level_and_clips(rng):
    images = rng.uniform(-1.2, 1.2, (2, 3, 5, 4)).astype(np.float32)
    got = to_uint8(images)
    assert got.dtype == np.uint8 and got.shape == images.shape
    np.testing.assert_array_equal(got, np.clip(np.floor((images.astype(np.float64) + 1) * 127.5 + 0.5), 0, 255))
    assert got.min() == 0 and got.max() == 255


# -- statistics files -------------------------------------------------------------------------------
def test_statistics_files_round_trip_and_published_layout(tmp_path, rng):
    mu, sigma = rng.standard_normal(5), np.cov(rng.standard_normal((20, 5)), rowvar=False)
    path = tmp_path / "deep" / "stats.npz"
    save_statistics(path, mu, sigma)
    with np.load(path) as npz:
        assert sorted(npz.files) == ["mu", "sigma"]  # nothing but pytorch-fid's two arrays
    got = load_statistics(path)
    np.testing.assert_array_equal(got[0], mu)
    np.testing.assert_array_equal(got[1], sigma)
    published = tmp_path / "fid_stats_cifar10_train.npz"  # TTUR's files are float32 with extras
    np.savez(published, mu=mu.astype(np.float32), sigma=sigma.astype(np.float32), note=np.array("ttur"))
    mu32, sigma32 = load_statistics(published)
    assert mu32.dtype == sigma32.dtype == np.float64
    np.testing.assert_allclose(mu32, mu, rtol=1e-6)
    np.testing.assert_allclose(sigma32, sigma, rtol=1e-6)


def test_statistics_file_errors(tmp_path):
    bad = tmp_path / "bad.npz"
    np.savez(bad, mean=np.zeros(3))
    with pytest.raises(ValueError, match=r"holds arrays 'mu' and 'sigma', this one has \['mean'\]"):
        load_statistics(bad)
    np.savez(bad, mu=np.zeros(3), sigma=np.zeros((3, 2)))
    with pytest.raises(ValueError, match=r"holds mu of shape \(3,\) and sigma of shape \(3, 2\); expected mu \(D,\) "
                                         r"and sigma \(D, D\)$"):
        load_statistics(bad)
    for junk in (b"not a zip", b"PK\x03\x04 broken"):
        bad.write_bytes(junk)
        with pytest.raises(ValueError, match="statistics file .*bad.npz is not an .npz file"):
            load_statistics(bad)
    np.savez(bad, mu=np.zeros(3), sigma=np.array([{"a": 1}], dtype=object))
    with pytest.raises(ValueError, match=r"bad.npz: entry 'sigma' holds pickled Python objects; .npz files are read "
                                         "without pickles"):
        load_statistics(bad)
    with pytest.raises(ValueError, match="save_statistics: mu must be"):
        save_statistics(tmp_path / "x.npz", np.zeros(3), np.zeros(3))


def test_statistics_of_another_width_or_not_finite_are_refused_as_the_file_is_read(tmp_path):
    """The network's feature width (2048 for the FID Inception) is checked when the file is read,
    not when FID is computed: one line naming the file, what it holds and what is expected."""
    bad = tmp_path / "badmu.npz"
    np.savez(bad, mu=np.zeros(5), sigma=np.eye(5))
    assert load_statistics(bad)[0].shape == (5,)  # any width when none is asked for
    with pytest.raises(ValueError) as info:
        load_statistics(bad, 2048)
    assert str(info.value) == (f"statistics file {bad} holds mu of shape (5,) and sigma of shape (5, 5); expected "
                               "mu (2048,) and sigma (2048, 2048), the mean and covariance of the Inception "
                               "network's 2048 pool3 features")
    np.savez(bad, mu=np.zeros(4), sigma=np.eye(4))
    mu, sigma = load_statistics(bad, 4)
    assert mu.dtype == sigma.dtype == np.float64
    for mu, sigma, wrong in ((np.array([0, np.nan, 0, 0]), np.eye(4), "mu holds"),
                             (np.zeros(4), np.diag([1, 1, np.inf, 1]), "sigma holds"),
                             (np.full(4, np.nan), np.full((4, 4), -np.inf), "mu and sigma hold")):
        np.savez(bad, mu=mu, sigma=sigma)
        with pytest.raises(ValueError) as info:
            load_statistics(bad, 4)
        assert str(info.value) == (f"statistics file {bad}: {wrong} NaN or infinite values; expected mu (4,) and "
                                   "sigma (4, 4), the mean and covariance of the Inception network's 4 pool3 "
                                   "features, finite numbers")
    np.savez(bad, mu=np.array(["a", "b"]), sigma=np.eye(2))
    with pytest.raises(ValueError, match=r"badmu.npz holds mu of dtype <U1 and sigma of dtype float64; expected real "
                                         r"numbers: mu \(2,\)"):
        load_statistics(bad, 2)


def test_statistics_written_under_a_file_name_that_file_and_leave_nothing(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("a file")
    with pytest.raises(NotADirectoryError) as info:
        save_statistics(afile / "deeper" / "x.npz", np.zeros(2), np.eye(2))
    from gpgan.files import describe_os_error

    assert describe_os_error(info.value) == f"{afile}: a file, not a folder"
    assert sorted(os.listdir(tmp_path)) == ["afile"] and afile.read_text() == "a file"


# -- data sets ------------------------------------------------------------------------------------
class StandInNetwork:
    """Features from the pixels (the caching logic does not need the real network)."""

    weights_id = "0123456789abcdef" * 4
    features_id = weights_id[:12]

    def __init__(self):
        self.calls = 0

    def features(self, images, batch_size=50, progress=False):
        self.calls += 1
        return {"pool3": images.reshape(len(images), -1)[:, :6].astype(np.float64)}


def _write_images(folder, count, rng):
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        Image.fromarray(rng.integers(0, 256, (40, 36, 3), dtype=np.uint8)).save(folder / f"{i}.png")


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_image_folder_statistics_are_computed_once(home, tmp_path, rng):
    root = tmp_path / "faces"
    _write_images(root, 5, rng)
    net = StandInNetwork()
    mu, sigma = dataset_statistics(net, "image_folder", root=str(root), progress=False)
    want = feature_statistics(net.features(load_image_folder(str(root)))["pool3"])
    np.testing.assert_allclose(mu, want[0])
    np.testing.assert_allclose(sigma, want[1])
    path = statistics_path("image_folder", net.features_id, root=str(root))
    assert os.path.dirname(path) == str(home / ".cache" / "gpgan" / "fid_stats")
    assert os.path.basename(path).startswith("image_folder-faces-") and path.endswith("-inception-0123456789ab.npz")
    assert os.path.isfile(path)
    calls = net.calls
    again = dataset_statistics(net, "image_folder", root=str(root), progress=False)
    assert net.calls == calls  # read from the cache
    np.testing.assert_array_equal(again[0], mu)
    dataset_statistics(net, "image_folder", root=str(root), progress=False, cache=False)
    assert net.calls == calls + 1


def test_cache_names_follow_the_data_and_the_weights(home, tmp_path, rng):
    root = tmp_path / "imgs"
    _write_images(root, 2, rng)
    before = statistics_path("image_folder", "a" * 12, root=str(root))
    assert statistics_path("image_folder", "a" * 12, root=str(root)) == before
    assert statistics_path("image_folder", "b" * 12, root=str(root)) != before
    _write_images(root / "more", 1, rng)  # a new image: other statistics
    assert statistics_path("image_folder", "a" * 12, root=str(root)) != before
    assert os.path.basename(statistics_path("cifar10", "c" * 12, split="test")) == "cifar10-test-inception-cccccccccccc.npz"


def test_cache_names_follow_the_networks_dtype_and_features_version(monkeypatch):
    """float32 and float64 networks with the same weights compute different features, and a new
    version of the features (another preprocessing, say) must not reuse older caches; the float32
    features of version 1 keep the names caches had before these were part of them."""
    from gpgan.metrics import InceptionV3
    from gpgan.metrics.inception import random_state_dict

    state = random_state_dict(seed=0)
    f32, f64 = InceptionV3(state), InceptionV3(state, dtype=np.float64)
    assert f32.features_id == f32.weights_id[:12]
    assert f64.features_id == f32.weights_id[:12] + "-float64"
    names = {statistics_path("cifar10", net.features_id, split="train") for net in (f32, f64)}
    monkeypatch.setattr(InceptionV3, "FEATURES_VERSION", 2)
    assert f32.features_id == f32.weights_id[:12] + "-v2" and f64.features_id.endswith("-float64-v2")
    names |= {statistics_path("cifar10", net.features_id, split="train") for net in (f32, f64)}
    assert len(names) == 4


def test_dataset_errors(home):
    net = StandInNetwork()
    with pytest.raises(ValueError, match="unknown data set 'mnist' for statistics; accepted: cifar10, image_folder"):
        dataset_statistics(net, "mnist")
    with pytest.raises(ValueError, match="CIFAR-10 split 'valid'"):
        statistics_path("cifar10", net.features_id, split="valid")
    with pytest.raises(ValueError, match="image_folder statistics need root"):
        dataset_statistics(net, "image_folder")
    with pytest.raises(FileNotFoundError, match="CIFAR-10 files missing in"):
        dataset_statistics(net, "cifar10", root=str(home / "nowhere"))


def test_cifar10_statistics_use_the_whole_split(home, monkeypatch, rng):
    images = rng.integers(0, 256, (12, 3, 32, 32), dtype=np.uint8)
    seen = {}

    def fake_load(root, split="train", download=False, progress=True):
        seen.update(root=root, split=split, download=download)
        return images, np.zeros(12, np.int64)

    monkeypatch.setattr("gpgan.data.load_cifar10", fake_load)
    net = StandInNetwork()
    mu, _ = dataset_statistics(net, "cifar10", root="/data/cifar", split="test", download=True, progress=False)
    assert seen == {"root": "/data/cifar", "split": "test", "download": True}
    np.testing.assert_allclose(mu, images.reshape(12, -1)[:, :6].mean(axis=0))
    assert os.path.isfile(reference.statistics_path("cifar10", net.features_id, split="test"))
