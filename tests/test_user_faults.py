"""What a new user hit, through the command lines (exit status, message, files before and after):
report-only on a fresh clone, big sample requests, damaged checkpoints, TensorBoard across a
resume, run names that are paths, bad arguments, empty configs; and what they expected: sample
files for other tools, forks from a checkpoint, a best checkpoint, dry runs."""
import json
import os
import re
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest
import yaml
from PIL import Image

from gpgan.cli import ablate as ablate_cli
from gpgan.cli import eval as eval_cli
from gpgan.cli import sample as sample_cli
from gpgan.train.monitor import TIMING_KEYS
from helpers import QUICKSTART, ROOT, TINY, assert_same_weights, gpgan_train, metrics, sets, write_cifar_fixture

SMALL = TINY + ["train.steps=8", "train.checkpoint_interval=2", "train.log_interval=1",
                "train.eval_interval=2", "train.sample_interval=2"]


@pytest.fixture(scope="module")
def toy_runs(tmp_path_factory):
    """An uninterrupted 8-step run, and one stopped at step 6 (checkpoints at 2, 4, 6 kept)."""
    out = tmp_path_factory.mktemp("faults")
    gpgan_train(QUICKSTART, *sets(SMALL), "--out", str(out), "--name", "straight", "--quiet", check=0)
    gpgan_train(QUICKSTART, *sets(SMALL + ["train.stop_after=6"]), "--out", str(out), "--name", "stopped",
                "--quiet", check=130)
    return out / "quickstart" / "straight", out / "quickstart" / "stopped", out


@pytest.fixture(scope="module")
def image_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("img")
    write_cifar_fixture(tmp / "cifar")
    gpgan_train(os.path.join(ROOT, "configs", "r1_cifar.yaml"), *sets([
        f"data.root={tmp / 'cifar'}", "train.steps=2", "train.batch_size=4", "model.generator_options.width=2",
        "model.generator_options.latent_dim=8", "model.critic_options.width=2", "train.n_samples=4"]),
        "--out", str(tmp), "--name", "img", "--quiet", check=0)
    return tmp / "r1_cifar" / "img"


def snapshot(folder):
    """Every file's bytes, but a run's .lock: a resume takes the lock (and writes its process id
    there) before it reads the run, so one refused later has still held it."""
    return {os.path.relpath(os.path.join(d, f), folder): open(os.path.join(d, f), "rb").read()
            for d, _, files in os.walk(folder) for f in files if f != ".lock"}


# -- 1. --report-only without runs ------------------------------------------------------------------
def test_report_only_without_runs_leaves_the_committed_report(tmp_path, capsys):
    committed = os.path.join(ROOT, "experiments", "reports", "penalties_toy_2k")
    report = tmp_path / "report"
    shutil.copytree(committed, report)
    before = snapshot(report)
    sweep = os.path.join(ROOT, "configs", "ablations", "penalties_toy.yaml")
    status = ablate_cli.main([sweep, "--report-only", "--report-dir", str(report), "--out", str(tmp_path / "none")])
    assert status == 1
    assert capsys.readouterr().err.startswith("gpgan-ablate: error: no run of this sweep")
    assert snapshot(report) == before and not (tmp_path / "none").exists()


CAPTION = 24  # the caption strip above a grid picture (gpgan.viz.grid.CAPTION_SIZE + 8)


# -- 2. sampling in batches, sample files ----------------------------------------------------------------
def test_many_samples_go_to_npz_in_bounded_batches(image_run, tmp_path, monkeypatch):
    import gpgan.train.sampling as sampling

    sizes = []
    real_to_device = sampling.to_device
    monkeypatch.setattr(sampling, "to_device", lambda a, d: sizes.append(len(a)) or real_to_device(a, d))
    out = tmp_path / "s.npz"
    assert sample_cli.main([str(image_run), "--n", "1030", "--batch-size", "100", "--quiet", "--out", str(out)]) == 0
    assert max(sizes) == 100 and sum(sizes) == 1030
    with np.load(out, allow_pickle=False) as f:
        images = f["images"]
    assert images.shape == (1030, 32, 32, 3) and images.dtype == np.uint8
    # The first images are those of a grid with the same seed (quantized the same way).
    grid = tmp_path / "g.png"
    assert sample_cli.main([str(image_run), "--grid", "1x2", "--scale", "1", "--out", str(grid)]) == 0
    with Image.open(grid) as img:
        pixels = np.asarray(img.convert("RGB"))[CAPTION:]  # below the caption strip
    np.testing.assert_array_equal(pixels[2:34, 2:34], images[0])
    np.testing.assert_array_equal(pixels[2:34, 36:68], images[1])


def test_out_dir_writes_one_png_per_image(image_run, tmp_path):
    folder = tmp_path / "pngs"
    assert sample_cli.main([str(image_run), "--n", "5", "--batch-size", "2", "--out-dir", str(folder)]) == 0
    assert sorted(os.listdir(folder)) == [f"{k:06d}.png" for k in range(5)]
    with Image.open(folder / "000004.png") as img:
        assert img.size == (32, 32) and img.mode == "RGB"


