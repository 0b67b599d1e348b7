"""gpgan-eval real: a real data set's images scored against a reference (the real-data floor),
through the command line: a set against itself (FID 0, KID's closed form), CIFAR-10's test split
against its training split recomputed with the metric functions, the JSON file study reports
read, and bad input. Most tests use a stand-in network (features from the pixels, so that scores
are recomputed at no cost); one runs gpgan's Inception on random weights."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from gpgan.cli import eval as eval_cli
from gpgan.data import load_cifar10, load_image_folder
from gpgan.metrics import InceptionV3, inception, kid, precision_recall
from gpgan.metrics import density_coverage, feature_statistics, frechet_distance
from gpgan.metrics.images import DC_K, KID_SUBSETS, PR_K
from gpgan.metrics.inception import random_state_dict
from gpgan.metrics.real_scores import read_real_scores
from gpgan.metrics.scores import KID_SEED
from helpers import PixelNetwork, ROOT, write_cifar


@pytest.fixture
def data(tmp_path):
    """Fixture CIFAR-10 files (30 training, 6 test images) and a folder of 5 PNG images."""
    write_cifar(tmp_path / "cifar", per_batch=6)
    folder = tmp_path / "faces"
    folder.mkdir()
    for i, picture in enumerate(np.random.default_rng(3).integers(0, 256, (5, 32, 32, 3), dtype=np.uint8)):
        Image.fromarray(picture).save(folder / f"{i}.png")
    return tmp_path


@pytest.fixture
def pixel_network(data, monkeypatch):
    """InceptionV3.load gives a :class:`PixelNetwork`; the weights file must still exist."""
    weights = data / "weights.npz"
    weights.write_bytes(b"stand-in")
    monkeypatch.setenv("HOME", str(data / "home"))
    monkeypatch.setenv(inception.WEIGHTS_ENV, str(weights))
    net = PixelNetwork()
    monkeypatch.setattr(InceptionV3, "load", classmethod(lambda cls, *args, **kwargs: net))
    return net


def pool3(images):
    """The stand-in network's features of uint8 NCHW images, float32 as the cache keeps them."""
    return PixelNetwork().features(images)["pool3"].astype(np.float32)


def kid_of_a_set_with_itself(x):
    """KID of (m, D) features against themselves when every subset is the whole set: the unbiased
    MMD^2 with kernel (u.v / D + 1)^3 is 2 (S - T) / (m (m - 1)) - 2 S / m^2 (S: the sum of the
    kernel matrix, T: its trace); 0 in the limit of many samples."""
    x = x.astype(np.float64)
    m, d = x.shape
    k = (x @ x.T / d + 1) ** 3
    s, t = k.sum(), np.trace(k)
    return 2 * (s - t) / (m * (m - 1)) - 2 * s / m ** 2


def test_a_set_against_itself_has_fid_0_and_kid_of_the_closed_form(data, pixel_network, capsys):
    for source, images in (("cifar10:test", load_cifar10(str(data / "cifar"), split="test")[0]),
                           (str(data / "faces"), load_image_folder(str(data / "faces")))):
        assert eval_cli.main(["real", source, "--ref", source, "--data-root", str(data / "cifar"), "--quiet"]) == 0
        out, err = capsys.readouterr()
        rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()[1:]}
        assert abs(float(rows["FID"][0])) < 1e-9
        want = kid_of_a_set_with_itself(pool3(images))
        assert float(rows["KID"][0]) == pytest.approx(want, rel=1e-5, abs=1e-12)
        assert float(rows["KID"][2]) < 1e-9  # every subset is the whole set: no spread
        assert rows["precision"] == ["1"] and rows["recall"] == ["1"]
        assert f"gpgan-eval: {source} ({len(images)} images) against {source} ({len(images)} images)" in err


