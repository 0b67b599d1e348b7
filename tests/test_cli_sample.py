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
    err = capsys.readouterr().err
    assert "--interpolate needs image data" in err and "--grid" not in err  # only what was given
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
    (["--truncation", "0"], "argument --truncation: the truncation must be a number > 0 (each latent component is "
                            "drawn within [-t, t]), got '0'"),
    (["--truncation", "inf"], "argument --truncation: the truncation must be a number > 0"),
])
def test_bad_arguments_exit_2_naming_them(runs, tmp_path, capsys, args, message):
    img_run, _, _ = runs
    with pytest.raises(SystemExit) as info:
        sample_cli.main([str(img_run), *args, "--out", str(tmp_path / "g.png")])
    err = capsys.readouterr().err
    assert info.value.code == 2 and message in err and "Error" not in err
    assert not (tmp_path / "g.png").exists()


@pytest.mark.parametrize("args, message", [
    (["--interpolate", "--n", "3", "--out", "a.npz"], "--interpolate makes a picture, but --out {tmp}/a.npz writes "
                                                      "the samples themselves: use --out FILE.png (or .jpg)"),
    (["--grid", "2x2", "--out-dir", "pngs"], "--grid 2x2 makes a picture, but --out-dir {tmp}/pngs writes"),
    (["--side-by-side", "--interpolate", "--out", "a.npz"], "--interpolate and --side-by-side make a picture"),
])
def test_picture_options_with_sample_files_exit_2_naming_what_was_given(runs, tmp_path, capsys, args, message):
    img_run, _, _ = runs
    args = [str(tmp_path / a) if a in ("a.npz", "pngs") else a for a in args]
    with pytest.raises(SystemExit) as info:
        sample_cli.main([str(img_run), *args])
    err = capsys.readouterr().err
    assert info.value.code == 2 and message.format(tmp=tmp_path) in err, err
    if "--grid" not in args:
        assert "--grid" not in err.splitlines()[-1]
    assert os.listdir(tmp_path) == []


def test_latents_are_drawn_a_batch_at_a_time_and_are_those_of_one_draw(runs, tmp_path, monkeypatch):
    from gpgan.data import to_uint8

    img_run, toy_run, _ = runs
    drawn, real_batches = [], sample_cli.batches
    monkeypatch.setattr(sample_cli, "batches", lambda g, noise, *a, **k: drawn.append(len(noise)) or
                        real_batches(g, noise, *a, **k))
    folder = tmp_path / "pngs"
    assert sample_cli.main([str(img_run), "--n", "7", "--batch-size", "3", "--seed", "2", "--quiet",
                            "--out-dir", str(folder)]) == 0
    assert drawn == [3, 3, 1]  # never more latents in memory than one batch
    run, ckpt = sample_cli.resolve_source(str(img_run))
    generator = sample_cli.load_generator(run, ckpt)[0]
    expected = to_uint8(sample_cli.generate(generator, np.random.default_rng(2).standard_normal((7, 8)), "cpu",
                                            3)).transpose(0, 2, 3, 1)
    for k in range(7):
        np.testing.assert_array_equal(_pixels(folder / f"{k:06d}.png"), expected[k])
    drawn.clear()
    out = tmp_path / "p.npz"
    assert sample_cli.main([str(toy_run), "--n", "10", "--batch-size", "4", "--seed", "2", "--out", str(out)]) == 0
    assert drawn == [4, 4, 2]
    run, ckpt = sample_cli.resolve_source(str(toy_run))
    generator = sample_cli.load_generator(run, ckpt)[0]
    noise = np.random.default_rng(2).standard_normal((10, int(generator.latent_dim)))
    with np.load(out) as f:
        np.testing.assert_array_equal(f["points"], sample_cli.generate(generator, noise, "cpu", 4))