def test_a_grid_too_big_for_one_picture_is_refused(image_run, tmp_path, capsys):
    out = tmp_path / "big.png"
    assert sample_cli.main([str(image_run), "--n", "100000", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "too many images for one picture" in err and "--out FILE.npz" in err and "Traceback" not in err
    assert not out.exists()


def test_toy_points_to_npz(toy_runs, tmp_path):
    straight, _, _ = toy_runs
    out = tmp_path / "p.npz"
    assert sample_cli.main([str(straight), "--n", "700", "--batch-size", "64", "--out", str(out)]) == 0
    with np.load(out, allow_pickle=False) as f:
        assert f["points"].shape == (700, 2) and f["points"].dtype == np.float32


# -- 3. damaged checkpoints ----------------------------------------------------------------------
def flip_bytes(path, where=0.6):
    data = bytearray(path.read_bytes())
    k = int(len(data) * where)
    data[k:k + 8] = bytes(b ^ 0xFF for b in data[k:k + 8])
    path.write_bytes(bytes(data))


def test_resume_skips_a_damaged_checkpoint_and_still_matches(toy_runs, tmp_path):
    straight, stopped, _ = toy_runs
    run = tmp_path / "stopped"
    shutil.copytree(stopped, run)
    flip_bytes(run / "checkpoints" / "ckpt_000006.npz")
    proc = gpgan_train("--resume", str(run), "--quiet", check=0)
    assert "skipped" in proc.stderr and "ckpt_000006.npz" in proc.stderr and "damaged" in proc.stderr
    assert "from step 4" in proc.stderr and "Traceback" not in proc.stderr
    assert (run / "checkpoints" / "ckpt_000006.npz.damaged").exists()
    assert metrics(run) == metrics(straight)
    assert_same_weights(run, straight)


def test_a_resume_that_fails_renames_nothing_and_names_the_damaged_checkpoints(toy_runs, tmp_path):
    """The newest checkpoint damaged and the one before it from another model: the resume fails,
    its one line names both, and neither file was renamed (it had renamed the newest one silently)."""
    _, stopped, _ = toy_runs
    run = tmp_path / "stopped"
    shutil.copytree(stopped, run)
    checkpoints = run / "checkpoints"
    flip_bytes(checkpoints / "ckpt_000006.npz")
    with np.load(checkpoints / "ckpt_000004.npz", allow_pickle=False) as f:
        arrays = {k: f[k] for k in f.files}
    weight = next(k for k in arrays if k.startswith("module/generator/"))
    arrays[weight] = np.zeros(3, np.float32)  # reads back whole, but is no weight of this generator
    np.savez(checkpoints / "ckpt_000004.npz", **arrays)
    before = sorted(os.listdir(checkpoints))
    proc = gpgan_train("--resume", str(run), "--quiet", check=1)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpgan-train: error: "), proc.stderr
    assert "ckpt_000004.npz" in lines[0] and "does not match module 'generator'" in lines[0]
    assert "the newer checkpoints do not read either" in lines[0] and "ckpt_000006.npz" in lines[0]
    assert sorted(os.listdir(checkpoints)) == before


def test_resume_before_the_best_checkpoint_sets_it_aside(toy_runs, tmp_path):
    """best.npz written after the step a resume falls back to belongs to training the resume
    discards: it is set aside (renamed best.npz.discarded, not deleted), and the resumed run writes
    best.npz again; on the same machine it ends with the uninterrupted run's metrics and best."""
    from gpgan.checkpoint import read_meta

    straight, stopped, _ = toy_runs
    run = tmp_path / "stopped"
    shutil.copytree(stopped, run)
    best_step = read_meta(str(run / "checkpoints" / "best.npz"))["step"]
    for step in (2, 4, 6):  # damage every checkpoint from the best one on
        if step >= best_step:
            flip_bytes(run / "checkpoints" / f"ckpt_{step:06d}.npz")
    resumed_from = max([s for s in (2, 4, 6) if s < best_step], default=0)
    proc = gpgan_train("--resume", str(run), "--quiet", check=0)
    assert (f"set aside {run / 'checkpoints' / 'best.npz'} (from step {best_step}, after the resumed step "
            f"{resumed_from}) as best.npz.discarded") in proc.stderr, proc.stderr
    assert read_meta(str(run / "checkpoints" / "best.npz.discarded"))["step"] == best_step
    assert metrics(run) == metrics(straight)
    assert read_meta(str(run / "checkpoints" / "best.npz")) == read_meta(str(straight / "checkpoints" / "best.npz"))


def test_resume_keeps_a_best_checkpoint_it_has_seen(toy_runs, tmp_path):
    _, stopped, _ = toy_runs
    run = tmp_path / "stopped"
    shutil.copytree(stopped, run)
    before = (run / "checkpoints" / "best.npz").read_bytes()
    proc = gpgan_train("--resume", str(run), "--set", "train.stop_after=7", "--quiet", check=130)
    assert "set aside" not in proc.stderr
    assert not (run / "checkpoints" / "best.npz.discarded").exists()
    assert (run / "checkpoints" / "best.npz").read_bytes() == before  # no evaluation since step 6


@pytest.mark.parametrize("damage", ["flip", "truncate", "garbage"])
def test_unreadable_checkpoints_are_one_line(toy_runs, tmp_path, damage, capsys):
    _, stopped, _ = toy_runs
    run = tmp_path / "run"
    shutil.copytree(stopped, run)
    ckpt = run / "checkpoints" / "ckpt_000006.npz"
    if damage == "flip":
        flip_bytes(ckpt)
    elif damage == "truncate":
        ckpt.write_bytes(ckpt.read_bytes()[:1000])
    else:
        ckpt.write_bytes(b"\x93NUMPY garbage that is no archive" * 10)
    status = sample_cli.main([str(ckpt), "--out", str(tmp_path / "x.png")])
    err = capsys.readouterr().err
    assert status == 1 and str(ckpt) in err and "Traceback" not in err and "allow_pickle" not in err
    assert len(err.strip().splitlines()) == 1 and ("delete it" in err or "another checkpoint" in err)
    # A run folder falls back to its newest readable checkpoint.
    assert sample_cli.main([str(run), "--out", str(tmp_path / "y.png")]) == 0
    assert "ckpt_000004.npz" in capsys.readouterr().err


# -- 4. TensorBoard keeps every logged step across a resume ----------------------------------------------
def read_events(folder, counts=False):
    """(tag, step) of every scalar and image TensorBoard would show, honouring purges (with
    ``counts``: a dict of how many times each is shown)."""
    from tensorboardX.proto import event_pb2

    shown = {}
    for name in sorted(n for n in os.listdir(folder) if n.startswith("events.out.tfevents")):
        data = (folder / name).read_bytes()
        pos = 0
        while pos < len(data):
            (length,) = struct.unpack("<Q", data[pos:pos + 8])
            event = event_pb2.Event.FromString(data[pos + 12:pos + 12 + length])
            pos += 12 + length + 4
            if event.HasField("session_log") and event.session_log.status == event_pb2.SessionLog.START:
                shown = {key: v for key, v in shown.items() if key[1] < event.step}
            for value in event.summary.value:
                shown[(value.tag, event.step)] = shown.get((value.tag, event.step), 0) + 1
    return shown if counts else set(shown)


def test_tensorboard_keeps_the_resume_step(toy_runs, tmp_path):
    _, stopped, _ = toy_runs
    run = tmp_path / "resumed"
    shutil.copytree(stopped, run)
    gpgan_train("--resume", str(run), "--quiet", check=0)
    events = read_events(run)
    for record in metrics(run):
        for key in ("loss/critic", "grad_norm/real", "eval/modes"):
            if key in record:
                assert (key, record["step"]) in events, (key, record["step"])
    assert ("eval/modes", 6) in events  # the resume step's own evaluation
    assert {("samples", s) for s in (2, 4, 6, 8)} <= events


def test_tensorboard_drops_an_attempt_that_a_resume_starts_over(toy_runs, tmp_path):
    """A run resumed with no checkpoint left starts from step 0: the earlier attempt's events
    go, as its metrics.jsonl records do, so no step is shown twice."""
    _, stopped, _ = toy_runs
    run = tmp_path / "again"
    shutil.copytree(stopped, run)
    for checkpoint in (run / "checkpoints").glob("*.npz"):
        checkpoint.unlink()
    gpgan_train("--resume", str(run), "--quiet", check=0)
    shown = read_events(run, counts=True)
    assert ("loss/critic", 2) in shown and ("eval/modes", 6) in shown
    assert {key: n for key, n in shown.items() if n > 1} == {}


# -- 5-7. names, arguments, configs ------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["../../x", "a/b", "..", ".", "a\nb", "tab\there", "x" * 256])
def test_a_run_name_is_a_plain_name(tmp_path, name):
    proc = gpgan_train(QUICKSTART, "--out", str(tmp_path / "out"), "--name", name, check=2)
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("gpgan-train: error: --name: run name ")
    assert ("a folder name takes at most 255" if len(name) > 255 else "not a plain folder name") in proc.stderr
    assert os.listdir(tmp_path) == []


def test_bad_arguments_exit_2_and_name_the_argument(tmp_path, toy_runs):
    straight, _, _ = toy_runs
    proc = gpgan_train("--resume", str(tmp_path), check=2)
    assert "is not a run folder" in proc.stderr and str(tmp_path) in proc.stderr
    binary = tmp_path / "c.yaml"
    binary.write_bytes(b"train:\n  steps: \xff\xfe\n")
    proc = gpgan_train(str(binary), "--out", str(tmp_path / "o"), check=2)
    assert "not UTF-8 text" in proc.stderr and str(binary) in proc.stderr and "Traceback" not in proc.stderr
    proc = gpgan_train(str(tmp_path), "--out", str(tmp_path / "o"), check=2)
    assert "is a folder, not a YAML file" in proc.stderr
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing yet\n")
    proc = gpgan_train(str(empty), "--out", str(tmp_path / "o"), check=2)
    assert "is empty" in proc.stderr
    proc = gpgan_train(QUICKSTART, "--set", "model.critic_options.depth=0", "--out", str(tmp_path / "o"), check=2)
    assert proc.stderr.endswith("model.critic_options.depth: got 0 (out of range); accepted: an integer >= 1\n")
    assert not (tmp_path / "o").exists()
    env = dict(os.environ, PYTHONPATH=ROOT)
    readme = os.path.join(ROOT, "README.md")
    proc = subprocess.run([sys.executable, "-m", "gpgan.cli.sample", readme, "--out", str(tmp_path / "s.png")],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 1 and "README.md is not a checkpoint inside a run folder" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "gpgan.cli.sample", str(straight), "--out", str(tmp_path / "s")],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 2 and ".png" in proc.stderr and ".npz" in proc.stderr
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("tool, args, message", [
    ("train", ["--bogus"], "gpgan-train: error: unrecognized arguments: --bogus (`gpgan-train --help` lists what is "
                           "accepted)"),
    ("train", ["nothere.yaml"], "gpgan-train: error: config file "),
    ("eval", [], "gpgan-eval: error: the following arguments are required: RUN_DIR_OR_CHECKPOINT (`gpgan-eval --help`"),
    ("eval", ["stats", "--data", "svhn"], "gpgan-eval stats: error: argument --data: invalid choice: 'svhn' (choose "
                                          "from 'cifar10', 'image_folder')"),
    ("eval", ["real", "cifar10:test"], "gpgan-eval real: error: the following arguments are required: --ref"),
    ("sample", ["run", "--n", "0", "--out", "s.png"], "gpgan-sample: error: --n must be at least 1, got 0"),
    ("ablate", ["--jobs", "x", "sweep.yaml"], "gpgan-ablate: error: argument --jobs/-j: expected a whole number, "
                                              "got 'x'"),
])
def test_command_line_mistakes_take_one_line_without_the_usage_block(tmp_path, tool, args, message):
    """argparse's own errors (an unknown option, a missing argument, a bad choice) and the tools'
    checks of their arguments: exit status 2, one line on stderr, nothing written."""
    proc = subprocess.run([sys.executable, "-m", f"gpgan.cli.{tool}", *args], capture_output=True, text=True,
                          cwd=tmp_path, env=dict(os.environ, PYTHONPATH=ROOT))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(message), proc.stderr
    assert "usage:" not in proc.stderr and os.listdir(tmp_path) == []


def _scripts_source():
    scripts = os.path.join(ROOT, "scripts")
    return {name: open(os.path.join(scripts, name)).read() for name in sorted(os.listdir(scripts))
            if name.endswith(".py")}


def test_the_scripts_take_command_line_mistakes_in_one_line_too(tmp_path):
    """Every script of scripts/ that imports gpgan parses as the tools do: an unknown option
    gives one line and exit status 2 before any work (the fixture makers, which run with the
    reference libraries alone, keep argparse's own parser)."""
    sources = _scripts_source()
    imports_gpgan = {name for name, text in sources.items()
                     if re.search(r"^\s*(from gpgan[. ]|import gpgan)", text, re.MULTILINE)}
    own_argparse = {name for name, text in sources.items() if "argparse.ArgumentParser(" in text}
    assert not own_argparse & imports_gpgan, own_argparse & imports_gpgan
    names = sorted(name for name, text in sources.items() if "from gpgan.cli._args import Parser" in text)
    assert {"device_sweep.py", "gpu_check.py", "bench_engine.py", "dirac_gan.py"} <= set(names)
    for name in names:
        proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", name), "--no-such-option"],
                              capture_output=True, text=True, cwd=tmp_path, env=dict(os.environ, PYTHONPATH=ROOT))
        assert proc.returncode == 2 and proc.stdout == "", (name, proc.stderr)
        assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(f"{name}: error: "), proc.stderr
        assert "--help` lists what is accepted" in proc.stderr and os.listdir(tmp_path) == []


def test_an_output_path_through_a_file_names_that_file(toy_runs, image_run, tmp_path, capsys):
    """--out under a file (a typo, a file where a folder was meant): every command names the file
    in one line, exits 1 and writes nothing; a folder that cannot be written names the output, not
    the temporary file beside it."""
    straight, _, _ = toy_runs
    blocker = tmp_path / "results"
    blocker.write_text("a file")
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"base: {QUICKSTART}\nset: {{train.steps: 1}}\naxes:\n  train.seed: [0]\n")
    commands = [(sample_cli.main, [str(straight), "--out", str(blocker / "grid.png")], "gpgan-sample"),
                (sample_cli.main, [str(image_run), "--out-dir", str(blocker / "pngs"), "--n", "2"], "gpgan-sample"),
                (ablate_cli.main, [str(sweep), "--out", str(blocker / "study")], "gpgan-ablate"),
                # said before any run (and by --dry-run, which listed the runs "in" the file)
                (ablate_cli.main, [str(sweep), "--out", str(blocker), "--dry-run"], "gpgan-ablate"),
                (ablate_cli.main, [str(sweep), "--out", str(tmp_path / "study"), "--report-dir", str(blocker / "r")],
                 "gpgan-ablate")]
    for main, args, program in commands:
        assert main(args) == 1
        assert capsys.readouterr().err == f"{program}: error: {blocker}: a file, not a folder\n"
    for dry in ([], ["--dry-run"]):  # the dry run had said "a run would write .../results/runs/..."
        proc = gpgan_train(QUICKSTART, "--out", str(blocker / "runs"), *dry, check=1)
        assert proc.stderr.endswith(f"gpgan-train: error: {blocker}: a file, not a folder\n")
    assert sorted(os.listdir(tmp_path)) == ["results", "sweep.yaml"]
    if os.path.isdir("/proc/self"):  # a folder where nothing can be made
        assert sample_cli.main([str(straight), "--out", "/proc/self/grid.png"]) == 1
        err = capsys.readouterr().err
        assert err.startswith("gpgan-sample: error: /proc/self/grid.png: ") and ".tmp" not in err


