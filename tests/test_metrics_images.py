"""Image metrics by name (scores against the scores module's own functions), references as users
name them (statistics files, folders, CIFAR-10), the cached reference features, and the cache names
of CIFAR-10 copies that are not the official files."""
import os
import pickle

import numpy as np
import pytest
from PIL import Image

from gpgan.metrics import images
from gpgan.metrics.images import check_metrics, check_sample_count, metric_keys, needs_features, score_features
from gpgan.metrics.reference import (
    Reference,
    dataset_features,
    dataset_statistics,
    features_path,
    load_reference,
    parse_reference,
    save_statistics,
    statistics_path,
)
from gpgan.metrics.scores import (density_coverage, feature_statistics, frechet_distance, inception_score, kid,
                                  precision_recall)
from helpers import PixelNetwork


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def write_cifar(folder, per_batch, seed=0):
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        with open(folder / name, "wb") as f:
            pickle.dump({b"data": rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8), b"labels": [0] * per_batch},
                        f, protocol=2)


# -- metrics by name ----------------------------------------------------------------------------------
def test_metric_names_keys_and_errors():
    assert check_metrics("pr, FID,kid") == ["fid", "kid", "pr"]  # canonical order
    assert check_metrics(["is"]) == ["is"]
    assert metric_keys(["pr", "kid"]) == ["eval/kid", "eval_std/kid", "eval/precision", "eval/recall"]
    assert needs_features(["fid", "pr"]) and needs_features(["dc"]) and not needs_features(["fid", "is"])
    assert metric_keys(["dc", "fid"]) == ["eval/fid", "eval/density", "eval/coverage"]
    with pytest.raises(ValueError, match=r"unknown image metric 'lpips'; accepted: fid, kid, is, pr, dc"):
        check_metrics("fid,lpips")
    with pytest.raises(ValueError, match="no image metric named"):
        check_metrics(" , ")
    # as typed on a command line: a slip is named, not passed over (fid,fid had scored fid once)
    with pytest.raises(ValueError, match="^an empty name between commas; accepted: names from fid, kid"):
        check_metrics("fid,,kid")
    with pytest.raises(ValueError, match="^'fid' listed twice; accepted: each of fid, kid, is, pr, dc once"):
        check_metrics("fid,kid,FID")


def test_scores_by_name_equal_the_score_functions(rng):
    fake = {"pool3": rng.standard_normal((30, 6)), "logits": rng.standard_normal((30, 5))}
    real = rng.standard_normal((50, 6)) + 0.3
    ref = Reference(*feature_statistics(real), real, "real")
    got = score_features(["fid", "kid", "is", "pr"], fake, ref)
    assert list(got) == metric_keys(["fid", "kid", "is", "pr"])
    assert got["eval/fid"] == frechet_distance(*feature_statistics(fake["pool3"]), *feature_statistics(real))
    assert (got["eval/kid"], got["eval_std/kid"]) == kid(fake["pool3"], real, subsets=100, subset_size=30)
    assert (got["eval/is"], got["eval_std/is"]) == inception_score(fake["logits"], splits=10)
    # Precision and recall: against the same number of reference samples, the same subset each time.
    chosen = np.sort(np.random.RandomState(images.KID_SEED).choice(50, 30, replace=False))
    assert (got["eval/precision"], got["eval/recall"]) == precision_recall(real[chosen], fake["pool3"], k=3)
    assert score_features(["pr"], fake, ref) == {k: got[k] for k in ("eval/precision", "eval/recall")}
    # Density and coverage: the same subset, k = 5.
    dc = score_features(["dc"], fake, ref)
    assert (dc["eval/density"], dc["eval/coverage"]) == density_coverage(real[chosen], fake["pool3"], k=5)
    # More generated samples than reference ones: the generated side is cut to the reference's size.
    many = {"pool3": rng.standard_normal((80, 6))}
    taken = np.sort(np.random.RandomState(images.KID_SEED).choice(80, 50, replace=False))
    both = score_features(["pr", "dc"], many, ref)
    assert (both["eval/precision"], both["eval/recall"]) == precision_recall(real, many["pool3"][taken], k=3)
    assert (both["eval/density"], both["eval/coverage"]) == density_coverage(real, many["pool3"][taken], k=5)


