"""gpgan-train end to end, through subprocesses: run folder contents, determinism, interruption
(train.stop_after and a real SIGINT) and exact resumption, config errors, non-finite losses,
and the image path on a fixture CIFAR-10 folder with tiny DCGANs."""
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import yaml
from helpers import (QUICKSTART, ROOT, TINY, TINY_DCGAN, assert_same_weights, final_arrays, gpgan_train, metrics,
    sets, write_cifar_fixture)

# Exercise every random stream on resume: the penalty's interpolation coefficients, lazy
# regularization over critic steps, several critic steps per generator step, a linear schedule.
RANDOM_PENALTY = ["loss=wgan", "penalty.type=wgan_gp", "penalty.weight=1", "penalty.interval=3",
                  "train.critic_steps=2", "optim.critic.schedule=linear", "optim.generator.schedule=constant"]


@pytest.fixture(scope="module")
def reference_runs(tmp_path_factory):
    """Two uninterrupted tiny quickstart runs with the same seed (12 steps)."""
    out = tmp_path_factory.mktemp("exp")
    args = [QUICKSTART, *sets(TINY + RANDOM_PENALTY + ["train.steps=12"]), "--out", str(out), "--quiet"]
    gpgan_train(*args, "--name", "a", check=0)
    gpgan_train(*args, "--name", "b", check=0)
    return out / "quickstart" / "a", out / "quickstart" / "b", out


def test_run_folder_contents(reference_runs):
    run, _, _ = reference_runs
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["train"]["steps"] == 12 and config["penalty"]["type"] == "wgan_gp"
    assert config["model"]["generator_options"]["width"] == 16
    manifest = json.loads((run / "manifest.json").read_text())
    for key in ("gpgan_version", "git_commit", "python", "numpy", "cupy", "numba", "onednn", "device", "device_name", "seed", "command"):
        assert key in manifest
    assert manifest["device"] == "cpu" and manifest["seed"] == 0 and "quickstart.yaml" in manifest["command"]
    from gpgan.kernels import compiled_kernels_enabled, onednn_enabled
    assert (manifest["numba"] is not None) == compiled_kernels_enabled()  # which kernels ran
    assert (manifest["onednn"] is not None) == onednn_enabled()
    # What decides the bits beyond the config: the CPU model, NumPy's BLAS, the installed extras
    # (each package's version, None when absent) and the number of processes.
    import importlib.metadata

    from gpgan.backend import cpu_model
    assert manifest["cpu"] == cpu_model() and manifest["world_size"] == 1
    assert manifest["blas"] is None or manifest["blas"].split()[0]
    for extra, packages in manifest["extras"].items():
        for name, version in packages.items():
            try:
                assert version == importlib.metadata.version(name), (extra, name)
            except importlib.metadata.PackageNotFoundError:
                assert version is None, (extra, name)
    if manifest["extras"]:  # gpgan is installed as a distribution
        assert set(manifest["extras"]) >= {"cpu", "mpi", "cuda", "ray"}
        assert set(manifest["extras"]["cpu"]) >= {"numba"}
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [2, 4, 6, 8, 10, 12]
    for r in records:
        for key in ("loss/critic", "loss/generator", "penalty", "grad_norm/real", "grad_norm/fake", "time_per_step"):
            assert np.isfinite(r[key]), key
    evals = [r for r in records if "eval/modes" in r]
    assert [r["step"] for r in evals] == [6, 12]
    # The linear schedule reaches lr * (12 - 12) / 12 = 0 at the last step; the generator's is constant.
    assert records[-1]["lr/critic"] == 0.0 and records[-1]["lr/generator"] == 1e-3
    assert sorted(os.listdir(run / "samples")) == ["final.png", "step_000006.png", "step_000012.png"]
    # Checkpoints every 4 steps and at the end, last 3 kept, and best.npz (the best evaluation).
    assert sorted(os.listdir(run / "checkpoints")) == ["best.npz", "ckpt_000004.npz", "ckpt_000008.npz",
                                                       "ckpt_000012.npz"]
    assert any(name.startswith("events.out.tfevents") for name in os.listdir(run))
    final = json.loads((run / "final.json").read_text())
    assert final["status"] == "finished" and final["steps"] == 12
    assert final["final"]["eval/modes"] == evals[-1]["eval/modes"]
    assert final["best"]["eval/modes"] == max(r["eval/modes"] for r in evals)
    assert final["best"]["eval/reverse_kl"] == min(r["eval/reverse_kl"] for r in evals)