def test_test_split_against_training_split_equals_the_metric_functions(data, pixel_network, capsys):
    out_file = data / "reports" / "floor.json"
    assert eval_cli.main(["real", "cifar10:test", "--ref", "cifar10:train", "--data-root", str(data / "cifar"),
                          "--out", str(out_file), "--quiet"]) == 0
    out, err = capsys.readouterr()
    test = pool3(load_cifar10(str(data / "cifar"), split="test")[0])
    train = pool3(load_cifar10(str(data / "cifar"), split="train")[0])
    # precision/recall compare equal numbers: a fixed random subset of the reference, as for runs
    subset = train[np.sort(np.random.RandomState(KID_SEED).choice(len(train), len(test), replace=False))]
    precision, recall = precision_recall(subset, test, k=PR_K)
    kid_mean, kid_std = kid(test, train, subsets=KID_SUBSETS, subset_size=len(test))
    want = {"eval/fid": frechet_distance(*feature_statistics(test), *feature_statistics(train)),
            "eval/kid": kid_mean, "eval_std/kid": kid_std, "eval/precision": precision, "eval/recall": recall}
    record = read_real_scores(out_file)
    assert record["scores"] == pytest.approx(want, rel=1e-9)
    assert list(record["scores"]) == list(want)
    assert {k: record[k] for k in ("source", "reference", "images", "metrics", "device")} == {
        "source": "cifar10:test (6 images)", "reference": "cifar10:train (30 images)", "images": 6,
        "metrics": ["fid", "kid", "pr"], "device": "cpu"}
    assert record["inception_weights_id"] == PixelNetwork.weights_id
    assert json.loads(out_file.read_text()) == record
    assert not [p for p in out_file.parent.iterdir() if p.name != "floor.json"]  # no temporary file left
    lines = out.splitlines()
    assert lines[0].split() == ["metric", "value"]
    assert lines[1].split() == ["FID", f"{want['eval/fid']:.6g}"]
    assert lines[2].split() == ["KID", f"{want['eval/kid']:.6g}", "±", f"{want['eval_std/kid']:.2g}"]
    assert err.strip() == f"gpgan-eval: cifar10:test (6 images) against cifar10:train (30 images); wrote {out_file}"

    # Features are cached as a reference's: a second run computes nothing and scores the same.
    seen = pixel_network.seen
    assert eval_cli.main(["real", "cifar10:test", "--ref", "cifar10:train", "--data-root", str(data / "cifar"),
                          "--metrics", "fid", "--quiet"]) == 0
    assert pixel_network.seen == seen
    assert capsys.readouterr().out.splitlines()[1].split() == ["FID", f"{want['eval/fid']:.6g}"]

    # Density and coverage on request: the same reference subset, k = 5.
    dc_file = data / "reports" / "dc.json"
    assert eval_cli.main(["real", "cifar10:test", "--ref", "cifar10:train", "--data-root", str(data / "cifar"),
                          "--metrics", "dc", "--out", str(dc_file), "--quiet"]) == 0
    density, coverage = density_coverage(subset, test, k=DC_K)
    assert read_real_scores(dc_file)["scores"] == pytest.approx({"eval/density": density, "eval/coverage": coverage},
                                                                rel=1e-9)


def test_a_statistics_file_reference_gives_fid_only(data, pixel_network, capsys):
    stats = data / "train.npz"
    assert eval_cli.main(["stats", "--data", "cifar10", "--root", str(data / "cifar"), "--out", str(stats),
                          "--quiet"]) == 0
    capsys.readouterr()
    assert eval_cli.main(["real", str(data / "faces"), "--ref", str(stats), "--data-root", str(data / "cifar"),
                          "--quiet"]) == 0
    out = capsys.readouterr().out
    faces = pool3(load_image_folder(str(data / "faces")))
    train = pool3(load_cifar10(str(data / "cifar"))[0])
    want = frechet_distance(*feature_statistics(faces), *feature_statistics(train))
    assert [line.split() for line in out.splitlines()] == [["metric", "value"], ["FID", f"{want:.6g}"]]


