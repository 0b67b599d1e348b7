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
           "--set", "train.ema.decay=0.5", "--set", "train.ema.rampup=false")  # EMA far from raw
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


CAPTION = 24  # the caption strip above a grid picture (gpgan.viz.grid.CAPTION_SIZE + 8)


def test_grid_sizes(runs, capsys):
    img_run, _, tmp = runs
    out = tmp / "g.png"
    # 64 images, 8 per row, 2-pixel padding: 274 px, enlarged twice to be readable, captioned.
    assert sample_cli.main([str(img_run), "--out", str(out)]) == 0
    assert _size(out) == (2 * (8 * 34 + 2), CAPTION + 2 * (8 * 34 + 2))
    assert "step 2, EMA weights" in capsys.readouterr().err
    assert sample_cli.main([str(img_run), "--grid", "2x3", "--scale", "1", "--out", str(out)]) == 0
    assert _size(out) == (3 * 34 + 2, CAPTION + 2 * 34 + 2)  # (width, height)
    assert sample_cli.main([str(img_run), "--n", "5", "--scale", "1", "--out", str(out)]) == 0
    assert _size(out) == (3 * 34 + 2, CAPTION + 2 * 34 + 2)  # 5 images on a 3-wide grid
    assert sample_cli.main([str(img_run), "--grid", "2x3", "--out", str(out)]) == 0
    assert _size(out) == (5 * 104, CAPTION + 5 * 70)  # 104 px wide: 5 times, at least 512


def test_side_by_side_shows_the_raw_and_the_ema_grids_of_the_same_noise(runs):
    img_run, _, tmp = runs
    both, raw, ema = tmp / "both.png", tmp / "raw.png", tmp / "ema.png"
    common = ["--grid", "2x2", "--seed", "5", "--scale", "1"]
    assert sample_cli.main([str(img_run), *common, "--side-by-side", "--out", str(both)]) == 0
    assert sample_cli.main([str(img_run), *common, "--no-ema", "--out", str(raw)]) == 0
    assert sample_cli.main([str(img_run), *common, "--ema", "--out", str(ema)]) == 0
    side, width = 2 * 34 + 2, 8  # each grid 70 px, 8 px apart, under the caption and the labels
    assert _size(both) == (2 * side + width, 2 * CAPTION + side)
    pixels = _pixels(both)[2 * CAPTION:]
    np.testing.assert_array_equal(pixels[:, :side], _pixels(raw)[CAPTION:])
    np.testing.assert_array_equal(pixels[:, side + width:], _pixels(ema)[CAPTION:])
    assert not np.array_equal(pixels[:, :side], pixels[:, side + width:])


def test_interpolation_rows_end_at_their_latents(runs):
    img_run, _, tmp = runs
    out = tmp / "i.png"
    assert sample_cli.main([str(img_run), "--interpolate", "--grid", "2x5", "--seed", "4", "--scale", "1",
                            "--out", str(out)]) == 0
    assert _size(out) == (5 * 34 + 2, CAPTION + 2 * 34 + 2)
    # Recompute the endpoints directly: z0 and z1 of each row, drawn as gpgan-sample draws them.
    run, ckpt = sample_cli.resolve_source(str(img_run))
    generator, _, _ = sample_cli.load_generator(run, ckpt)
    rng = np.random.default_rng(4)
    z0, z1 = rng.standard_normal((2, 8)), rng.standard_normal((2, 8))
    ends = sample_cli.generate(generator, np.concatenate([z0, z1]), "cpu")
    grid = _pixels(out)[CAPTION:]
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


@pytest.mark.parametrize("args, message", [
    (["--seed", "-1"], "--seed: must be at least 0, got -1"),
    (["--seed", "x"], "--seed: expected a whole number, got 'x'"),
    (["--grid", "4x4", "--n", "10"], "--grid 4x4 holds 16 images but --n is 10: give one of them"),
    (["--scale", "0"], "--scale: must be at least 1, got 0"),
    (["--side-by-side", "--no-ema"], "--side-by-side shows both the raw and the EMA weights"),
])
def test_bad_arguments_exit_2_naming_them(runs, tmp_path, capsys, args, message):
    img_run, _, _ = runs
    with pytest.raises(SystemExit) as info:
        sample_cli.main([str(img_run), *args, "--out", str(tmp_path / "g.png")])
    err = capsys.readouterr().err
    assert info.value.code == 2 and message in err and "Error" not in err
    assert not (tmp_path / "g.png").exists()


def test_out_dir_that_is_a_file_exits_2(runs, tmp_path, capsys):
    img_run, _, _ = runs
    afile = tmp_path / "README.md"
    afile.write_text("not a folder")
    with pytest.raises(SystemExit) as info:
        sample_cli.main([str(img_run), "--n", "3", "--out-dir", str(afile)])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "README.md' is a file, not a folder" in err and "Errno" not in err
    assert afile.read_text() == "not a folder"


def test_a_damaged_newest_checkpoint_is_named_when_an_older_one_is_used(runs, tmp_path, capsys):
    img_run, _, _ = runs
    copy = tmp_path / "run"
    shutil.copytree(img_run, copy)
    newest = copy / "checkpoints" / "ckpt_000002.npz"
    older = copy / "checkpoints" / "ckpt_000001.npz"
    shutil.copyfile(newest, older)  # stands for an older checkpoint that reads back
    newest.write_bytes(newest.read_bytes()[:1000])  # cut short, as by a full disk
    assert sample_cli.main([str(copy), "--grid", "1x1", "--out", str(tmp_path / "g.png")]) == 0
    err = capsys.readouterr().err
    assert "warning: ckpt_000002.npz did not read back" in err and "using the newest readable checkpoint, " \
        "ckpt_000001.npz" in err


def test_a_full_disk_during_out_dir_leaves_no_partial_files(runs, tmp_path, capsys, monkeypatch):
    import errno

    from PIL import Image as PILImage

    img_run, _, _ = runs
    real_save, saved = PILImage.Image.save, []

    def fills_up(self, fp, *args, **kwargs):
        if len(saved) == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        saved.append(fp)
        return real_save(self, fp, *args, **kwargs)

    monkeypatch.setattr(PILImage.Image, "save", fills_up)
    folder = tmp_path / "pngs"
    assert sample_cli.main([str(img_run), "--n", "6", "--batch-size", "2", "--quiet", "--out-dir", str(folder)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Errno" not in err and "OSError" not in err
    assert f"{folder / '000003.png'}: No space left on device" in err
    assert os.listdir(tmp_path) == []  # no folder, no staging folder, no partial PNGs
    # Into an existing folder: what was there stays, nothing is added.
    folder.mkdir()
    (folder / "keep.txt").write_text("mine")
    saved.clear()
    assert sample_cli.main([str(img_run), "--n", "6", "--quiet", "--out-dir", str(folder)]) == 1
    assert os.listdir(folder) == ["keep.txt"] and sorted(os.listdir(tmp_path)) == ["pngs"]
    monkeypatch.setattr(PILImage.Image, "save", real_save)
    assert sample_cli.main([str(img_run), "--n", "3", "--quiet", "--out-dir", str(folder)]) == 0
    assert sorted(os.listdir(folder)) == ["000000.png", "000001.png", "000002.png", "keep.txt"]


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