def test_same_seed_gives_identical_runs(reference_runs):
    a, b, _ = reference_runs
    assert metrics(a) == metrics(b)
    assert_same_weights(a, b)


def test_name_of_an_existing_run_is_a_command_line_error(reference_runs):
    _, _, out = reference_runs
    proc = gpgan_train(QUICKSTART, *sets(TINY + ["train.steps=12"]), "--out", str(out), "--name", "a", check=2)
    assert f"--name: run folder {out / 'quickstart' / 'a'} already holds a run" in proc.stderr and "--resume" in proc.stderr


def test_other_seed_gives_another_run(reference_runs):
    a, _, out = reference_runs
    gpgan_train(QUICKSTART, *sets(TINY + RANDOM_PENALTY + ["train.steps=2", "train.seed=1"]),
                "--out", str(out), "--name", "seed1", "--quiet", check=0)
    assert metrics(out / "quickstart" / "seed1")[0] != metrics(a)[0]


def test_stop_after_then_resume_equals_uninterrupted(reference_runs):
    a, _, out = reference_runs
    proc = gpgan_train(QUICKSTART, *sets(TINY + RANDOM_PENALTY + ["train.steps=12", "train.stop_after=5"]),
                       "--out", str(out), "--name", "stopped", "--quiet", check=130)
    run = out / "quickstart" / "stopped"
    assert "step 5" in proc.stderr and f"--resume {run}" in proc.stderr
    assert not (run / "final.json").exists()
    assert (run / "checkpoints" / "ckpt_000005.npz").exists()
    # A crash after step 7 (simulated: metrics written beyond the checkpoint, the last line torn)
    # loses those lines.
    with open(run / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": 6, "loss/critic": 123.0}) + "\n")
        f.write('{"step": 8, "loss/cri')  # cut short by the crash
    proc = gpgan_train("--resume", str(run), "--quiet", check=0)
    assert "resuming" in proc.stderr and "from step 5" in proc.stderr
    assert metrics(run) == metrics(a)
    assert_same_weights(run, a)
    manifest = json.loads((run / "manifest.json").read_text())
    assert [r["from_step"] for r in manifest["resumes"]] == [5]
    # A finished run has nothing left to do; extending it is allowed.
    proc = gpgan_train("--resume", str(run), "--quiet", check=0)
    assert "already finished (all its steps); pass --set train.steps=N (larger) to continue it" in proc.stderr


def test_sigint_saves_checkpoint_and_resume_matches(tmp_path):
    """A real Ctrl-C: the run stops at some step s with a checkpoint; resumed up to step s + 3
    it equals a run that went from 0 to s + 3 in one go."""
    args = [QUICKSTART, *sets(TINY + RANDOM_PENALTY + ["train.steps=100000", "train.checkpoint_interval=3"]),
            "--out", str(tmp_path), "--quiet"]
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", PYTHONPATH=ROOT)
    proc = subprocess.Popen([sys.executable, "-m", "gpgan.cli.train", *args, "--name", "int"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    ckpts = tmp_path / "quickstart" / "int" / "checkpoints"
    deadline = time.time() + 120
    while time.time() < deadline and not (ckpts.exists() and any(ckpts.iterdir())):
        time.sleep(0.05)
    run = tmp_path / "quickstart" / "int"
    # While it trains, a second trainer of the run is refused (its files would interleave).
    busy = gpgan_train("--resume", str(run), "--quiet", check=1)
    assert f"{run} is being trained by process {proc.pid}; wait for it to end, or stop it (kill -INT {proc.pid}" \
        in busy.stderr and "Traceback" not in busy.stderr
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted (Ctrl-C)" in err and "Resume with: gpgan-train --resume" in err
    stopped_at = max(int(p.name[5:11]) for p in ckpts.glob("ckpt_*.npz"))
    target = stopped_at + 3
    gpgan_train("--resume", str(run), "--set", f"train.stop_after={target}", "--quiet", check=130)
    gpgan_train(*sets([f"train.stop_after={target}"]), *args, "--name", "straight", check=130)
    straight = tmp_path / "quickstart" / "straight"
    assert metrics(run) == metrics(straight)
    assert_same_weights(run, straight)


def test_resume_with_changed_config_is_refused(reference_runs, tmp_path):
    a, _, _ = reference_runs
    run = tmp_path / "copy"
    shutil.copytree(a, run)
    proc = gpgan_train("--resume", str(run), "--set", "optim.critic.lr=0.5", "--set", "train.seed=3", check=2)
    assert "optim.critic.lr: run has 0.001, requested 0.5" in proc.stderr and "train.seed" in proc.stderr
    proc = gpgan_train("--resume", str(run), "--set", "train.steps=6", check=2)
    assert "train.steps may only grow" in proc.stderr
    # A CONFIG that differs from the run's is refused too, naming the keys.
    proc = gpgan_train("--resume", str(run), QUICKSTART, check=2)
    assert "model.generator_options.width" in proc.stderr
    # Growing train.steps continues the finished run, and says that its linear decays stretch.
    proc = gpgan_train("--resume", str(run), "--set", "train.steps=14", "--quiet", check=0)
    assert ("train.steps grows from 12 to 14: optim.critic.schedule follows train.steps and is read over the new "
            "length from here on") in proc.stderr
    assert [r["step"] for r in metrics(run)][-2:] == [12, 14]
    assert json.loads((run / "final.json").read_text())["steps"] == 14


@pytest.mark.parametrize("content, overrides, expected", [
    ("base: {q}\ntrain: {{stesp: 3}}\n", [], ["unknown key 'train.stesp'", "did you mean 'train.steps'"]),
    ("base: {q}\npenalty: {{wieght: 3}}\n", [], ["did you mean 'penalty.weight'"]),
    ("base: {q}\ntrain: {{steps: many}}\n", [], ["train.steps: got 'many'", "accepted: an integer >= 1"]),
    ("base: {q}\n", ["penalty.weight=-2"], ["penalty.weight: got '-2'", "accepted: a number >= 0"]),
    ("base: {q}\n", ["optim.critic.betas=0.5"], ["optim.critic.betas: got ['0.5']", "a list of 2 numbers"]),
    ("base: {q}\n", ["train.ema.enable=true"], ["unknown key 'train.ema.enable'", "did you mean 'train.ema.enabled'"]),
    ("base: {q}\nloss: wasserstein\n", [], ["loss: got 'wasserstein'", "one of", "'wgan'"]),
    ("base: {q}\npenalty: {{type: dragan, options: {{noise_scale: abc}}}}\n", [],
     ["penalty.options.noise_scale: got 'abc' (not a number); accepted: a number >= 0"]),
    ("base: {q}\n", ["penalty.options.foo=1"],
     ["penalty.options.foo: not an option of penalty 'r1'; accepted: norm_eps"]),
])
def test_bad_configs_fail_before_any_work(tmp_path, content, overrides, expected):
    path = tmp_path / "bad.yaml"
    path.write_text(content.format(q=QUICKSTART))
    proc = gpgan_train(str(path), *sets(overrides), "--out", str(tmp_path / "exp"), check=2)
    for text in expected:
        assert text in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "exp").exists()


PYTHON_WORDING = ("Traceback", "unexpected keyword", "multiple values", "could not convert", "Error:", "__init__")


# Every bad option and its message: test_config.py. Here, what the command line makes of two of them.
@pytest.mark.parametrize("overrides, expected", [
    (["penalty.type=dragan", "penalty.options.noise_scale=abc"],
     "penalty.options.noise_scale: got 'abc' (not a number); accepted: a number >= 0"),
    (["data.options.foo=1"], "data.options.foo: not an option of data set 'grid25'; accepted: scale"),
])
def test_bad_penalty_and_data_options_fail_the_dry_run_in_one_line(tmp_path, overrides, expected):
    proc = gpgan_train(QUICKSTART, "--dry-run", *sets(overrides), "--out", str(tmp_path / "exp"), check=2)
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    assert errors == [f"gpgan-train: error: invalid config ({QUICKSTART} with --set): {expected}"]
    assert not any(text in proc.stderr for text in PYTHON_WORDING), proc.stderr
    assert not (tmp_path / "exp").exists()


@pytest.mark.parametrize("overrides, section, expected", [
    (["penalty.type=dragan", "penalty.options.noise_scale=1e-2", "penalty.options.interpolate=false",
      "penalty.options.norm_eps=1e-10"], "penalty", {"noise_scale": 0.01, "interpolate": False, "norm_eps": 1e-10}),
    (["penalty.type=wgan_gp", "penalty.center=0.5", "penalty.options.norm_eps=1e-8"], "penalty", {"norm_eps": 1e-8}),
    (["penalty.type=lp", "penalty.options.norm_eps=1e-8"], "penalty", {"norm_eps": 1e-8}),
    (["data.name=ring8", "data.options.scale=wgan_gp"], "data", {"scale": "wgan_gp"}),
])
def test_the_options_each_penalty_and_data_set_takes_pass_the_dry_run(tmp_path, overrides, section, expected):
    proc = gpgan_train(QUICKSTART, "--dry-run", *sets(overrides), "--out", str(tmp_path / "exp"), check=0)
    assert yaml.safe_load(proc.stdout)[section]["options"] == expected  # typed: 1e-2 is a number
    assert not (tmp_path / "exp").exists()


def assert_checkpoints_finite(run):
    """Every floating array of every checkpoint (weights, optimizer state, EMA) is finite."""
    for name in os.listdir(run / "checkpoints"):
        with np.load(run / "checkpoints" / name, allow_pickle=False) as f:
            for key in f.files:
                if f[key].dtype.kind == "f":
                    assert np.isfinite(f[key]).all(), (name, key)


def test_non_finite_loss_stops_with_clear_message(tmp_path):
    proc = gpgan_train(QUICKSTART, *sets(TINY + ["train.steps=50", "train.checkpoint_interval=1",
                                                 "optim.critic.lr=1e30", "optim.generator.lr=1e30"]),
                       "--out", str(tmp_path), "--name", "nan", "--quiet", check=3)  # 3: diverged
    assert "non-finite loss/" in proc.stderr or "non-finite penalty" in proc.stderr
    assert " at step " in proc.stderr and "Traceback" not in proc.stderr
    run = tmp_path / "quickstart" / "nan"
    assert not (run / "final.json").exists()
    assert_checkpoints_finite(run)


def test_overflowing_gradients_stop_the_run(tmp_path):
    """Finite losses, but gradients whose squares overflow float32: Adam's second moment would
    become inf (and its updates silently 0). The run stops before the update instead."""
    proc = gpgan_train(QUICKSTART, *sets(TINY + ["train.steps=50", "train.checkpoint_interval=1", "loss=wgan",
                                                 "penalty.type=none", "optim.critic.lr=1e6",
                                                 "optim.generator.lr=1e6"]),
                       "--out", str(tmp_path), "--name", "overflow", "--quiet", check=3)
    assert "non-finite gradient of the" in proc.stderr and "Traceback" not in proc.stderr
    run = tmp_path / "quickstart" / "overflow"
    assert not (run / "final.json").exists()
    assert_checkpoints_finite(run)


def test_cifar_fixture_with_tiny_dcgan(tmp_path):
    write_cifar_fixture(tmp_path / "cifar")
    config = os.path.join(ROOT, "configs", "r1_cifar.yaml")
    gpgan_train(config, *sets(TINY_DCGAN + [f"data.root={tmp_path / 'cifar'}", "train.steps=3"]),
                "--out", str(tmp_path / "exp"), "--name", "c", "--quiet", check=0)
    run = tmp_path / "exp" / "r1_cifar" / "c"
    from PIL import Image

    with Image.open(run / "samples" / "final.png") as img:
        # 4 images of 32x32, 2 per row, 2 px padding: 70 px, enlarged 8 times to be readable; the
        # raw weights' grid beside the EMA's (8 px apart), under their labels and the step's caption.
        assert img.size == (2 * 8 * 70 + 8, 24 + 24 + 8 * 70)
        pixels = np.asarray(img.convert("RGB"))
    assert (pixels[:24] < 100).all(axis=2).sum() > 20  # the caption "step 3" is written
    assert sorted(os.listdir(run / "samples")) == ["final.png", "step_000002.png"]
    assert [r["step"] for r in metrics(run)] == [1, 2, 3]
    assert sorted(os.listdir(run / "checkpoints")) == ["ckpt_000002.npz", "ckpt_000003.npz"]


def test_missing_cifar_offline_message(tmp_path):
    config = os.path.join(ROOT, "configs", "r1_cifar.yaml")
    proc = gpgan_train(config, "--set", f"data.root={tmp_path / 'nothing'}", "--set", "data.download=false",
                       "--out", str(tmp_path / "exp"), check=1)
    assert "data_batch_1" in proc.stderr and str(tmp_path / "nothing") in proc.stderr
    assert not (tmp_path / "exp").exists()


def test_help_documents_every_option():
    exe = shutil.which("gpgan-train")
    cmd = [exe, "--help"] if exe else [sys.executable, "-m", "gpgan.cli.train", "--help"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    for option in ("CONFIG", "--set", "--device", "--out", "--name", "--resume", "--quiet"):
        assert option in out


def test_image_run_resumes_exactly_across_epochs(tmp_path):
    """Images: BatchNorm statistics, EMA, flips and the per-epoch order all come back on resume
    (20 images, batch 4, 2 critic steps: the stop at step 3 falls inside the second epoch)."""
    write_cifar_fixture(tmp_path / "cifar")
    config = os.path.join(ROOT, "configs", "r1_cifar.yaml")
    common = [config, *sets(TINY_DCGAN + [f"data.root={tmp_path / 'cifar'}", "train.steps=5",
                                          "train.critic_steps=2", "train.ema.decay=0.5"]),
              "--out", str(tmp_path / "exp"), "--quiet"]
    gpgan_train(*common, "--name", "straight", check=0)
    gpgan_train(*common, "--name", "resumed", "--set", "train.stop_after=3", check=130)
    run = tmp_path / "exp" / "r1_cifar" / "resumed"
    gpgan_train("--resume", str(run), "--quiet", check=0)
    straight = tmp_path / "exp" / "r1_cifar" / "straight"
    assert metrics(run) == metrics(straight)
    assert_same_weights(run, straight)
    assert any(k.startswith("ema/") for k in final_arrays(run)[1])


@pytest.mark.cuda
def test_cuda_runs_are_deterministic_and_resume_exactly(tmp_path):
    """--device cuda: two runs with one seed give identical metrics and weights, a stopped and
    resumed run equals them, and the numbers stay close to the CPU run's."""
    write_cifar_fixture(tmp_path / "cifar")
    config = os.path.join(ROOT, "configs", "r1_cifar.yaml")
    common = [config, *sets(TINY_DCGAN + [f"data.root={tmp_path / 'cifar'}", "train.steps=5"]),
              "--out", str(tmp_path / "exp"), "--quiet"]
    gpgan_train(*common, "--device", "cuda", "--name", "a", check=0)
    gpgan_train(*common, "--device", "cuda", "--name", "b", check=0)
    gpgan_train(*common, "--device", "cuda", "--name", "r", "--set", "train.stop_after=3", check=130)
    gpgan_train("--resume", str(tmp_path / "exp" / "r1_cifar" / "r"), "--quiet", check=0)
    gpgan_train(*common, "--name", "cpu", check=0)
    runs = {n: tmp_path / "exp" / "r1_cifar" / n for n in ("a", "b", "r", "cpu")}
    manifest = json.loads((runs["a"] / "manifest.json").read_text())
    assert manifest["device"] == "cuda" and manifest["cupy"] and "unknown" not in manifest["device_name"]
    assert metrics(runs["a"]) == metrics(runs["b"]) == metrics(runs["r"])
    assert_same_weights(runs["a"], runs["b"])
    assert_same_weights(runs["a"], runs["r"])
    for rec_gpu, rec_cpu in zip(metrics(runs["a"]), metrics(runs["cpu"])):
        assert rec_gpu["step"] == rec_cpu["step"]
        np.testing.assert_allclose(rec_gpu["loss/critic"], rec_cpu["loss/critic"], rtol=1e-3, atol=1e-4)



@pytest.mark.cuda
def test_cuda_graph_captures_a_spectrally_normalized_critic(tmp_path):
    """Spectral norm's power iteration and sigma multiply by vectors (through kernels.matmul, which
    a capture allows): a graphed run of a spectrally normalized critic equals the eager one."""
    write_cifar_fixture(tmp_path / "cifar")
    config = os.path.join(ROOT, "configs", "r1_cifar.yaml")
    common = [config, *sets(TINY_DCGAN + [f"data.root={tmp_path / 'cifar'}", "train.steps=4",
                                          "model.critic_options.norm=spectral"]),
              "--out", str(tmp_path / "exp"), "--quiet", "--device", "cuda"]
    gpgan_train(*common, "--name", "graph", check=0)
    gpgan_train(*common, "--name", "eager", "--set", "train.cuda_graph=false", check=0)
    runs = tmp_path / "exp" / "r1_cifar"
    assert metrics(runs / "graph") == metrics(runs / "eager")
    assert_same_weights(runs / "graph", runs / "eager")


@pytest.mark.cuda
def test_cuda_graph_replays_the_eager_steps_bit_for_bit(tmp_path):
    """train.cuda_graph=true (the default) against the eager path: the same metrics and weights,
    with several kinds of step (lazy R1 over two critic steps, the EMA copying until step 4), a
    linear learning-rate decay and Adam's bias corrections, all of which change on the host."""
    write_cifar_fixture(tmp_path / "cifar")
    config = os.path.join(ROOT, "configs", "r1_cifar.yaml")
    common = [config, *sets(TINY_DCGAN + [f"data.root={tmp_path / 'cifar'}", "train.steps=9", "train.critic_steps=2",
                                          "penalty.interval=3", "train.ema.start_step=4",
                                          "optim.generator.schedule=linear", "optim.critic.schedule=linear"]),
              "--out", str(tmp_path / "exp"), "--quiet", "--device", "cuda"]
    gpgan_train(*common, "--name", "graph", check=0)
    gpgan_train(*common, "--name", "eager", "--set", "train.cuda_graph=false", check=0)
    runs = tmp_path / "exp" / "r1_cifar"
    graph, eager = metrics(runs / "graph"), metrics(runs / "eager")
    assert len(graph) == 9 and graph == eager
    assert len({r["loss/critic"] for r in graph}) == 9  # the replays saw new inputs each step
    assert_same_weights(runs / "graph", runs / "eager")


@pytest.mark.cuda
def test_bf16_training_replays_its_eager_steps_and_stays_near_float32(tmp_path):
    """train.precision=bf16 through the CLI: the graph replays the eager bf16 steps bit for bit, the
    products are bf16 (the losses differ from float32's), and the first losses agree with
    float32's to bf16's precision."""
    write_cifar_fixture(tmp_path / "cifar")
    config = os.path.join(ROOT, "configs", "r1_cifar.yaml")
    common = [config, *sets(TINY_DCGAN + [f"data.root={tmp_path / 'cifar'}", "train.steps=6"]),
              "--out", str(tmp_path / "exp"), "--quiet", "--device", "cuda"]
    gpgan_train(*common, "--name", "graph", "--set", "train.precision=bf16", check=0)
    gpgan_train(*common, "--name", "eager", "--set", "train.precision=bf16", "--set", "train.cuda_graph=false", check=0)
    gpgan_train(*common, "--name", "float32", check=0)
    runs = tmp_path / "exp" / "r1_cifar"
    graph, eager, full = metrics(runs / "graph"), metrics(runs / "eager"), metrics(runs / "float32")
    assert len(graph) == 6 and graph == eager
    assert_same_weights(runs / "graph", runs / "eager")
    assert graph[0]["loss/critic"] != full[0]["loss/critic"]
    np.testing.assert_allclose(graph[0]["loss/critic"], full[0]["loss/critic"], rtol=1e-2)
    assert all(np.isfinite(r["loss/critic"]) and np.isfinite(r["penalty"]) for r in graph)


def _alive(pid):
    """False for a finished process, including a zombie nobody reaps (PID 1 in some containers)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_trainer_stops_with_a_checkpoint_when_its_launcher_dies(tmp_path):
    """GPGAN_STOP_WITH_PARENT (set by gpgan-ablate, whose trainers run in sessions of their own):
    when that process is killed outright, the trainer stops as on SIGTERM, saving a checkpoint."""
    launcher = textwrap.dedent(f"""
        import os, subprocess, sys
        env = dict(os.environ, GPGAN_STOP_WITH_PARENT=str(os.getpid()), OPENBLAS_NUM_THREADS="1",
                   PYTHONPATH={ROOT!r})
        with open({str(tmp_path / 'stderr.log')!r}, "w") as err:
            p = subprocess.Popen([sys.executable, "-m", "gpgan.cli.train", {QUICKSTART!r},
                                  "--set", "train.steps=100000", "--set", "train.checkpoint_interval=0",
                                  "--out", {str(tmp_path / 'exp')!r}, "--name", "orphan", "--quiet"],
                                 stderr=err, env=env, start_new_session=True)
        print(p.pid, flush=True)
        p.wait()
    """)
    proc = subprocess.Popen([sys.executable, "-c", launcher], stdout=subprocess.PIPE, text=True)
    trainer_pid = int(proc.stdout.readline())
    run = tmp_path / "exp" / "quickstart" / "orphan"
    try:
        deadline = time.monotonic() + 120
        while not (run / "metrics.jsonl").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        proc.kill()  # SIGKILL: the launcher cannot forward anything
        proc.wait()
        while _alive(trainer_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(trainer_pid), "the orphaned trainer kept training"
    finally:
        if _alive(trainer_pid):
            os.kill(trainer_pid, signal.SIGKILL)
    stderr = (tmp_path / "stderr.log").read_text()
    assert f"the launching process {proc.pid} exited" in stderr, stderr
    ckpts = list((run / "checkpoints").glob("*.npz"))
    assert len(ckpts) == 1 and not (run / "final.json").exists()


class _Evil:
    def __reduce__(self):
        return (os.system, ("touch pwned_by_pickle",))


def test_malicious_cifar_batch_is_a_one_line_error(tmp_path):
    write_cifar_fixture(tmp_path / "cifar")
    with open(tmp_path / "cifar" / "data_batch_3", "wb") as f:
        pickle.dump({b"data": _Evil(), b"labels": []}, f, protocol=2)
    config = os.path.join(ROOT, "configs", "r1_cifar.yaml")
    proc = gpgan_train(config, "--set", f"data.root={tmp_path / 'cifar'}", "--out", str(tmp_path / "exp"),
                       cwd=tmp_path, check=1)
    assert "Traceback" not in proc.stderr
    assert "data_batch_3: refused to unpickle" in proc.stderr and "system" in proc.stderr
    assert not (tmp_path / "pwned_by_pickle").exists()


def test_patience_ends_the_run_where_its_best_metric_stalls_and_resumes_exactly(tmp_path):
    """train.patience: the run ends finished at the first evaluation that completes `patience`
    evaluations in a row without a better best metric (found here from its own metrics.jsonl),
    with a checkpoint there and final.json saying why; interrupted before that step and resumed,
    it stops at the same step with the same records (the count is in the checkpoint)."""
    patience = 3
    # A constant rate: run "d" below ends at another train.steps than the others, which a decay would follow.
    args = [QUICKSTART, *sets(TINY + ["train.steps=400", "train.eval_interval=2", "train.best_metric=eval/modes",
                                      f"train.patience={patience}", "optim.generator.schedule=constant",
                                      "optim.critic.schedule=constant"]), "--out", str(tmp_path), "--quiet"]
    gpgan_train(*args, "--name", "a", check=0)
    run = tmp_path / "quickstart" / "a"
    best, since, expected = None, 0, None
    for record in metrics(run):
        if "eval/modes" not in record:
            continue
        if best is None or record["eval/modes"] > best:
            best, since = record["eval/modes"], 0
        else:
            since += 1
        if since == patience:
            expected = record["step"]
            break
    assert expected is not None and expected < 400  # an integer count of modes stalls within 200 evaluations
    final = json.loads((run / "final.json").read_text())
    assert final["status"] == "finished" and final["steps"] == expected
    assert "stopped early" in final["stop"] and "eval/modes" in final["stop"] and final["best"]["eval/modes"] == best
    assert metrics(run)[-1]["step"] == expected
    assert (run / "checkpoints" / f"ckpt_{expected:06d}.npz").exists()
    proc = gpgan_train("--resume", str(run), "--quiet", check=0)
    assert "already finished (stopped early" in proc.stderr
    assert "pass --set train.patience=N (larger) or a smaller train.patience_min_delta to continue it" in proc.stderr

    # Stopped just before that evaluation, or at it (patience spent, checkpoint saved, no
    # final.json), and resumed: it ends at the same step with the same records.
    for name, stop_after in (("b", expected - 1), ("c", expected)):
        gpgan_train(*args, "--name", name, "--set", f"train.stop_after={stop_after}", check=130)
        resumed = tmp_path / "quickstart" / name
        gpgan_train("--resume", str(resumed), "--quiet", check=0)
        assert metrics(resumed) == metrics(run)
        assert json.loads((resumed / "final.json").read_text())["stop"] == final["stop"]
        assert_same_weights(resumed, run)

    # A run whose last step spends its patience ended by it too: a longer sweep does not extend it,
    # and resumed with more steps it stays where it is. Resumed with its final.json lost (killed
    # after its last checkpoint), it writes it again.
    gpgan_train(*args, "--name", "d", "--set", f"train.steps={expected}", check=0)
    capped = tmp_path / "quickstart" / "d"
    assert json.loads((capped / "final.json").read_text())["stop"] == final["stop"]
    gpgan_train("--resume", str(capped), "--set", "train.steps=400", "--quiet", check=0)
    assert metrics(capped) == metrics(run) and json.loads((capped / "final.json").read_text())["steps"] == expected
    (capped / "final.json").unlink()
    gpgan_train("--resume", str(capped), "--quiet", check=0)
    assert json.loads((capped / "final.json").read_text())["stop"] == final["stop"]
    assert_same_weights(capped, run)


@pytest.mark.parametrize("metric, values, delta, stop_at, saves", [
    # FID creeping down by less than 0.5: the three small gains count as stalls, each still saved
    ("eval/fid", [100.0, 90.0, 89.8, 89.6, 89.5], 0.5, 5, 5),
    ("eval/fid", [100.0, 90.0, 89.8, 89.6, 89.5], 0.0, None, 5),
    # a gain over the mark larger than the delta restarts the count, though the best had moved since
    ("eval/fid", [100.0, 90.0, 89.8, 89.4, 89.3, 89.2], 0.5, None, 6),
    # precision rises (a "max" metric); a fall is a stall
    ("eval/precision", [0.5, 0.52, 0.50, 0.524], 0.025, 4, 3),
])
def test_patience_min_delta_counts_only_gains_larger_than_it(metric, values, delta, stop_at, saves):
    """train.patience 3 with train.patience_min_delta: an evaluation counts as an improvement when
    it beats the value at the last counted one by more than the delta; best.npz follows every gain."""
    from gpgan.train.loop import Trainer

    trainer = Trainer.__new__(Trainer)  # the rule alone, on a trainer without models
    trainer.tc = {"patience": 3, "patience_min_delta": delta}
    trainer.best_metric, trainer.best_value, trainer.patience_mark, trainer.evals_since_best = metric, None, None, 0
    saved = []
    trainer.save_checkpoint = saved.append
    trainer.run = type("Run", (), {"best_checkpoint_path": "best.npz"})()
    stopped = None
    for number, value in enumerate(values, 1):
        trainer._keep_best({metric: value})
        if stopped is None and trainer._patience_spent():
            stopped = number
    assert stopped == stop_at and len(saved) == saves
    assert trainer.best_value == (max(values) if metric == "eval/precision" else min(values))
    if stop_at and delta:
        assert f"by more than {delta:g} in 3 evaluations" in trainer._patience_spent()


def test_patience_min_delta_through_the_command_line_and_resume(tmp_path):
    """The key through gpgan-train: the stop it says, the step it ends at (found from the run's own
    metrics.jsonl by the rule), the hint on resume, and a resume with a smaller delta (and no
    patience) that goes on to the end as the run without a stop does."""
    patience, delta = 3, 0.03
    base = TINY + ["train.steps=200", "train.eval_interval=10", "train.best_metric=eval/high_quality",
                   "optim.generator.schedule=constant", "optim.critic.schedule=constant"]
    args = [QUICKSTART, *sets(base + [f"train.patience={patience}", f"train.patience_min_delta={delta}"]),
            "--out", str(tmp_path), "--quiet"]
    gpgan_train(*args, "--name", "a", check=0)
    run = tmp_path / "quickstart" / "a"
    mark, since, expected = None, 0, None
    for record in metrics(run):
        value = record.get("eval/high_quality")
        if value is None:
            continue
        if mark is None or value > mark + delta:
            mark, since = value, 0
        else:
            since += 1
        if since == patience:
            expected = record["step"]
            break
    final = json.loads((run / "final.json").read_text())
    assert expected is not None and final["steps"] == expected < 200
    assert f"by more than {delta:g} in {patience} evaluations" in final["stop"]
    proc = gpgan_train("--resume", str(run), "--quiet", check=0)
    assert "or a smaller train.patience_min_delta" in proc.stderr
    gpgan_train("--resume", str(run), "--set", "train.patience_min_delta=0", "--set", "train.patience=0", "--quiet",
                check=0)
    gpgan_train(QUICKSTART, *sets(base), "--out", str(tmp_path), "--quiet", "--name", "b", check=0)
    assert metrics(run) == metrics(tmp_path / "quickstart" / "b") and metrics(run)[-1]["step"] == 200