def test_a_folder_that_cannot_be_written_is_named_before_any_work(tmp_path, capsys, monkeypatch):
    """Where the process may not write (checked with os.access, as root passes any mode bits):
    the dry runs of gpgan-train and gpgan-ablate had said all was well, and gpgan-eval began its work."""
    from gpgan.train.launch import plan_run

    locked = tmp_path / "locked"
    locked.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: os.fspath(path) != str(locked) and real_access(path, mode))
    with pytest.raises(PermissionError) as info:
        plan_run(QUICKSTART, out=str(locked / "runs"))
    assert info.value.filename == str(locked)
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"base: {QUICKSTART}\nset: {{train.steps: 1}}\naxes:\n  train.seed: [0]\n")
    for extra in ([], ["--dry-run"]):
        assert ablate_cli.main([str(sweep), "--out", str(locked / "study"), *extra]) == 1
        assert capsys.readouterr().err == (f"gpgan-ablate: error: {locked}: Permission denied (a folder this process "
                                           "cannot write in)\n")
    assert eval_cli.main(["real", "cifar10:test", "--ref", "cifar10:train", "--out", str(locked / "scores.json")]) == 1
    assert capsys.readouterr().err == (f"gpgan-eval: error: {locked}: Permission denied (a folder this process "
                                       "cannot write in)\n")
    assert os.listdir(locked) == []