def test_gpgans_inception_scores_a_folder_against_cifar10_as_the_library_does(tmp_path, monkeypatch, capsys):
    """The real network's path (random weights): the same numbers as InceptionV3's features put
    through the metric functions."""
    weights = tmp_path / "inception.npz"
    np.savez(weights, **random_state_dict(0))
    write_cifar(tmp_path / "cifar", per_batch=1)
    folder = tmp_path / "pictures"
    folder.mkdir()
    for i, picture in enumerate(np.random.default_rng(5).integers(0, 256, (4, 32, 32, 3), dtype=np.uint8)):
        Image.fromarray(picture).save(folder / f"{i}.png")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    out_file = tmp_path / "floor.json"
    assert eval_cli.main(["real", str(folder), "--ref", "cifar10:train", "--data-root", str(tmp_path / "cifar"),
                          "--inception-weights", str(weights), "--out", str(out_file), "--quiet"]) == 0
    net = InceptionV3.load(str(weights))
    source = net.features(load_image_folder(str(folder)))["pool3"].astype(np.float32)
    train = net.features(load_cifar10(str(tmp_path / "cifar"))[0])["pool3"].astype(np.float32)
    subset = train[np.sort(np.random.RandomState(KID_SEED).choice(len(train), len(source), replace=False))]
    kid_mean, kid_std = kid(source, train, subset_size=len(source))
    want = {"eval/fid": frechet_distance(*feature_statistics(source), *feature_statistics(train)),
            "eval/kid": kid_mean, "eval_std/kid": kid_std}
    want["eval/precision"], want["eval/recall"] = precision_recall(subset, source, k=PR_K)
    record = read_real_scores(out_file)
    # float32 features: BLAS threads may round them differently between the two computations
    assert record["scores"] == pytest.approx(want, rel=1e-5, abs=1e-9)
    assert record["source"] == f"{folder} (4 images)" and record["reference"] == "cifar10:train (5 images)"
    assert record["inception_weights_id"] == net.weights_id