def test_coverage_of_one_distribution_needs_equal_set_sizes():
    """Two samples of one Gaussian: coverage near its expectation (about 0.97 at k = 5) whichever
    side is larger; scored against a reference five times smaller without the cut it reads 1.0."""
    rng = np.random.default_rng(3)
    real = rng.standard_normal((200, 8))
    ref = Reference(*feature_statistics(real), real, "real")
    fake = {"pool3": rng.standard_normal((1000, 8))}
    coverage = score_features(["dc"], fake, ref)["eval/coverage"]
    uncut = density_coverage(real, fake["pool3"], k=5)[1]
    assert uncut == 1.0 and 0.85 < coverage < 1.0


def test_nearest_neighbour_metrics_name_the_samples_they_need():
    check_sample_count(["pr"], 4)
    check_sample_count(["fid", "kid"], 2)
    with pytest.raises(ValueError, match=r"^precision and recall \(pr\) need more than 3 samples$"):
        check_sample_count(["pr", "dc"], 3, "samples")
    with pytest.raises(ValueError, match=r"^density and coverage \(dc\) need more than 5 images$"):
        check_sample_count(["fid", "pr", "dc"], 5)


def test_small_sets_cap_kid_subsets_and_is_splits(rng):
    fake = {"pool3": rng.standard_normal((4, 3)), "logits": rng.standard_normal((4, 5))}
    real = rng.standard_normal((3, 3))
    got = score_features(["kid", "is"], fake, Reference(*feature_statistics(real), real))
    assert (got["eval/kid"], got["eval_std/kid"]) == kid(fake["pool3"], real, subsets=100, subset_size=3)
    assert (got["eval/is"], got["eval_std/is"]) == inception_score(fake["logits"], splits=4)


def test_features_metrics_refuse_a_statistics_only_reference(rng):
    fake = {"pool3": rng.standard_normal((5, 3)), "logits": rng.standard_normal((5, 4))}
    stats_only = Reference(np.zeros(3), np.eye(3), None, "statistics file s.npz")
    assert set(score_features(["fid", "is"], fake, stats_only)) == {"eval/fid", "eval/is", "eval_std/is"}
    with pytest.raises(ValueError, match="need the reference's features; statistics file s.npz has only mu and sigma"):
        score_features(["kid"], fake, stats_only)