def test_stop_signals_raise_keyboard_interrupt_within_and_are_restored_after():
    """gpgan-sample, gpgan-eval and gpgan-ablate stop on SIGTERM, and on SIGINT where it came in
    ignored, as on Ctrl-C; the handlers of before come back (a test process keeps its own)."""
    import signal

    from gpgan.cli._process import stopped_by_signals

    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        for sig in (signal.SIGTERM, signal.SIGINT):
            with pytest.raises(KeyboardInterrupt):
                with stopped_by_signals():
                    os.kill(os.getpid(), sig)
                    for _ in range(100):  # the handler runs between bytecodes of the main thread
                        pass
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) == before[0]
    finally:
        signal.signal(signal.SIGINT, before[1])


# -- features: fork, best checkpoint, dry run, progress ------------------------------------------------------
def test_fork_from_a_checkpoint_leaves_the_original_untouched(toy_runs, tmp_path):
    straight, stopped, out = toy_runs
    source = tmp_path / "src" / "quickstart" / "stopped"
    shutil.copytree(stopped, source)
    before = snapshot(source)
    proc = gpgan_train("--resume", str(source / "checkpoints" / "ckpt_000004.npz"), "--name", "fork", "--quiet",
                       check=0)
    fork = source.parent / "fork"
    assert "forked from" in proc.stderr
    assert snapshot(source) == before
    manifest = json.loads((fork / "manifest.json").read_text())
    assert manifest["forked_from"]["step"] == 4 and manifest["forked_from"]["run"] == str(source)
    assert metrics(fork) == metrics(straight)  # the original's first 4 steps, then the same training
    assert_same_weights(fork, straight)
    # The best evaluation up to step 4 came along: the fork's best.npz is the straight run's.
    from gpgan.checkpoint import read_meta
    from gpgan.files import read_arrays
    best_step = read_meta(straight / "checkpoints" / "best.npz")["step"]
    assert read_meta(fork / "checkpoints" / "best.npz")["step"] == best_step
    mine, theirs = (read_arrays(run / "checkpoints" / "best.npz", "best") for run in (fork, straight))
    assert mine.keys() == theirs.keys() and all(np.array_equal(mine[k], theirs[k]) for k in mine)
    gpgan_train("--resume", str(source / "checkpoints" / "ckpt_000004.npz"), "--name", "fork", check=2)
    # A CONFIG beside the checkpoint is read as on resume: one that differs elsewhere is refused.
    proc = gpgan_train(QUICKSTART, "--resume", str(source / "checkpoints" / "ckpt_000004.npz"), "--name", "fork2",
                       check=2)
    assert "cannot resume with a changed config" in proc.stderr and "train.checkpoint_interval" in proc.stderr
    assert not (source.parent / "fork2").exists()