def test_truncated_samples_are_the_generators_output_for_truncated_latents(runs, tmp_path, capsys):
    from gpgan.data import to_uint8
    from gpgan.train.sampling import draw_latents

    img_run, toy_run, _ = runs
    run, ckpt = sample_cli.resolve_source(str(img_run))
    generator = sample_cli.load_generator(run, ckpt)[0]
    noise = draw_latents(np.random.default_rng(2), 7, 8, 0.5)
    assert np.abs(noise).max() <= 0.5
    expected = to_uint8(sample_cli.generate(generator, noise, "cpu", 3)).transpose(0, 2, 3, 1)
    for args in (["--out-dir", str(tmp_path / "pngs")], ["--out", str(tmp_path / "s.npz")]):
        # in batches of 3: the latents of one draw of 7 all the same
        assert sample_cli.main([str(img_run), "--n", "7", "--batch-size", "3", "--seed", "2", "--truncation", "0.5",
                                "--quiet", *args]) == 0
        assert "step 2, EMA weights, truncation 0.5)" in capsys.readouterr().err
    with np.load(tmp_path / "s.npz") as f:
        np.testing.assert_array_equal(f["images"], expected)
    for k in range(7):
        np.testing.assert_array_equal(_pixels(tmp_path / "pngs" / f"{k:06d}.png"), expected[k])
    # The toy run's points (floats: the tiny image generator's pixels barely move with its latents).
    run, ckpt = sample_cli.resolve_source(str(toy_run))
    generator = sample_cli.load_generator(run, ckpt)[0]
    dim = int(generator.latent_dim)
    assert sample_cli.main([str(toy_run), "--n", "10", "--seed", "2", "--truncation", "0.5",
                            "--out", str(tmp_path / "p.npz")]) == 0
    with np.load(tmp_path / "p.npz") as f:
        points = f["points"]
    np.testing.assert_array_equal(points, sample_cli.generate(generator, draw_latents(np.random.default_rng(2), 10,
                                                                                      dim, 0.5), "cpu"))
    untruncated = sample_cli.generate(generator, np.random.default_rng(2).standard_normal((10, dim)), "cpu")
    assert np.abs(points - untruncated).max() > 1e-3
    # A grid and a scatter plot say it in their captions' message too.
    assert sample_cli.main([str(img_run), "--grid", "2x2", "--truncation", "1.5",
                            "--out", str(tmp_path / "g.png")]) == 0
    assert sample_cli.main([str(toy_run), "--truncation", "1.5", "--out", str(tmp_path / "p.png")]) == 0
    assert capsys.readouterr().err.count("truncation 1.5)") == 2