@pytest.mark.parametrize("args, message", [
    (["cifar10:valid", "--ref", "cifar10:train"], "SOURCE: reference 'cifar10:valid': CIFAR-10's split is train "
                                                  "or test"),
    (["cifar10:test", "--ref", "cifar10:dev"], "--ref: reference 'cifar10:dev': CIFAR-10's split is train or test"),
    (["stats.npz", "--ref", "cifar10:train"], "SOURCE stats.npz: a statistics file holds no images to score"),
    (["cifar10:test", "--ref", "s.npz", "--metrics", "fid,pr"],
     "--metrics fid,pr: kid, pr and dc compare features, but --ref s.npz is a statistics file"),
    (["cifar10:test", "--ref", "cifar10:train", "--metrics", "fid,is"],
     "--metrics fid,is: the Inception Score rates images alone, not against a reference; accepted here: fid, kid, pr, dc"),
    (["cifar10:test", "--ref", "cifar10:train", "--metrics", "fid,lpips"],
     "--metrics 'fid,lpips': unknown image metric 'lpips'; accepted: fid, kid, is, pr, dc"),
    (["cifar10:test", "--ref", "cifar10:train", "--out", "floor.txt"],
     "--out 'floor.txt': the scores are written as a .json file"),
    (["cifar10:test"], "the following arguments are required: --ref"),
    (["cifar10:test", "--ref", "cifar10:train", "--batch-size", "0"], "--batch-size must be at least 1"),
])
def test_bad_command_lines_exit_2(data, pixel_network, capsys, args, message):
    with pytest.raises(SystemExit) as info:
        eval_cli.main(["real", *args, "--quiet"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert pixel_network.seen == 0


def test_missing_or_too_little_data_fails_in_one_line(data, pixel_network, capsys):
    cifar = ["--data-root", str(data / "cifar")]
    cases = [
        (["real", "cifar10:test", "--ref", "cifar10:train", "--data-root", str(data / "nowhere")],
         f"CIFAR-10 files missing in {data / 'nowhere'}: data_batch_1, data_batch_2"),
        (["real", str(data / "missing"), "--ref", "cifar10:train", *cifar],
         f"SOURCE {data / 'missing'}: no such folder of images ({data / 'missing'}); accepted: cifar10:train, "
         "cifar10:test or a folder of PNG/JPEG images"),
        (["real", "cifar10:test", "--ref", "imagenet:val", *cifar],
         f"--ref imagenet:val: no such folder of images ({os.path.abspath('imagenet:val')}); accepted: "
         "cifar10:train, cifar10:test, a statistics file (.npz with mu and sigma) or a folder of PNG/JPEG images"),
        (["real", "cifar10:test", "--ref", str(data / "none.npz"), "--metrics", "fid", *cifar],
         f"statistics file {data / 'none.npz'} does not exist"),
        (["real", str(data / "cifar" / "test_batch"), "--ref", "cifar10:train", *cifar],
         f"SOURCE {data / 'cifar' / 'test_batch'}: is a file, not a folder of images ({data / 'cifar' / 'test_batch'}); "
         "accepted: cifar10:train, cifar10:test or a folder of PNG/JPEG images"),
    ]
    three = data / "three"
    three.mkdir()
    for i in range(3):
        Image.fromarray(np.full((32, 32, 3), 40 * i, np.uint8)).save(three / f"{i}.png")
    cases.append((["real", str(three), "--ref", "cifar10:train", "--metrics", "pr", *cifar],
                  f"{three} (3 images): precision and recall (pr) need more than 3 images"))
    cases.append((["real", str(three), "--ref", "cifar10:train", "--metrics", "fid,dc", *cifar],
                  f"{three} (3 images): density and coverage (dc) need more than 5 images"))
    for k, (args, message) in enumerate(cases):
        assert eval_cli.main([*args, "--quiet"]) == 1, args
        err = capsys.readouterr().err
        assert err.startswith("gpgan-eval: error: ") and message in err, err
        assert len(err.strip().splitlines()) == 1 and "Error" not in err.split(": error: ")[1].split(" ")[0]
        if k < len(cases) - 2:  # missing data is found before any image goes through the network
            assert pixel_network.seen == 0
        if k == 0:  # the advice names this command's options, not a training config's keys
            assert err.rstrip().endswith("or pass the folder that holds them as --data-root, or pass --download"), err
            assert "data.root" not in err and "data.download" not in err, err


def test_an_out_file_that_cannot_be_written_is_said_before_scoring(data, pixel_network, capsys):
    afile, folder = data / "afile", data / "r.json"
    afile.write_text("a file")
    folder.mkdir()
    args = ["real", "cifar10:test", "--ref", "cifar10:train", "--data-root", str(data / "cifar"), "--metrics", "fid",
            "--quiet"]
    assert eval_cli.main([*args, "--out", str(afile / "r.json")]) == 1
    captured = capsys.readouterr()
    assert captured.err == f"gpgan-eval: error: {afile}: a file, not a folder\n"
    assert captured.out == ""  # no table: nothing was scored
    with pytest.raises(SystemExit) as info:
        eval_cli.main([*args, "--out", str(folder)])
    assert info.value.code == 2
    captured = capsys.readouterr()
    assert f"--out {str(folder)!r}: is a folder; give a file name (the scores are written as a .json file)" in \
        captured.err and captured.out == ""
    assert pixel_network.seen == 0 and afile.read_text() == "a file" and os.listdir(folder) == []
    assert not (data / "home" / ".cache" / "gpgan" / "fid_stats").exists()  # no features computed or cached


def test_an_empty_folder_is_named_by_the_option_that_gave_it(data, pixel_network, capsys):
    empty = data / "empty"
    empty.mkdir()
    cifar = ["--data-root", str(data / "cifar"), "--metrics", "fid", "--quiet"]
    for args, option, accepted in (
            ([str(empty), "--ref", "cifar10:train"], "SOURCE", "cifar10:train, cifar10:test or a folder of PNG/JPEG "
                                                               "images"),
            (["cifar10:test", "--ref", str(empty)], "--ref", "cifar10:train, cifar10:test, a statistics file (.npz "
                                                             "with mu and sigma) or a folder of PNG/JPEG images")):
        assert eval_cli.main(["real", *args, *cifar]) == 1
        assert capsys.readouterr().err == (f"gpgan-eval: error: {option}: no PNG/JPEG images (.png, .jpg, .jpeg) under "
                                           f"{empty}; accepted: {accepted}\n")


def test_help_documents_real():
    env = dict(os.environ, PYTHONPATH=ROOT)
    main = subprocess.run([sys.executable, "-m", "gpgan.cli.eval", "--help"], capture_output=True, text=True,
                          env=env, check=True).stdout
    assert "gpgan-eval real cifar10:test --ref cifar10:train --out floor.json" in main
    assert "reference_scores" in main
    real = subprocess.run([sys.executable, "-m", "gpgan.cli.eval", "real", "--help"], capture_output=True,
                          text=True, env=env, check=True).stdout
    for option in ("--ref", "--metrics", "--data-root", "--out", "--inception-weights", "--device", "eval/fid",
                   "real-data floor"):
        assert option in real, option