@pytest.mark.parametrize("text, what", [("", "is empty"), ("# nothing\n", "is empty"), ("- 1\n", "is not a mapping")])
def test_a_run_whose_config_is_emptied_is_refused_not_read_as_defaults(toy_runs, tmp_path, capsys, text, what):
    """An emptied config.yaml read as every default had sampled and resumed with another model
    (a 'does not match' error, or 'train.steps may only grow' against the defaults' steps)."""
    straight, _, _ = toy_runs
    run = tmp_path / "run"
    shutil.copytree(straight, run)
    (run / "config.yaml").write_text(text)
    before = snapshot(run)
    expected = f"error: the run's config {run / 'config.yaml'} {what}: the run folder is damaged"
    assert sample_cli.main([str(run), "--out", str(tmp_path / "s.png")]) == 1
    assert eval_cli.main([str(run)]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and all(expected in line for line in lines), lines
    proc = gpgan_train("--resume", str(run), "--set", "train.steps=20", check=2)
    assert proc.stderr.splitlines() == [f"gpgan-train: {expected} (gpgan writes the resolved config there, every key)"]
    assert snapshot(run) == before and not (tmp_path / "s.png").exists()


def test_resume_from_a_file_that_is_no_checkpoint_names_that_file(toy_runs, tmp_path):
    """It named the file's grandparent folder as 'not a run folder'."""
    _, stopped, _ = toy_runs
    stray = tmp_path / "notes.txt"
    stray.write_text("x")
    for path in (stray, stopped / "config.yaml"):
        proc = gpgan_train("--resume", str(path), check=2)
        assert proc.stderr == (f"gpgan-train: error: --resume {path}: a file, but not in a run's checkpoints/ folder; "
                               "give a run folder to continue it, or one of its checkpoints "
                               "(RUN_DIR/checkpoints/ckpt_N.npz) to fork a new run from it\n")
    # A fork (--name) from a checkpoint that is not there: it had said "--name and --out ... need a
    # checkpoint file ..., not a run folder".
    missing = stopped / "checkpoints" / "ckpt_000005.npz"
    proc = gpgan_train("--resume", str(missing), "--name", "fork", "--out", str(tmp_path), check=2)
    assert proc.stderr.startswith(f"gpgan-train: error: --resume {missing}: {missing} does not exist; ")
    assert os.listdir(tmp_path) == ["notes.txt"]


def test_a_stop_after_the_run_has_passed_is_refused(toy_runs, tmp_path):
    _, stopped, _ = toy_runs
    run = tmp_path / "s"
    shutil.copytree(stopped, run)
    before = snapshot(run)
    for source in (run, run / "checkpoints" / "ckpt_000004.npz"):
        proc = gpgan_train("--resume", str(source), "--set", "train.stop_after=3", "--quiet", check=2)
        assert "train.stop_after 3 is not after step" in proc.stderr and "Traceback" not in proc.stderr
    assert snapshot(run) == before and sorted(os.listdir(tmp_path)) == ["s"]


def test_best_checkpoint_holds_the_best_evaluation(toy_runs):
    straight, _, _ = toy_runs
    from gpgan.checkpoint import read_meta

    evals = [r for r in metrics(straight) if "eval/reverse_kl" in r]
    best = min(evals, key=lambda r: (r["eval/reverse_kl"], r["step"]))
    meta = read_meta(straight / "checkpoints" / "best.npz")
    assert meta["step"] == best["step"] and meta["best"]["value"] == best["eval/reverse_kl"]
    assert "best.npz" in os.listdir(straight / "checkpoints")  # never pruned (keep 3 of 4 periodic)


def test_dry_run_prints_the_config_and_writes_nothing(tmp_path):
    proc = gpgan_train(QUICKSTART, "--dry-run", "--set", "train.steps=7", "--out", str(tmp_path / "o"),
                       "--name", "x", check=0)
    assert yaml.safe_load(proc.stdout)["train"]["steps"] == 7
    assert str(tmp_path / "o" / "quickstart" / "x") in proc.stderr
    assert not (tmp_path / "o").exists()
    config = os.path.join(ROOT, "configs", "r1_cifar.yaml")
    proc = gpgan_train(config, "--dry-run", "--set", f"data.root={tmp_path / 'no'}", "--set", "data.download=false",
                       "--out", str(tmp_path / "o"), check=1)
    assert "data_batch_1" in proc.stderr and not (tmp_path / "o").exists()


def test_progress_bar_shows_penalty_and_latest_evaluation():
    from gpgan.train.loop import _progress

    shown = _progress({"loss/critic": 0.5, "loss/generator": 1.25, "penalty": 0.03},
                      {"eval/modes": 25, "eval/reverse_kl": 0.0123})
    assert shown == {"D": "0.500", "G": "1.250", "pen": "0.03", "modes": "25", "reverse_kl": "0.0123"}


# -- a full disk, messages without Python's exception names -------------------------------------------
def _full_disk_at(monkeypatch, module, name):
    """Make ``module``'s atomic writes of a file called ``name`` fail as on a full disk: some
    bytes reach the temporary file, then ENOSPC, without a file name (as a write() raises it)."""
    import errno

    real = module.atomic_write

    def atomic_write(path, content):
        if os.path.basename(path) != name:
            return real(path, content)

        def fills_up(f):
            f.write(b"PK\x03\x04 a partial checkpoint")
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, fills_up)

    monkeypatch.setattr(module, "atomic_write", atomic_write)