# Sizes past what any machine can address (NumPy: MemoryError; past 2**63 bytes, ValueError).
@pytest.mark.parametrize("run, args, message", [
    (0, ["--n", f"{10 ** 15}", "--out", "o/a.npz"], "--n 1,000,000,000,000,000: 1,000,000,000,000,000 images "
                                                    "(3,072,000,000.0 GB) do not fit in memory; give a smaller --n, "
                                                    "or write one PNG per image with --out-dir DIR"),
    (0, ["--n", f"{10 ** 19}", "--out", "o/a.npz"], "do not fit in memory; give a smaller --n, or write one PNG"),
    (1, ["--n", f"{10 ** 17}", "--out", "o/p.npz"], "--n 100,000,000,000,000,000: 100,000,000,000,000,000 points "),
    (1, ["--n", f"{10 ** 17}", "--out", "o/p.png"], "points (800,000,000.0 GB) do not fit in memory; give a "
                                                    "smaller --n\n"),
    (0, ["--scale", f"{10 ** 6}", "--out", "o/g.png"], "--scale 1000000: a grid picture of 274,000,000 x 274,000,000 "
                                                       "pixels does not fit in memory; give a smaller --scale"),
    (0, ["--scale", f"{10 ** 9}", "--out", "o/g.png"], "--scale 1000000000: a grid picture of"),
    (0, ["--n", f"{10 ** 17}", "--batch-size", f"{10 ** 17}", "--out-dir", "pngs"],
     "out of memory generating a batch of 100,000,000,000,000,000 samples: give a smaller --batch-size"),
    (0, ["--n", f"{10 ** 17}", "--batch-size", f"{10 ** 17}", "--truncation", "0.5", "--out-dir", "pngs"],
     "out of memory generating a batch of 100,000,000,000,000,000 samples: give a smaller --batch-size"),
    (0, ["--n", f"{10 ** 15}", "--truncation", "0.5", "--out", "o/a.npz"], "--n 1,000,000,000,000,000: "),
])
def test_more_than_memory_holds_is_one_line_naming_the_option(runs, tmp_path, capsys, run, args, message):
    args = [str(tmp_path / a) if a.startswith("o/") or a == "pngs" else a for a in args]
    assert sample_cli.main([str(runs[run]), *args, "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("gpgan-sample: error: ") and err.count("\n") == 1, err
    assert message in err and "Error" not in err and "Traceback" not in err, err
    assert os.listdir(tmp_path) == []  # not even the folder


def test_a_jpeg_picture_past_its_size_limit_is_refused_in_one_line(runs, tmp_path, capsys):
    img_run, _, _ = runs
    out = tmp_path / "wide.jpg"
    assert sample_cli.main([str(img_run), "--grid", "1x2000", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--out {out}: the picture is 68,002 x 60 pixels, more than a JPEG holds (65,500 a " \
        "side); write a .png" in err, err
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("how", ["sigterm", "sigint_to_a_background_command"])
def test_a_stop_signal_leaves_nothing_and_says_so(runs, tmp_path, how):
    """SIGTERM, or SIGINT to a command started with SIGINT ignored (`nohup gpgan-sample ... &`),
    stops gpgan-sample as Ctrl-C does. SIGTERM had killed it with its staged PNG files left behind."""
    import signal
    import time

    img_run, _, _ = runs
    ignoring = how != "sigterm"
    proc = subprocess.Popen([sys.executable, "-m", "gpgan.cli.sample", str(img_run), "--n", "100000000",
                             "--out-dir", str(tmp_path / "pngs"), "--quiet"], cwd=tmp_path, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=ROOT),
                            preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ignoring else None)
    try:
        deadline = time.monotonic() + 60
        while not any(len(os.listdir(d)) > 10 for d in tmp_path.glob(".*") if d.is_dir()):  # the staging folder
            assert time.monotonic() < deadline and proc.poll() is None, "no PNG files staged"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT if ignoring else signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:  # it did not stop: it would write PNG files for hours
            proc.kill()
            proc.wait()
    assert proc.returncode == 130 and stderr.endswith("gpgan-sample: interrupted; nothing written\n"), stderr
    assert os.listdir(tmp_path) == []


def test_ctrl_c_leaves_nothing_and_says_so(runs, tmp_path, capsys, monkeypatch):
    from PIL import Image as PILImage

    img_run, _, _ = runs
    real_save, saved = PILImage.Image.save, []

    def interrupted(self, fp, *args, **kwargs):
        if len(saved) == 3:
            raise KeyboardInterrupt
        saved.append(fp)
        return real_save(self, fp, *args, **kwargs)

    monkeypatch.setattr(PILImage.Image, "save", interrupted)
    assert sample_cli.main([str(img_run), "--n", "6", "--batch-size", "2", "--out-dir", str(tmp_path / "pngs")]) == 130
    assert capsys.readouterr().err == "\ngpgan-sample: interrupted; nothing written\n"
    assert os.listdir(tmp_path) == []
    monkeypatch.setattr(PILImage.Image, "save", real_save)
    real_batches = sample_cli.batches

    def second_batch_interrupted(generator, noise, *args, **kwargs):
        if len(noise) < 2:
            raise KeyboardInterrupt
        return real_batches(generator, noise, *args, **kwargs)

    monkeypatch.setattr(sample_cli, "batches", second_batch_interrupted)
    assert sample_cli.main([str(img_run), "--n", "3", "--batch-size", "2", "--out", str(tmp_path / "o" / "a.npz")]) \
        == 130
    assert capsys.readouterr().err == "\ngpgan-sample: interrupted; nothing written\n"
    assert os.listdir(tmp_path) == []
    monkeypatch.setattr(sample_cli, "batches", real_batches)
    # Into an existing folder the PNG files are moved one by one: a Ctrl-C then may leave some.
    folder = tmp_path / "pngs"
    folder.mkdir()
    real_replace, moved = os.replace, []

    def replace_interrupted(src, dst):
        if len(moved) == 1:
            raise KeyboardInterrupt
        moved.append(dst)
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace_interrupted)
    assert sample_cli.main([str(img_run), "--n", "3", "--out-dir", str(folder)]) == 130
    assert capsys.readouterr().err == f"\ngpgan-sample: interrupted; some of the PNG files may be in {folder} already\n"
    assert os.listdir(folder) == ["000000.png"] and os.listdir(tmp_path) == ["pngs"]


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
                   "--out", "--device", "--truncation"):
        assert option in out
