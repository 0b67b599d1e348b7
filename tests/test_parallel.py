"""Data-parallel training: communicators, the sharded feed and the averaged step in one process,
then gpgan-train under `mpiexec -n 2` end to end (agreement with one process at the first step,
determinism, resume, signals, a failing process, a bad batch size) and NCCL on the GPUs there are.

The mpiexec tests need mpi4py and an MPI launcher (`pip install -e '.[mpi]'`, which the test extra
brings); they are skipped, with the reason, without them.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from gpgan.checkpoint import read_meta
from gpgan.data import make_loader
from gpgan.losses import make_penalty
from gpgan.parallel import LocalCommunicator, connect
from gpgan.parallel.nccl import pick_gpu
from gpgan.train.config import ConfigError, load_config
from gpgan.train.feed import InputFeed
from gpgan.train.parallel import DataParallelStep, ShardedFeed, check_divisible
from helpers import TINY_DCGAN, metrics, sets, write_cifar_fixture

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUICKSTART = os.path.join(ROOT, "configs", "quickstart.yaml")
R1_CIFAR = os.path.join(ROOT, "configs", "r1_cifar.yaml")
PROGRAMS = os.path.join(ROOT, "tests", "programs")

TINY = ["model.generator_options.width=16", "model.critic_options.width=16", "train.batch_size=32",
        "train.log_interval=1", "train.checkpoint_interval=4", "train.sample_interval=6",
        "train.eval_interval=6", "train.eval_samples=200"]
# Every random stream and schedule of the step: interpolation coefficients, lazy regularization
# across critic steps, two critic steps per generator step, a linear schedule, the EMA.
RANDOM_PENALTY = ["loss=wgan", "penalty.type=wgan_gp", "penalty.weight=1", "penalty.interval=3",
                  "train.critic_steps=2", "optim.critic.schedule=linear"]
# ADA with an adaptive p on tiny DCGANs (batch 4: 2 images a process), R1 through the augmentation:
# p adapts after every second step (2 critic minibatches, 8 images) by 8 / (0.08 * 1000) = 0.1,
# and r_t is a multiple of 1/8; checkpoints at odd steps hold partial sums. No BatchNorm (the
# generator's would normalize each process's slice by its own statistics), so one and two
# processes differ by float32 rounding only.
ADA_STEP, ADA_TARGET = 0.1, 0.2
ADA_RUN = TINY_DCGAN + ["model.generator_options.norm=none", "train.steps=10", "train.critic_steps=1",
                        "train.sample_interval=0", "train.checkpoint_interval=3", "augment.type=ada",
                        "augment.p_mode=adaptive", "augment.p=0.5", f"augment.target={ADA_TARGET}",
                        "augment.interval=2", "augment.speed_kimg=0.08", "augment.penalty_points=unaugmented"]


def _mpiexec():
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return beside if os.path.isfile(beside) else shutil.which("mpiexec")


def _mpi_missing():
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return "mpi4py is not installed (pip install -e '.[mpi]')"
    if _mpiexec() is None:
        return "no mpiexec on PATH (pip install -e '.[mpi]' brings MPICH's)"
    return None


needs_mpi = pytest.mark.skipif(_mpi_missing() is not None, reason=str(_mpi_missing()))


def _env(**extra):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", PYTHONPATH=ROOT, **extra)
    # Open MPI's mpiexec refuses to start as root (GPU machines and containers run tests as root);
    # these two let it, and MPICH ignores them.
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    for var in ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_STEP_NUM_TASKS"):
        env.pop(var, None)
    return env


def _train_command(n, args, program=None):
    python = [sys.executable, "-m", "gpgan.cli.train"] if program is None else [sys.executable, *program]
    command = python + list(args)
    return command if n == 1 else [_mpiexec(), "-n", str(n), *command]


def train(n, *args, check=None, program=None, timeout=180, env=None):
    proc = subprocess.run(_train_command(n, args, program), capture_output=True, text=True, env=_env(**(env or {})),
                          timeout=timeout, stdin=subprocess.DEVNULL)
    if check is not None:
        assert proc.returncode == check, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc




def checkpoint_arrays(path):
    with np.load(path, allow_pickle=False) as f:
        return {k: f[k] for k in f.files if k != "__meta__"}


def assert_same_checkpoints(a, b):
    names = sorted(os.listdir(os.path.join(a, "checkpoints")))
    assert names == sorted(os.listdir(os.path.join(b, "checkpoints")))
    for name in names:
        arrays_a = checkpoint_arrays(os.path.join(a, "checkpoints", name))
        arrays_b = checkpoint_arrays(os.path.join(b, "checkpoints", name))
        assert arrays_a.keys() == arrays_b.keys()
        for k in arrays_a:
            np.testing.assert_array_equal(arrays_a[k], arrays_b[k], err_msg=f"{name}: {k}")


# ---------------------------------------------------------------------------------------------
# one process

def test_local_communicator_is_a_run_of_one():
    comm = LocalCommunicator()
    x = np.arange(5.0)
    assert comm.all_reduce_sum(x) is x and comm.broadcast(x) is x
    np.testing.assert_array_equal(comm.all_reduce_host([1, 3], "max"), [1.0, 3.0])
    assert comm.all_gather_object({"a": 1}) == [{"a": 1}] and comm.mean({"b": 2}) == {"b": 2.0}
    assert comm.on_root(lambda: 7) == 7 and comm.together(lambda: 8) == 8
    with pytest.raises(KeyError):  # a one-process failure is raised as it is
        comm.together(lambda: {}["missing"])
    assert comm.finish(3) == 3 and (comm.rank, comm.size, comm.is_root) == (0, 1, True)


def test_connect_without_a_launcher_never_imports_mpi():
    code = ("import sys; from gpgan.parallel import connect; c = connect({}); "
            "print(type(c).__name__, c.size, 'mpi4py' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), check=True)
    assert out.stdout.split() == ["LocalCommunicator", "1", "False"]


def test_connect_refuses_srun_tasks_without_an_mpi_process_manager():
    with pytest.raises(RuntimeError, match=r"srun started 4 tasks.*srun --mpi=pmi2"):
        connect({"SLURM_STEP_NUM_TASKS": "4"})
    assert connect({"SLURM_STEP_NUM_TASKS": "1"}).size == 1


def test_batch_sizes_must_split_over_the_processes():
    config = load_config(QUICKSTART, ["train.batch_size=64", "train.generator_batch_size=96"])
    check_divisible(config, 4)
    with pytest.raises(ConfigError, match=r"train.batch_size 64 does not split over 3 processes"):
        check_divisible(config, 3)
    with pytest.raises(ConfigError, match=r"train.generator_batch_size 96 does not split over 5 processes"):
        check_divisible(load_config(QUICKSTART, ["train.batch_size=60", "train.generator_batch_size=96"]), 5)


def _feed(batch, seed=5):
    loader, _ = make_loader("grid25", batch, seed=seed, progress=False)
    return InputFeed(loader, np.random.default_rng([seed, 2]), make_penalty("wgan_gp"), latent_dim=3,
                     batch_size=batch, generator_batch_size=2 * batch, critic_steps=2)


@pytest.mark.parametrize("size", [2, 4])
def test_sharded_feeds_together_draw_what_one_feed_draws(size):
    feed = _feed(8)
    whole = [feed.next(step, "cpu") for step in range(3)]
    shards = [ShardedFeed(_feed(8), rank, size) for rank in range(size)]
    for step, expected in enumerate(whole):
        parts = [s.next(step, "cpu") for s in shards]
        assert parts[0].critic[0].real.shape == (8 // size, 2) and parts[0].noise.shape == (16 // size, 3)
        for j, critic in enumerate(expected.critic):
            np.testing.assert_array_equal(np.concatenate([p.critic[j].real for p in parts]), critic.real)
            np.testing.assert_array_equal(np.concatenate([p.critic[j].noise for p in parts]), critic.noise)
            np.testing.assert_array_equal(np.concatenate([p.critic[j].draws["eps"] for p in parts]),
                                          critic.draws["eps"])
        np.testing.assert_array_equal(np.concatenate([p.noise for p in parts]), expected.noise)


class _Recorder(LocalCommunicator):
    """Rank 1 of two: keeps the buffer it was asked to sum."""

    size, rank = 2, 1

    def all_reduce_sum(self, array):
        self.buffer = array.copy()
        return array


class _Adder(LocalCommunicator):
    """Rank 0 of two: sums its buffer with the recorded one of rank 1."""

    size = 2

    def __init__(self, other):
        self.other = other

    def all_reduce_sum(self, array):
        array += self.other
        return array


def _step(comm):
    step = DataParallelStep.__new__(DataParallelStep)  # only its reduction is under test
    step.comm = comm
    return step


def test_reduce_gradients_averages_gradients_and_values_in_one_buffer(rng):
    shapes = [(3, 4), (4,), (2, 1, 3)]
    grads = [[rng.standard_normal(s).astype(np.float32) for s in shapes] for _ in range(2)]
    for g in grads:
        g.insert(1, None)  # an unused parameter
    values = [{"loss/critic": np.float32(rng.standard_normal()), "penalty": np.float32(rng.random())}
              for _ in range(2)]
    recorder = _Recorder()
    _step(recorder).reduce_gradients(grads[1], "critic", values[1])
    reduced, averaged, counts = _step(_Adder(recorder.buffer)).reduce_gradients(grads[0], "critic", values[0])
    assert reduced[1] is None and counts is None
    for k in (0, 2, 3):
        assert reduced[k].dtype == np.float32 and reduced[k].shape == grads[0][k].shape
        np.testing.assert_allclose(reduced[k], (grads[0][k] + grads[1][k]) / 2, rtol=1e-6)
    for name in ("loss/critic", "penalty"):
        assert averaged[name].shape == () and averaged[name].dtype == np.float32
        np.testing.assert_allclose(averaged[name], (values[0][name] + values[1][name]) / 2, rtol=1e-6)


def test_reduce_gradients_sums_adas_counts_exactly_in_the_same_buffer(rng):
    """ADA's sign and image counts ride at the end of the float32 buffer and come back summed
    (not averaged), in float64, exactly: the global batch's counts."""
    grads = [[rng.standard_normal((5, 3)).astype(np.float32)] for _ in range(2)]
    values = [{"loss/critic": np.float32(rng.standard_normal())} for _ in range(2)]
    counts = [np.array([-3.0, 16.0]), np.array([16.0, 16.0])]  # sums of signs of 16 outputs, and 16
    recorder = _Recorder()
    _step(recorder).reduce_gradients(grads[1], "critic", values[1], counts[1])
    assert recorder.buffer.dtype == np.float32 and recorder.buffer.size == 15 + 1 + 2
    reduced, averaged, summed = _step(_Adder(recorder.buffer)).reduce_gradients(grads[0], "critic", values[0],
                                                                                 counts[0])
    assert summed.dtype == np.float64 and summed.tolist() == [13.0, 32.0]
    np.testing.assert_allclose(reduced[0], (grads[0][0] + grads[1][0]) / 2, rtol=1e-6)
    np.testing.assert_allclose(averaged["loss/critic"], (values[0]["loss/critic"] + values[1]["loss/critic"]) / 2,
                               rtol=1e-6)
    # Sums of signs anywhere up to the float32 buffer's exact range stay exact.
    big = [np.array([-(2.0 ** 23) + 1, 2.0 ** 23]), np.array([2.0 ** 23 - 3, 2.0 ** 23])]
    recorder = _Recorder()
    _step(recorder).reduce_gradients(grads[1], "critic", values[1], big[1])
    _, _, summed = _step(_Adder(recorder.buffer)).reduce_gradients(grads[0], "critic", values[0], big[0])
    assert summed.tolist() == [-2.0, 2.0 ** 24]