def test_a_full_disk_in_training_names_the_file_and_step_and_keeps_the_last_checkpoint(tmp_path, monkeypatch,
                                                                                          capsys):
    import gpgan.checkpoint.npz as npz
    from gpgan.cli import train as train_cli

    _full_disk_at(monkeypatch, npz, "ckpt_000004.npz")
    status = train_cli.main([QUICKSTART, *sets(SMALL), "--out", str(tmp_path), "--name", "full", "--quiet"])
    err = capsys.readouterr().err
    run = tmp_path / "quickstart" / "full"
    ckpt = run / "checkpoints" / "ckpt_000004.npz"
    assert status == 1
    [line] = [x for x in err.splitlines() if "error" in x]
    assert line == (f"gpgan-train: error: at step 4: {ckpt}: No space left on device; the last good checkpoint "
                    f"is {run / 'checkpoints' / 'ckpt_000002.npz'} (step 2); free space and resume with: "
                    f"gpgan-train --resume {run}")
    assert "Errno" not in err and "OSError" not in err and "Traceback" not in err
    # Nothing partial: no temporary file, no final.json; the step-2 checkpoint reads back whole.
    assert sorted(os.listdir(run / "checkpoints")) == ["best.npz", "ckpt_000002.npz"]
    assert not (run / "final.json").exists()
    from gpgan.checkpoint import verify

    verify(run / "checkpoints" / "ckpt_000002.npz")
    # Space freed: the run resumes from step 2 and ends as an uninterrupted run does.
    monkeypatch.undo()
    assert train_cli.main(["--resume", str(run), "--quiet"]) == 0
    straight = tmp_path / "quickstart" / "straight"
    assert train_cli.main([QUICKSTART, *sets(SMALL), "--out", str(tmp_path), "--name", "straight", "--quiet"]) == 0
    strip = lambda records: [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in records]  # noqa: E731
    assert strip(metrics(run)) == strip(metrics(straight))