# -- references ---------------------------------------------------------------------------------------
def test_parse_reference(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert parse_reference("cifar10") == ("cifar10", "train")
    assert parse_reference("cifar10:test") == ("cifar10", "test")
    assert parse_reference("stats/c.NPZ") == ("statistics", str(tmp_path / "stats" / "c.NPZ"))
    assert parse_reference("./cifar10") == ("image_folder", str(tmp_path / "cifar10"))
    assert parse_reference("~/faces")[1] == os.path.expanduser("~/faces")
    for bad, match in (("cifar10:valid", "CIFAR-10's split is train or test"), ("  ", "the reference is empty")):
        with pytest.raises(ValueError, match=match):
            parse_reference(bad)


def test_reference_from_a_statistics_file(tmp_path, rng):
    mu, sigma = rng.standard_normal(8), np.eye(8)
    path = save_statistics(str(tmp_path / "s.npz"), mu, sigma)
    ref = load_reference(PixelNetwork(), path)
    np.testing.assert_array_equal(ref.mu, mu)
    assert ref.features is None and ref.description == f"statistics file {path}"
    with pytest.raises(ValueError, match="is a statistics file .mu and sigma only., but KID, precision/recall and density/coverage"):
        load_reference(PixelNetwork(), path, features=True)
    with pytest.raises(FileNotFoundError, match="statistics file .*missing.npz does not exist"):
        load_reference(PixelNetwork(), str(tmp_path / "missing.npz"))
    # Statistics of another width than the network's features: refused as the file is read.
    other = save_statistics(str(tmp_path / "other.npz"), mu[:5], sigma[:5, :5])
    with pytest.raises(ValueError) as info:
        load_reference(PixelNetwork(), other, compute=False)
    assert str(info.value) == (f"statistics file {other} holds mu of shape (5,) and sigma of shape (5, 5); expected "
                               "mu (8,) and sigma (8, 8), the mean and covariance of the Inception network's 8 pool3 "
                               "features")


def test_reference_features_are_computed_once_with_their_statistics(home, tmp_path, rng):
    folder = tmp_path / "faces"
    folder.mkdir()
    for i in range(5):
        Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    net = PixelNetwork()
    assert load_reference(net, str(folder), features=True, compute=False) is None  # only checked
    assert net.seen == 0
    ref = load_reference(net, str(folder), features=True)
    assert net.seen == 5 and ref.features.shape == (5, 8) and ref.features.dtype == np.float32
    assert ref.description == f"{folder} (5 images)"
    want = net.features(np.stack([np.asarray(Image.open(folder / f"{i}.png")).transpose(2, 0, 1)
                                  for i in range(5)]))["pool3"]
    np.testing.assert_array_equal(ref.features, want.astype(np.float32))
    np.testing.assert_allclose(ref.mu, want.mean(axis=0), rtol=1e-6)
    path = features_path("image_folder", net.features_id, root=str(folder))
    assert path == statistics_path("image_folder", net.features_id, root=str(folder))[:-4] + "-pool3.npz"
    assert os.path.isfile(path)
    seen = net.seen
    again = load_reference(net, str(folder), features=True)
    assert net.seen == seen  # both from the cache
    np.testing.assert_array_equal(again.features, ref.features)
    assert load_reference(net, str(folder), features=True, compute=False) is not None
    # Statistics alone follow from cached features, without a pass over the images.
    os.remove(statistics_path("image_folder", net.features_id, root=str(folder)))
    mu, _ = dataset_statistics(net, "image_folder", root=str(folder), progress=False)
    assert net.seen == seen
    np.testing.assert_array_equal(mu, ref.mu)


def test_missing_or_tiny_references_fail_clearly(home, tmp_path):
    net = PixelNetwork()
    with pytest.raises(FileNotFoundError, match="image folder .*nowhere does not exist"):
        load_reference(net, str(tmp_path / "nowhere"), compute=False)
    (tmp_path / "afile").write_text("a file")
    for spec, error, what in ((tmp_path / "nowhere", FileNotFoundError, f"image folder {tmp_path / 'nowhere'} does "
                                                                         "not exist"),
                              (tmp_path / "afile", NotADirectoryError, f"{tmp_path / 'afile'} is a file, not a folder "
                                                                       "of images")):
        for compute in (False, True):
            with pytest.raises(error) as info:  # named as the caller calls it
                load_reference(net, str(spec), compute=compute, option="eval.reference")
            assert str(info.value) == (f"eval.reference: {what}; accepted: cifar10:train, cifar10:test, a statistics "
                                       "file (.npz with mu and sigma) or a folder of PNG/JPEG images")
    with pytest.raises(ValueError, match="reference cifar10:train needs the folder of CIFAR-10's batches"):
        load_reference(net, "cifar10:train")
    with pytest.raises(FileNotFoundError, match="CIFAR-10 files missing in"):
        load_reference(net, "cifar10:test", cifar_root=str(tmp_path / "nowhere"))
    write_cifar(tmp_path / "c", per_batch=1)
    with pytest.raises(ValueError, match=r"CIFAR-10's test split in .* holds 1 image; statistics \(a covariance\) "
                                         "need at least 2"):
        dataset_features(net, "cifar10", root=str(tmp_path / "c"), split="test", progress=False)
    cache = home / ".cache" / "gpgan" / "fid_stats"
    assert not cache.exists() or not os.listdir(cache)  # nothing cached from a failure


def test_cifar10_copies_that_are_not_the_official_files_get_their_own_cache(home, tmp_path, monkeypatch):
    write_cifar(tmp_path / "a", per_batch=2, seed=0)
    write_cifar(tmp_path / "b", per_batch=2, seed=1)
    w = PixelNetwork.features_id
    official = statistics_path("cifar10", w, split="train")
    assert os.path.basename(official) == "cifar10-train-inception-feedbeeffeed.npz"
    assert statistics_path("cifar10", w, root=str(tmp_path / "missing"), split="train") == official
    a, b = (statistics_path("cifar10", w, root=str(tmp_path / x), split="train") for x in "ab")
    assert a != official and a != b and os.path.basename(a).startswith("cifar10-train-")
    assert statistics_path("cifar10", w, root=str(tmp_path / "a"), split="test") != a.replace("train", "test")
    # Files whose md5s are the official ones are the official data set, wherever they are.
    from gpgan.data import cifar
    from gpgan.files import digest

    monkeypatch.setattr(cifar, "CIFAR10_FILE_MD5", {f"data_batch_{i}": digest(str(tmp_path / "a" / f"data_batch_{i}"),
                                                                               "md5") for i in range(1, 6)})
    assert statistics_path("cifar10", w, root=str(tmp_path / "a"), split="train") == official
    net = PixelNetwork()
    ref = load_reference(net, "cifar10:train", cifar_root=str(tmp_path / "b"), features=True)
    assert ref.description == "cifar10:train (10 images)" and net.seen == 10
    assert os.path.isfile(features_path("cifar10", w, root=str(tmp_path / "b")))