def test_summed_counts_of_the_slices_adapt_p_as_one_process_on_the_whole_batch(rng):
    """Counting each slice and adapting with the sum of the counts (what the data-parallel step
    does) gives the p and r_t one process gets from the whole batch, bit for bit."""
    from gpgan.augment import ADA

    batches = [rng.standard_normal((8, 1)).astype(np.float32) for _ in range(7)]
    whole, sliced = ADA(p=0.5, interval=3, speed_kimg=0.1), ADA(p=0.5, interval=3, speed_kimg=0.1)
    for d in batches:
        whole.observe(d)
        sliced.adapt(sum(sliced.count(part) for part in np.split(d, 4)))
    assert sliced.state_dict() == whole.state_dict()
    assert whole.state_dict()["p"] != 0.5 and whole.state_dict()["batches"] == 1  # adapted twice, one pending
    assert ADA(mode="fixed").count(batches[0]) is None


def test_pick_gpu_takes_the_local_rank_or_the_one_visible_gpu():
    assert [pick_gpu(r, 4, 8) for r in range(4)] == [0, 1, 2, 3]
    assert pick_gpu(3, 4, 1) == 0  # CUDA_VISIBLE_DEVICES set per process
    with pytest.raises(RuntimeError, match="4 processes on this machine but 2 GPUs"):
        pick_gpu(3, 4, 2)


