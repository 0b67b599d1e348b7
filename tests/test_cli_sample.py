"""gpgan-sample: grids, interpolations and scatter plots from tiny trained runs."""
import os
import pickle
import shutil
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from gpgan.cli import sample as sample_cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _train(*args):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, "-m", "gpgan.cli.train", *args, "--quiet"], capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sample")
    cifar = tmp / "cifar"
    cifar.mkdir()
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        with open(cifar / name, "wb") as f:
            pickle.dump({b"data": rng.integers(0, 256, size=(4, 3072), dtype=np.uint8), b"labels": [1] * 4}, f,
                        protocol=2)
    _train(os.path.join(ROOT, "configs", "r1_cifar.yaml"), "--out", str(tmp), "--name", "img",
           "--set", f"data.root={cifar}", "--set", "train.steps=2", "--set", "train.batch_size=4",
           "--set", "model.generator_options.width=2", "--set", "model.generator_options.latent_dim=8",
           "--set", "model.critic_options.width=2", "--set", "train.n_samples=4",
           "--set", "train.ema.decay=0.5")
    _train(os.path.join(ROOT, "configs", "quickstart.yaml"), "--out", str(tmp), "--name", "toy",
           "--set", "train.steps=2", "--set", "model.generator_options.width=8",
           "--set", "model.critic_options.width=8", "--set", "train.eval_samples=100")
    return tmp / "r1_cifar" / "img", tmp / "quickstart" / "toy", tmp


def _size(path):
    with Image.open(path) as img:
        return img.size


def _pixels(path):
    with Image.open(path) as img:
        return np.asarray(img.convert("RGB")).astype(int)


def test_grid_sizes(runs):
    img_run, _, tmp = runs
    out = tmp / "g.png"
    assert sample_cli.main([str(img_run), "--out", str(out)]) == 0
    assert _size(out) == (8 * 34 + 2, 8 * 34 + 2)  # 64 images, 8 per row, 2-pixel padding
    assert sample_cli.main([str(img_run), "--grid", "2x3", "--out", str(out)]) == 0
    assert _size(out) == (3 * 34 + 2, 2 * 34 + 2)  # (width, height)
    assert sample_cli.main([str(img_run), "--n", "5", "--out", str(out)]) == 0
    assert _size(out) == (3 * 34 + 2, 2 * 34 + 2)  # 5 images on a 3-wide grid


def test_seed_ema_and_checkpoint_path(runs):
    img_run, _, tmp = runs
    ckpt = img_run / "checkpoints" / "ckpt_000002.npz"
    a, b, c, d = (tmp / f"{k}.png" for k in "abcd")
    assert sample_cli.main([str(img_run), "--grid", "2x2", "--seed", "1", "--out", str(a)]) == 0
    assert sample_cli.main([str(ckpt), "--grid", "2x2", "--seed", "1", "--out", str(b)]) == 0
    assert sample_cli.main([str(img_run), "--grid", "2x2", "--seed", "2", "--out", str(c)]) == 0
    assert sample_cli.main([str(img_run), "--grid", "2x2", "--seed", "1", "--no-ema", "--out", str(d)]) == 0
    assert np.array_equal(_pixels(a), _pixels(b))
    assert not np.array_equal(_pixels(a), _pixels(c))
    assert not np.array_equal(_pixels(a), _pixels(d))  # EMA (decay 0.5) differs from the raw weights


def test_interpolation_rows_end_at_their_latents(runs):
    img_run, _, tmp = runs
    out = tmp / "i.png"
    assert sample_cli.main([str(img_run), "--interpolate", "--grid", "2x5", "--seed", "4", "--out", str(out)]) == 0
    assert _size(out) == (5 * 34 + 2, 2 * 34 + 2)
    # Recompute the endpoints directly: z0 and z1 of each row, drawn as gpgan-sample draws them.
    run, ckpt = sample_cli.resolve_source(str(img_run))
    generator, _, _ = sample_cli.load_generator(run, ckpt)
    rng = np.random.default_rng(4)
    z0, z1 = rng.standard_normal((2, 8)), rng.standard_normal((2, 8))
    ends = sample_cli.generate(generator, np.concatenate([z0, z1]), "cpu")
    grid = _pixels(out)
    for row in range(2):
        for col, image in ((0, ends[row]), (4, ends[2 + row])):
            tile = grid[2 + row * 34: 2 + row * 34 + 32, 2 + col * 34: 2 + col * 34 + 32]
            expected = np.clip(np.round((image.transpose(1, 2, 0) + 1) * 127.5), 0, 255)
            assert np.abs(tile - expected).max() <= 1


def test_slerp_endpoints_and_norm():
    rng = np.random.default_rng(0)
    z0, z1 = rng.standard_normal((3, 16)), rng.standard_normal((3, 16))
    path = sample_cli.slerp(z0, z1, np.linspace(0, 1, 7))
    np.testing.assert_allclose(path[:, 0], z0, atol=1e-12)
    np.testing.assert_allclose(path[:, -1], z1, atol=1e-12)
    # Between two unit vectors the path stays on the unit sphere.
    u0, u1 = z0 / np.linalg.norm(z0, axis=1, keepdims=True), z1 / np.linalg.norm(z1, axis=1, keepdims=True)
    np.testing.assert_allclose(np.linalg.norm(sample_cli.slerp(u0, u1, np.linspace(0, 1, 7)), axis=2), 1.0)


def test_toy_scatter_and_errors(runs, capsys):
    _, toy_run, tmp = runs
    out = tmp / "p.png"
    assert sample_cli.main([str(toy_run), "--n", "300", "--out", str(out)]) == 0
    assert _size(out) == (560, 560)
    assert sample_cli.main([str(toy_run), "--interpolate", "--out", str(out)]) == 1
    assert "need image data" in capsys.readouterr().err
    assert sample_cli.main([str(tmp / "nowhere"), "--out", str(out)]) == 1
    assert "neither a run folder nor a checkpoint" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:  # argparse's usage error
        sample_cli.main([str(toy_run), "--n", "0", "--out", str(out)])
    assert info.value.code == 2 and "--n must be at least 1, got 0" in capsys.readouterr().err


def test_no_ema_in_run_is_reported(runs, tmp_path, capsys):
    _, toy_run, _ = runs
    # The quickstart keeps an EMA; a copy whose config says it does not must refuse --ema.
    copy = tmp_path / "copy"
    shutil.copytree(toy_run, copy)
    text = (copy / "config.yaml").read_text().replace("enabled: true", "enabled: false")
    (copy / "config.yaml").write_text(text)
    assert sample_cli.main([str(copy), "--ema", "--out", str(tmp_path / "x.png")]) == 1
    assert "--no-ema" in capsys.readouterr().err


def test_help_documents_every_option():
    exe = shutil.which("gpgan-sample")
    cmd = [exe, "--help"] if exe else [sys.executable, "-m", "gpgan.cli.sample", "--help"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    for option in ("RUN_DIR_OR_CHECKPOINT", "--n", "--grid", "--seed", "--ema", "--no-ema", "--interpolate",
                   "--out", "--device"):
        assert option in out