def test_a_run_folder_is_made_whole_or_not_at_all(toy_runs, tmp_path, monkeypatch, capsys):
    """A new run or a fork whose setup fails half-way (a full disk at its manifest or at the fork's
    copied metrics, Ctrl-C) leaves no folder that looks like a run and blocks its name; a named
    folder that was there before is left as it was."""
    import gpgan.train.launch as launch_module
    import gpgan.train.run as run_module
    from gpgan.cli import train as train_cli

    _, stopped, _ = toy_runs
    args = [QUICKSTART, *sets(SMALL), "--out", str(tmp_path), "--quiet"]
    _full_disk_at(monkeypatch, run_module, "manifest.json")
    assert train_cli.main(args + ["--name", "r"]) == 1
    assert "manifest.json: No space left on device" in capsys.readouterr().err
    assert os.listdir(tmp_path / "quickstart") == []
    (tmp_path / "quickstart" / "kept").mkdir()  # a named folder holding no run yet: allowed, and kept
    (tmp_path / "quickstart" / "kept" / "notes.txt").write_text("mine")
    assert train_cli.main(args + ["--name", "kept"]) == 1
    assert snapshot(tmp_path / "quickstart" / "kept") == {"notes.txt": b"mine"}
    assert sorted(os.listdir(tmp_path / "quickstart" / "kept")) == ["notes.txt"]
    monkeypatch.undo()

    def interrupted(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(run_module.RunFolder, "write_manifest", interrupted)
    assert train_cli.main(args + ["--name", "r"]) == 130
    assert "interrupted before training started; no run folder was made" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path / "quickstart")) == ["kept"]
    monkeypatch.undo()

    source = tmp_path / "src" / "quickstart" / "stopped"
    shutil.copytree(stopped, source)
    before = snapshot(source)
    _full_disk_at(monkeypatch, launch_module, "metrics.jsonl")
    assert train_cli.main(["--resume", str(source / "checkpoints" / "ckpt_000004.npz"), "--name", "fork",
                           "--quiet"]) == 1
    assert "metrics.jsonl: No space left on device" in capsys.readouterr().err
    assert sorted(os.listdir(source.parent)) == ["stopped"] and snapshot(source) == before
    monkeypatch.undo()
    # Nothing blocks the names now.
    assert train_cli.main(args + ["--name", "r", "--set", "train.steps=2"]) == 0
    assert train_cli.main(["--resume", str(source / "checkpoints" / "ckpt_000004.npz"), "--name", "fork",
                           "--quiet"]) == 0


def test_runs_started_in_the_same_second_get_their_own_folders(tmp_path, monkeypatch):
    """Each run claims its timestamped folder with one mkdir, which fails where another run has
    claimed it: the second and third runs of a second get the suffixes -2 and -3."""
    import gpgan.train.run as run_module

    monkeypatch.setattr(run_module, "_timestamp", lambda: "20261127-120000")
    config = yaml.safe_load(open(QUICKSTART))
    from gpgan.train.config import validate_config

    config = validate_config(config)
    runs = [run_module.RunFolder.new(tmp_path, "quickstart") for _ in range(3)]
    assert len({run.path for run in runs}) == 1  # all three picked the same name before any was made
    for run in runs:
        run.initialize(config)
    assert sorted(os.listdir(tmp_path / "quickstart")) == ["20261127-120000", "20261127-120000-2",
                                                          "20261127-120000-3"]
    assert all(run_module.RunFolder(run.path).exists() for run in runs)