# ---------------------------------------------------------------------------------------------
# mpiexec -n 2 gpgan-train

@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A one-process run and two two-process runs of the same tiny config (12 steps)."""
    if _mpi_missing():
        pytest.skip(_mpi_missing())
    out = tmp_path_factory.mktemp("parallel")
    args = [QUICKSTART, *sets(TINY + RANDOM_PENALTY + ["train.steps=12"]), "--out", str(out), "--quiet"]
    train(1, *args, "--name", "one", check=0)
    two = train(2, *args, "--name", "two", check=0)
    train(2, *args, "--name", "again", check=0)
    return out, two


@needs_mpi
def test_two_processes_compute_what_one_computes_at_the_first_step(runs):
    out, _ = runs
    one, two = metrics(out / "quickstart" / "one"), metrics(out / "quickstart" / "two")
    assert [r["step"] for r in one] == [r["step"] for r in two] == list(range(1, 13))
    first_one, first_two = one[0], two[0]
    assert first_one.keys() == first_two.keys() and first_one["penalty"] > 0
    for key in ("loss/critic", "loss/generator", "penalty", "penalty/term", "grad_norm/real", "grad_norm/fake"):
        np.testing.assert_allclose(first_two[key], first_one[key], rtol=1e-5, err_msg=key)
    assert first_two["lr/critic"] == first_one["lr/critic"]


@needs_mpi
def test_two_process_runs_are_bit_identical(runs):
    out, _ = runs
    a, b = out / "quickstart" / "two", out / "quickstart" / "again"
    assert metrics(a) == metrics(b)
    assert_same_checkpoints(a, b)


@needs_mpi
def test_rank_0_alone_writes_one_run_folder(runs):
    out, two = runs
    assert sorted(os.listdir(out / "quickstart")) == ["again", "one", "two"]
    run = out / "quickstart" / "two"
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["world_size"] == 2 and manifest["communicator"] == "mpi"
    assert [p["rank"] for p in manifest["processes"]] == [0, 1]
    assert all(p["device"] == "cpu" and p["host"] for p in manifest["processes"])
    assert json.loads((run / "final.json").read_text())["steps"] == 12
    assert [f for f in os.listdir(run) if f.startswith("events.out.tfevents")]  # one TensorBoard log
    assert len([f for f in os.listdir(run) if f.startswith("events.out.tfevents")]) == 1
    assert sorted(os.listdir(run / "samples")) == ["final.png", "step_000006.png", "step_000012.png"]
    assert two.stderr.count("finished 12 steps") == 1  # one process speaks


@needs_mpi
def test_two_processes_resume_exactly(runs, tmp_path):
    out, _ = runs
    args = [QUICKSTART, *sets(TINY + RANDOM_PENALTY + ["train.steps=12"]), "--out", str(tmp_path), "--quiet"]
    stopped = train(2, *args, "--name", "r", "--set", "train.stop_after=6", check=130)
    assert stopped.stderr.count("Resume with") == 1
    run = tmp_path / "quickstart" / "r"
    assert sorted(os.listdir(run / "checkpoints")) == ["best.npz", "ckpt_000004.npz", "ckpt_000006.npz"]
    train(2, "--resume", str(run), "--quiet", check=0)
    assert metrics(run) == metrics(out / "quickstart" / "two")
    reference = checkpoint_arrays(out / "quickstart" / "two" / "checkpoints" / "ckpt_000012.npz")
    resumed = checkpoint_arrays(run / "checkpoints" / "ckpt_000012.npz")
    for k in reference:
        np.testing.assert_array_equal(resumed[k], reference[k], err_msg=k)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["resumes"][0]["from_step"] == 6 and manifest["resumes"][0]["world_size"] == 2


@needs_mpi
def test_ctrl_c_during_rank_0s_evaluation_stops_every_process_and_a_resume_does_it_first(tmp_path):
    """Rank 0 alone evaluates; a Ctrl-C there leaves its evaluation off at the next batch and
    every process stops at that step, with the step's checkpoint recording the evaluation it
    owes; the resume does it first and ends as the uninterrupted run."""
    weights = tmp_path / "weights.npz"
    weights.write_bytes(b"stand-in")
    write_cifar_fixture(tmp_path / "cifar")
    env = dict(HOME=str(tmp_path / "home"), GPGAN_INCEPTION_WEIGHTS=str(weights))
    # Evaluations at steps 2, 4 and 6 (two batches each on rank 0), checkpoints at 3 and 6.
    args = [R1_CIFAR, *sets(TINY_DCGAN + ["model.generator_options.norm=none", "train.steps=6",
                                          "train.checkpoint_interval=3", "train.sample_interval=0",
                                          "train.eval_interval=2", "eval.metrics=fid", "eval.samples=4",
                                          "eval.batch_size=2", f"data.root={tmp_path / 'cifar'}"]),
            "--out", str(tmp_path), "--quiet"]
    program = os.path.join(PROGRAMS, "interrupted_evaluation.py")
    train(2, *args, "--name", "straight", program=[program, "0"], check=0, env=env)  # caches the reference
    proc = train(2, *args, "--name", "cut", program=[program, "3"], check=130, env=env)
    assert proc.stderr.count("Resume with") == 1
    assert "at step 4; its evaluation was left off and a resume does it first" in proc.stderr
    cut, straight = tmp_path / "r1_cifar" / "cut", tmp_path / "r1_cifar" / "straight"
    assert [r["step"] for r in metrics(cut)] == [1, 2, 3]  # logged at every step (TINY_DCGAN)
    assert sorted(os.listdir(cut / "checkpoints")) == ["best.npz", "ckpt_000003.npz", "ckpt_000004.npz"]
    assert read_meta(cut / "checkpoints" / "ckpt_000004.npz")["owed"]["record"]["step"] == 4
    train(2, "--resume", str(cut), "--quiet", program=[program, "0"], check=0, env=env)
    assert metrics(cut) == metrics(straight)
    assert "owed" not in read_meta(cut / "checkpoints" / "ckpt_000004.npz")  # rewritten once done
    summary = lambda run: {k: v for k, v in json.loads((run / "final.json").read_text()).items()  # noqa: E731
                           if k != "wall_time_s"}
    assert summary(cut) == summary(straight)
    for name in ("best.npz", "ckpt_000006.npz"):
        arrays_cut = checkpoint_arrays(cut / "checkpoints" / name)
        arrays_straight = checkpoint_arrays(straight / "checkpoints" / name)
        assert arrays_cut.keys() == arrays_straight.keys()
        for k in arrays_cut:
            np.testing.assert_array_equal(arrays_cut[k], arrays_straight[k], err_msg=f"{name}: {k}")


@pytest.fixture(scope="module")
def ada_runs(tmp_path_factory):
    """ADA with an adaptive p (8 steps) in one process, and in two with each rank's ADA state
    recorded after every step."""
    if _mpi_missing():
        pytest.skip(_mpi_missing())
    out = tmp_path_factory.mktemp("parallel_ada")
    write_cifar_fixture(out / "cifar")
    args = [R1_CIFAR, *sets(ADA_RUN + [f"data.root={out / 'cifar'}"]), "--out", str(out), "--quiet"]
    train(1, *args, "--name", "one", check=0)
    (out / "dump").mkdir()
    train(2, *args, "--name", "two", program=[os.path.join(PROGRAMS, "ada_ranks.py"), str(out / "dump")], check=0)
    return out, args


@needs_mpi
def test_two_processes_adapt_adas_p_from_the_global_batch_as_one_process_does(ada_runs):
    out, _ = ada_runs
    one, two = metrics(out / "r1_cifar" / "one"), metrics(out / "r1_cifar" / "two")
    assert [r["step"] for r in one] == [r["step"] for r in two] == list(range(1, 11))
    # The sign counts are whole numbers, summed exactly over the processes: while the critic's
    # outputs have the same signs in both runs, p and r_t are equal bit for bit. The outputs differ
    # by float32 rounding at first and then drift (a sign near 0 flips within 10 steps here), so
    # the first two adjustments are compared.
    for r1, r2 in zip(one[:4], two[:4]):
        assert (r2["augment/p"], r2["augment/rt"]) == (r1["augment/p"], r1["augment/rt"]), r2["step"]
    # Over the whole two-process run: each adjustment counted the 8 images of both processes (a
    # process counting its own 4 would move p by half as much, with r_t in quarters).
    p, rt = 0.5, None
    for r in two:
        if r["step"] % 2 == 0:
            rt = r["augment/rt"]
            assert rt * 8 == round(rt * 8) and -1 <= rt <= 1
            p = min(max(p + np.sign(rt - ADA_TARGET) * ADA_STEP, 0.0), 1.0)
        assert r["augment/rt"] == rt and r["augment/p"] == pytest.approx(p, abs=1e-12), r["step"]
    assert len({r["augment/p"] for r in two}) > 2 and len({r["augment/rt"] for r in two}) > 2


@needs_mpi
def test_every_process_holds_the_same_ada_state(ada_runs):
    out, _ = ada_runs
    texts = [(out / "dump" / f"rank{r}.json").read_text() for r in (0, 1)]
    assert texts[0] == texts[1]  # p, r_t (NaN before the first adjustment) and the partial sums, after every step
    ranks = [json.loads(text) for text in texts]
    assert [step for step, _ in ranks[0]] == list(range(1, 11))
    states = dict((step, state) for step, state in ranks[1])
    assert states[1]["images"] == 4 and states[1]["batches"] == 1  # both processes' images, pending
    records = metrics(out / "r1_cifar" / "two")
    assert [states[r["step"]]["p"] for r in records] == [r["augment/p"] for r in records]
    checkpoints = sorted(os.listdir(out / "r1_cifar" / "two" / "checkpoints"))
    assert "ckpt_000009.npz" in checkpoints
    for name in checkpoints:  # what rank 0 saved is what rank 1 holds
        meta = read_meta(out / "r1_cifar" / "two" / "checkpoints" / name)
        assert meta["augment"] == states[meta["step"]], name


@needs_mpi
def test_two_processes_resume_adaptive_ada_exactly(ada_runs, tmp_path):
    out, args = ada_runs
    args = list(args)
    args[args.index("--out") + 1] = str(tmp_path)
    train(2, *args, "--name", "r", "--set", "train.stop_after=5", check=130)
    run = tmp_path / "r1_cifar" / "r"
    assert read_meta(run / "checkpoints" / "ckpt_000005.npz")["augment"]["batches"] == 1  # mid-interval
    train(2, "--resume", str(run), "--quiet", check=0)
    reference = out / "r1_cifar" / "two"
    assert metrics(run) == metrics(reference)
    assert_same_checkpoints(run, reference)
    for name in os.listdir(reference / "checkpoints"):  # p, r_t and the partial sums
        resumed, straight = (read_meta(r / "checkpoints" / name)["augment"] for r in (run, reference))
        assert resumed == straight, name


@needs_mpi
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_mpiexec_stops_every_process_at_one_step_with_one_checkpoint(tmp_path, sig):
    args = [QUICKSTART, *sets(TINY + ["train.steps=5000", "train.checkpoint_interval=0", "train.sample_interval=0",
                                      "train.eval_interval=0"]), "--out", str(tmp_path), "--name", "s", "--quiet"]
    proc = subprocess.Popen(_train_command(2, args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env(), stdin=subprocess.DEVNULL)
    run = tmp_path / "quickstart" / "s"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (
            (run / "metrics.jsonl").exists() and len((run / "metrics.jsonl").read_text().splitlines()) >= 3):
        time.sleep(0.1)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    checkpoints = sorted(os.listdir(run / "checkpoints"))
    assert len(checkpoints) == 1, checkpoints
    step = int(checkpoints[0][5:11])
    assert 3 <= step < 5000 and metrics(run)[-1]["step"] <= step
    assert stderr.count("Resume with") == 1 and f"at step {step}" in stderr
    assert f"Resume with: mpiexec -n 2 gpgan-train --resume {run}" in stderr  # the same N resumes exactly
    train(2, "--resume", str(run), "--set", f"train.stop_after={step + 3}", "--quiet", check=130)
    assert metrics(run)[-1]["step"] == step + 3 and (run / "checkpoints" / f"ckpt_{step + 3:06d}.npz").exists()


@needs_mpi
@pytest.mark.parametrize("mode", ["raise:3", "kill:3"])
def test_a_process_that_dies_takes_the_run_down(tmp_path, mode):
    args = [QUICKSTART, *sets(TINY + ["train.steps=50"]), "--out", str(tmp_path), "--name", "f", "--quiet"]
    started = time.monotonic()
    proc = train(2, *args, program=[os.path.join(PROGRAMS, "faulty_rank.py"), mode], timeout=120)
    assert proc.returncode != 0 and time.monotonic() - started < 100
    assert not (tmp_path / "quickstart" / "f" / "final.json").exists()
    if mode.startswith("raise"):
        assert "rank 1 of 2: error: test: rank 1 fails in step 3" in proc.stderr


@needs_mpi
def test_a_process_that_cannot_start_stops_every_process_before_anything_is_written(tmp_path):
    args = [QUICKSTART, *sets(TINY + ["train.steps=5"]), "--out", str(tmp_path), "--name", "b", "--quiet"]
    proc = train(2, *args, program=[os.path.join(PROGRAMS, "faulty_rank.py"), "build"], check=1)
    assert proc.stderr.count("error: rank 1: test: rank 1 sees no data set") == 1
    assert not (tmp_path / "quickstart").exists()


@needs_mpi
def test_ranks_on_one_machine_split_its_cores_between_them():
    """Under mpiexec -n 2 (MPICH's Hydra pins nothing) each rank takes half the cores for BLAS and
    for gpgan's array passes, instead of every rank taking all of them (the process settings,
    restarting each rank once to have them)."""
    from gpgan.backend.core_share import BLAS_THREAD_VARS, available_cores

    env = _env()
    for var in BLAS_THREAD_VARS + ("GPGAN_NUM_THREADS",):
        env.pop(var, None)
    code = ("import json, os, gpgan; gpgan.configure_process(restart=True); "
            "print(json.dumps([gpgan.backend.get_num_threads()] + "
            f"[os.environ.get(v) for v in {BLAS_THREAD_VARS!r}]))")
    proc = subprocess.run([_mpiexec(), "-n", "2", sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    share = max(1, available_cores() // 2)
    # mpiexec forwards the two ranks' output in chunks that may share a line: take each list.
    reports = [json.loads(m) for m in re.findall(r"\[[^\]]*\]", proc.stdout)]
    assert reports == [[share] + [str(share)] * 3] * 2, proc.stdout


@needs_mpi
def test_a_batch_that_does_not_split_exits_2_naming_both(tmp_path):
    proc = train(2, QUICKSTART, *sets(TINY + ["train.batch_size=33"]), "--out", str(tmp_path), check=2)
    assert proc.stderr.count("train.batch_size 33 does not split over 2 processes") == 1
    assert not (tmp_path / "quickstart").exists()


# ---------------------------------------------------------------------------------------------
# NCCL

@pytest.mark.cuda
@needs_mpi
def test_nccl_sums_and_broadcasts_on_every_gpu():
    import cupy

    n = cupy.cuda.runtime.getDeviceCount()
    proc = subprocess.run([_mpiexec(), "-n", str(n), sys.executable, os.path.join(PROGRAMS, "nccl_collectives.py")],
                          capture_output=True, text=True, env=_env(), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = sorted(line.split() for line in proc.stdout.splitlines() if line.startswith("ok "))
    assert [(int(r), int(s)) for _, r, s, _ in lines] == [(r, n) for r in range(n)]
    assert sorted(int(g) for *_, g in lines) == list(range(n))