def test_two_runs_that_picked_one_name_never_share_its_folder(tmp_path):
    """Both found the name free before either made its folder (two commands started together):
    the second is refused, and the first's run is left whole."""
    import gpgan.train.run as run_module
    from gpgan.train.config import validate_config

    config = validate_config(yaml.safe_load(open(QUICKSTART)))
    first, second = (run_module.RunFolder.new(tmp_path, "quickstart", "same") for _ in range(2))
    first.initialize(config)
    before = snapshot(first.path)
    with pytest.raises(FileExistsError, match="already holds a run"):
        second.initialize(dict(config, loss="wgan"))
    assert snapshot(first.path) == before and first.read_config()["loss"] == config["loss"]


def test_ctrl_c_while_a_resume_loads_says_how_to_resume(toy_runs, tmp_path, monkeypatch, capsys):
    import gpgan.train.launch as launch_module
    from gpgan.cli import train as train_cli

    _, stopped, _ = toy_runs
    run = tmp_path / "s"
    shutil.copytree(stopped, run)
    before = snapshot(run)

    def interrupted(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(launch_module, "make_trainer", interrupted)
    assert train_cli.main(["--resume", str(run), "--quiet"]) == 130
    err = capsys.readouterr().err
    assert f"interrupted before training continued; resume again with: gpgan-train --resume {run}\n" in err
    assert snapshot(run) == before


def test_a_full_disk_while_logging_leaves_no_partial_metrics_line(tmp_path, monkeypatch, capsys):
    import errno

    from gpgan.cli import train as train_cli
    from gpgan.files import atomic as atomic_module

    real_open, real_write, metrics_fds, calls = os.open, os.write, set(), []

    def fake_open(path, flags, *args, **kwargs):
        fd = real_open(path, flags, *args, **kwargs)
        if str(path).endswith("metrics.jsonl") and flags & os.O_APPEND:
            metrics_fds.add(fd)
        return fd

    def full_write(fd, data):
        """metrics.jsonl on a disk that fills in the third record, after 7 of its bytes."""
        if fd not in metrics_fds:
            return real_write(fd, data)
        metrics_fds.discard(fd)
        calls.append(len(data))
        if len(calls) == 3:
            real_write(fd, data[:7])
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(atomic_module.os, "open", fake_open)
    monkeypatch.setattr(atomic_module.os, "write", full_write)
    status = train_cli.main([QUICKSTART, *sets(SMALL), "--out", str(tmp_path), "--name", "m", "--quiet"])
    run = tmp_path / "quickstart" / "m"
    err = capsys.readouterr().err
    assert status == 1 and f"at step 3: {run / 'metrics.jsonl'}: No space left on device" in err
    assert (run / "metrics.jsonl").read_text().endswith("}\n")
    assert [r["step"] for r in metrics(run)] == [1, 2]


def test_a_full_disk_under_the_tensorboard_events_stops_cleanly(tmp_path, monkeypatch, capsys):
    """The events are written in the training thread: a failed write ends the run with one line
    naming the events file and the step (tensorboardX's own writer thread died with a traceback
    and then blocked the next write for ever)."""
    import errno

    from tensorboardX import record_writer

    from gpgan.cli import train as train_cli

    real_write, writes = record_writer.RecordWriter.write, []

    def full(self, data):
        writes.append(1)
        if len(writes) > 40:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(self, data)

    monkeypatch.setattr(record_writer.RecordWriter, "write", full)
    status = train_cli.main([QUICKSTART, *sets(SMALL), "--out", str(tmp_path), "--name", "tb", "--quiet"])
    err = capsys.readouterr().err
    assert status == 1 and err.count("\n") <= 2, err
    assert "events.out.tfevents" in err and "No space left on device" in err and "at step" in err
    assert "Traceback" not in err and "Exception in thread" not in err


@pytest.mark.parametrize("args, message", [
    ([QUICKSTART, "--device", "cuda"], "device 'cuda' needs CuPy"),
    ([os.path.join(ROOT, "configs", "r1_cifar.yaml"), "--set", "data.root=/nonexistent/cifar",
      "--set", "data.download=false"], "/nonexistent/cifar"),
])
def test_errors_name_no_python_exception(tmp_path, args, message, capsys):
    from gpgan.cli import train as train_cli

    try:
        import cupy  # noqa: F401
        if args[0] == "--device":
            pytest.skip("CuPy is installed: cuda is a usable device here")
    except ImportError:
        pass
    assert train_cli.main([*args, "--out", str(tmp_path), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert message in err and err.startswith("gpgan-train: error: ")
    for name in ("Error:", "Error(", "Errno", "Traceback"):  # RuntimeError: ..., ModuleNotFoundError: ...
        assert name not in err
