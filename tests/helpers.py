"""Helpers shared by several test files (no test file imports another): paths and the tiny
configs of CLI runs, running gpgan-train and reading its runs, a stand-in trainer for sweeps and
reading their results.csv, CIFAR-10 fixture files, the
convolution cases that the kernels' tests share, the masked functions' inputs, a stand-in
feature network, and the values and gradients (to second order) on which two implementations of
an operation are compared."""
import csv
import json
import os
import pickle
import subprocess
import sys

import numpy as np

import gpgan
import gpgan.functions as F
from gpgan.data.cifar import TEST_FILES, TRAIN_FILES
from gpgan.train.monitor import TIMING_KEYS


# -- paths, tiny configs, gpgan-train runs ------------------------------------------------------
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUICKSTART = os.path.join(ROOT, "configs", "quickstart.yaml")

# The quickstart made tiny: small MLPs, few steps, frequent logs / checkpoints / evaluations.
TINY = ["model.generator_options.width=16", "model.critic_options.width=16", "train.batch_size=32",
        "train.log_interval=2", "train.checkpoint_interval=4", "train.sample_interval=6",
        "train.eval_interval=6", "train.eval_samples=200"]


def gpgan_train(*args, cwd=None, check=None):
    """Run ``python -m gpgan.cli.train *args`` on this checkout; with ``check``, assert its exit status."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, "-m", "gpgan.cli.train", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=300)
    if check is not None:
        assert proc.returncode == check, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


def sets(items):
    """``--set`` options for each override in ``items``."""
    return [a for item in items for a in ("--set", item)]


def metrics(run_dir):
    """The records of a run's metrics.jsonl, less their timings (which differ between equal runs)."""
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f]
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in records]


def final_arrays(run_dir):
    """The name and arrays of a run's latest checkpoint."""
    ckpts = sorted(os.listdir(os.path.join(run_dir, "checkpoints")))
    with np.load(os.path.join(run_dir, "checkpoints", ckpts[-1]), allow_pickle=False) as f:
        return ckpts[-1], {k: f[k] for k in f.files if k != "__meta__"}


def assert_same_weights(a, b):
    """Two runs' latest checkpoints are the same step and hold the same arrays, bit for bit."""
    name_a, arrays_a = final_arrays(a)
    name_b, arrays_b = final_arrays(b)
    assert name_a == name_b and arrays_a.keys() == arrays_b.keys()
    assert any(k.startswith("module/generator/") for k in arrays_a)
    for k in arrays_a:
        np.testing.assert_array_equal(arrays_a[k], arrays_b[k], err_msg=k)


# -- sweeps: a stand-in trainer, results.csv ----------------------------------------------------
# A stand-in for gpgan-train. Metrics: modes = 10 + seed + weight, high_quality = 0.5 + 0.1*seed,
# reverse_kl = 1 / (1 + seed); evaluations at steps 1..steps with modes growing to the final value
# except one early spike (final + 5 at step 1) so that "best" differs from "final".
FAKE_TRAINER = r'''
import json, os, sys
from pathlib import Path
import yaml
from PIL import Image

args = sys.argv[1:]
if args[0] == "--resume":
    run = Path(args[1])
    state = json.loads((run / "fake_state.json").read_text())
    with open(run / "calls.txt", "a") as fh:
        fh.write("resume\n")
    failure = run.parent.parent.parent / "logs" / run.name / "failure.json"
    if failure.exists():  # a report made now would call this running run interrupted
        (run / "resumed_beside_a_failure_record.json").write_text(failure.read_text())
else:
    config, sets, out, name, device = args[0], {}, None, None, None
    i = 1
    while i < len(args):
        if args[i] == "--set":
            k, v = args[i + 1].split("=", 1); sets[k] = yaml.safe_load(v); i += 2
        elif args[i] == "--out":
            out = args[i + 1]; i += 2
        elif args[i] == "--name":
            name = args[i + 1]; i += 2
        elif args[i] == "--device":
            device = args[i + 1]; i += 2
        else:
            sys.exit("fake trainer: unexpected argument " + args[i])
    if sets.get("penalty.weight", 0) >= 1000:  # a valid config that fails in training
        print("step 0 ok", file=sys.stderr)
        print("gpgan-train: error: non-finite loss/critic (inf) at step 1", file=sys.stderr)
        sys.exit(1)
    run = Path(out) / Path(config).stem / name
    if run.exists():
        sys.exit("fake trainer: run folder exists: " + str(run))
    run.mkdir(parents=True)
    state = {"sets": sets, "device": device, "cuda_visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
             "omp": os.environ.get("OMP_NUM_THREADS")}
    (run / "fake_state.json").write_text(json.dumps(state))
    with open(run / "calls.txt", "a") as fh:
        fh.write("start\n")
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "ckpt_1.npz").write_bytes(b"fake")
    if os.environ.get("FAKE_CRASH"):
        sys.exit("fake trainer: crashed after the first checkpoint")
    if os.environ.get("FAKE_SLEEP"):  # train "forever"; Ctrl-C exits 130 like gpgan-train
        import signal, time
        hits = []
        signal.signal(signal.SIGINT, lambda *a: hits.append(1))
        while not hits:
            time.sleep(0.05)
        time.sleep(0.5)  # finishing the step; a second Ctrl-C meanwhile stops gpgan-train unsaved
        if len(hits) > 1:
            print("fake trainer: interrupted twice, stopped without a checkpoint", file=sys.stderr)
            sys.exit(1)
        print("fake trainer: interrupted", file=sys.stderr)
        sys.exit(130)

sets = state["sets"]
seed, weight = sets.get("train.seed", 0), sets.get("penalty.weight", 0.0)
final = {"eval/modes": 10 + seed + weight, "eval/high_quality": 0.5 + 0.1 * seed, "eval/reverse_kl": 1 / (1 + seed)}
steps = 3 + (seed if os.environ.get("FAKE_SEED_LONGER") else 0)  # seed 1 evaluates once more
with open(run / "metrics.jsonl", "w") as fh:
    for step in range(1, steps + 1):
        row = {"step": step, "loss/critic": 0.1}
        row["eval/modes"] = final["eval/modes"] + (5 if step == 1 else step - steps)
        row["eval/high_quality"] = final["eval/high_quality"]
        row["eval/reverse_kl"] = final["eval/reverse_kl"] + (steps - step)
        if os.environ.get("FAKE_EVAL_TIME"):  # an image run's evaluation timings (seconds)
            row["time_eval_features"], row["time_eval_scores"] = 0.375, 0.125
        fh.write(json.dumps(row) + "\n")
(run / "samples").mkdir(exist_ok=True)
shade = int(40 * seed + 20 * weight) % 256
size = tuple(int(n) for n in os.environ.get("FAKE_SAMPLE_SIZE", "40x30").split("x"))
Image.new("RGB", size, (shade, 100, 200)).save(run / "samples" / "final.png")
if os.environ.get("FAKE_STEP_SAMPLES"):  # samples at every evaluation, as sample_interval = eval_interval
    for step in range(1, steps):
        Image.new("RGB", size, (shade, 10 * step, 50)).save(run / "samples" / f"step_{step:06d}.png")
print("training done")
(run / "final.json").write_text(json.dumps({"status": "finished", "steps": steps, "wall_time_s": 1.5 + seed,
                                            "final": final, "best": final}))
'''


def read_csv(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def write_cifar_fixture(folder, per_batch=4):
    """Random CIFAR-10 batches (all labels 0) in the official format, ``per_batch`` images each."""
    rng = np.random.default_rng(0)
    os.makedirs(folder, exist_ok=True)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        with open(os.path.join(folder, name), "wb") as f:
            pickle.dump({b"data": rng.integers(0, 256, size=(per_batch, 3072), dtype=np.uint8),
                         b"labels": [0] * per_batch}, f, protocol=2)


TINY_DCGAN = ["model.generator_options.width=2", "model.generator_options.latent_dim=8",
              "model.critic_options.width=2", "train.batch_size=4", "train.n_samples=4",
              "train.log_interval=1", "train.sample_interval=2", "train.checkpoint_interval=2", "data.hflip=true"]


# -- CIFAR-10 files in the official format ----------------------------------------------------
def write_cifar(folder, per_batch=6, seed=0, protocol=2):
    """Official-format batches (dict with bytes keys, uint8 (N, 3072)); returns (train, test) arrays."""
    rng = np.random.default_rng(seed)
    os.makedirs(folder, exist_ok=True)
    out = {}
    for name in TRAIN_FILES + TEST_FILES:
        data = rng.integers(0, 256, size=(per_batch, 3072), dtype=np.uint8)
        labels = [int(v) for v in rng.integers(0, 10, size=per_batch)]
        with open(os.path.join(folder, name), "wb") as f:
            pickle.dump({b"batch_label": name.encode(), b"labels": labels, b"data": data,
                         b"filenames": [b"x.png"] * per_batch}, f, protocol=protocol)
        out[name] = (data, np.array(labels))
    train = np.concatenate([out[n][0] for n in TRAIN_FILES]).reshape(-1, 3, 32, 32)
    test = out["test_batch"][0].reshape(-1, 3, 32, 32)
    labels = np.concatenate([out[n][1] for n in TRAIN_FILES])
    return train, test, labels


# -- convolution cases (N, C, H, W, ...) and memory layouts --------------------------------------
CONV_CASES = [
    # (N, C, H, W, O, k, stride, padding, dilation, groups)
    (2, 3, 5, 5, 2, 3, 1, 0, 1, 1),
    (2, 2, 6, 5, 4, 3, 2, 1, 1, 2),
    (1, 3, 7, 6, 2, (2, 3), (2, 1), (1, 2), (2, 1), 1),
    (2, 4, 5, 7, 2, 2, 1, 1, 2, 2),
    (2, 3, 4, 5, 2, 1, 1, 1, 1, 1),    # 1x1 with padding: the padded input is the columns
    # depthwise (one channel a group: the direct kernel): R3GAN's k4 s2 p1 resampling, and
    # dilation with uneven kernel, stride and padding
    (2, 4, 6, 6, 4, 4, 2, 1, 1, 4),
    (2, 3, 7, 6, 3, (2, 3), (2, 1), (1, 0), (2, 1), 3),
]


CONVT_CASES = [
    # (N, Cin, H, W, Cout, k, stride, padding, output_padding, groups, dilation)
    (2, 3, 3, 3, 2, 3, 1, 0, 0, 1, 1),
    (2, 2, 3, 4, 4, 3, 2, 1, 1, 2, 1),
    (1, 2, 3, 3, 3, (2, 3), (2, 3), (0, 1), (1, 2), 1, 1),
    (2, 4, 3, 2, 2, 2, 1, 1, 1, 2, 2),   # output_padding >= stride, allowed below dilation
    # whole stride blocks of the kernel, a partial last block, kernels smaller than the stride,
    # and dilation with stride.
    (2, 3, 4, 4, 2, 4, 2, 1, 0, 1, 1),   # DCGAN's k4 s2 p1
    (1, 2, 3, 3, 2, 1, 2, 0, 1, 1, 1),   # k1 s2
    (1, 2, 3, 2, 2, (5, 2), (2, 3), (2, 0), (1, 2), 1, 1),  # k5 s2 (partial block), k2 s3
    (1, 2, 3, 3, 2, 3, 2, 1, 1, 1, 2),   # dilation 2 with stride 2
    # fewer input than output channels: the gather (sub-pixel) kernel runs
    (2, 2, 4, 5, 5, 3, 1, 1, 0, 1, 1),   # stride 1
    (1, 2, 3, 3, 4, 4, 2, 1, 1, 1, 1),   # k4 s2 p1, output_padding
    (1, 2, 3, 2, 6, (3, 2), (3, 2), (1, 0), (2, 1), 2, 1),  # groups, stride 3
    # depthwise (the direct kernel): R3GAN's k4 s2 p1 up-sampling; output padding with dilation
    (2, 4, 3, 3, 4, 4, 2, 1, 0, 4, 1),
    (1, 3, 3, 2, 3, (3, 2), 2, (1, 0), (1, 1), 3, 2),
]


# output paddings, odd sizes, groups, dilation, and kernels smaller than the stride (output
# phases that no tap reaches).
KERNEL_CASES = [
    # (N, Cin, H, W, Cout, k, stride, padding, output_padding, groups, dilation)
    (2, 3, 4, 4, 5, 4, 2, 1, 0, 1, 1),          # DCGAN's k4 s2 p1
    (1, 2, 3, 5, 3, 4, 2, 1, 1, 1, 1),          # odd width, output_padding
    (1, 2, 3, 3, 2, 3, 1, 1, 0, 1, 1),          # stride 1: the flipped-kernel convolution
    (1, 2, 4, 3, 3, 3, 1, 2, 0, 1, 1),          # stride 1, padding k - 1: no padding left
    (1, 2, 3, 4, 2, (3, 5), (3, 2), (1, 2), (2, 1), 1, 1),
    (1, 2, 3, 3, 2, 1, 2, 0, 1, 1, 1),          # k1 s2: a phase without taps
    (1, 2, 2, 3, 2, (2, 1), (3, 3), (0, 1), (2, 0), 1, 1),   # k < stride on both axes
    (2, 4, 3, 3, 6, 4, 2, 1, 1, 2, 1),          # groups
    (1, 2, 3, 3, 2, 3, 2, 1, 1, 1, 2),          # dilation 2, stride 2
    (1, 3, 3, 2, 2, 3, 3, 2, 1, 1, 2),          # dilation 2, stride 3 (taps of a phase 2 apart)
    (1, 4, 5, 5, 17, 3, 2, 0, 0, 1, 1),         # 17 output channels: the channels-last scatter
]


# Stride-1 convolutions with few output channels run on the other kernel (the scatter form for
# conv2d, the windows of grad_output for its weight gradient); the last case's padding exceeds
# dilation * (k - 1), where that identity does not hold and the direct kernels run.
FEW_OUTPUTS_CASES = [
    # (N, C, H, W, O, k, padding, dilation)
    (2, 5, 6, 5, 2, 3, 1, 1),
    (1, 7, 5, 6, 3, (3, 2), (2, 0), 1),
    (2, 5, 7, 6, 2, 3, 1, 2),
    (1, 5, 4, 4, 2, 3, 3, 1),
]


def in_layout(x, layout):
    """The values of ``x`` (N, C, H, W) in NCHW, channels-last (NHWC) or (C, N, H, W) memory."""
    if layout == "channels_last":
        return np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    if layout == "cnhw":
        return np.ascontiguousarray(x.transpose(1, 0, 2, 3)).transpose(1, 0, 2, 3)
    return np.ascontiguousarray(x)


# -- the masked (piecewise-linear) functions and inputs away from their kinks -------------------
def away_from(rng, shape, points, gap=0.1):
    """Random normal values kept at least ``gap`` away from every kink in ``points``."""
    x = rng.standard_normal(shape) * 2.0
    for p in points:
        close = np.abs(x - p) < gap
        x[close] = p + np.where(x[close] >= p, gap, -gap) * 2
    return x


def distinct(rng, shape, gap=0.1):
    """Values at least ``gap`` apart (a max-pooling window holds no tie), in random positions."""
    n = int(np.prod(shape))
    return (rng.permutation(n).reshape(shape) - n / 2) * gap


def separated_pair(rng, shape, gap=0.1):
    """Two arrays whose entries differ by at least ``gap`` (maximum and minimum have no tie)."""
    a = rng.standard_normal(shape)
    b = a + rng.choice([-1.0, 1.0], shape) * rng.uniform(gap, 1.0, shape)
    return a, b


# name -> (function of its inputs, inputs away from the kinks). Every input is differentiable,
# and the function reaches each of them only through its mask in the first derivative.
MASKED = {
    "relu": (F.relu, lambda rng: [away_from(rng, (3, 4), [0.0])]),
    "leaky_relu": (lambda x: F.leaky_relu(x, 0.2), lambda rng: [away_from(rng, (3, 4), [0.0])]),
    "leaky_relu_negative_slope": (lambda x: F.leaky_relu(x, -0.3), lambda rng: [away_from(rng, (3, 4), [0.0])]),
    "abs": (F.abs, lambda rng: [away_from(rng, (3, 4), [0.0])]),
    "clip": (lambda x: F.clip(x, -0.5, 1.0), lambda rng: [away_from(rng, (3, 4), [-0.5, 1.0])]),
    "clip_max_only": (lambda x: F.clip(x, max=0.2), lambda rng: [away_from(rng, (3, 4), [0.2])]),
    "maximum": (F.maximum, lambda rng: list(separated_pair(rng, (3, 4)))),
    "minimum": (F.minimum, lambda rng: list(separated_pair(rng, (3, 4)))),
    # overlapping, padded windows: an input can win several windows or none
    "max_pool2d": (lambda x: F.max_pool2d(x, 3, 2, 1), lambda rng: [distinct(rng, (2, 2, 5, 6))]),
}


# -- a stand-in for the Inception network ------------------------------------------------------
class PixelNetwork:
    """Features from the pixels: the reference logic does not need the real network."""

    weights_id = "feedbeef" * 8
    features_id = weights_id[:12]
    dtype = np.float32
    has_classifier = True
    pool3_width = 8  # (the real network's: 2048)

    def __init__(self):
        self.seen = 0

    def features(self, images, batch_size=50, progress=False, before_batch=None):
        """float32 features, as the real network's: the reference cache keeps float32, so a test
        sees the same numbers whether an earlier test cached them or not. One :meth:`batch_features`
        a batch, each after ``before_batch()``, as the real network's loop."""
        parts = []
        for start in range(0, len(images), batch_size):
            if before_batch is not None:
                before_batch()
            parts.append(self.batch_features(images[start:start + batch_size]))
        return {key: np.concatenate([part[key] for part in parts]) for key in parts[0]}

    def batch_features(self, images):
        self.seen += len(images)
        pool3 = (images.reshape(len(images), -1)[:, :8].astype(np.float64) / 255).astype(self.dtype)
        return {"pool3": pool3, "logits": pool3 @ (np.arange(24.0).reshape(8, 3) / 10).astype(self.dtype)}


# -- values and gradients two implementations are compared on -------------------------------------
def pair(v):
    """``(v, v)`` for a number, ``tuple(v)`` for a pair: how the functions read kernel, stride, padding."""
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


def _probed(fn, arrays):
    """Leaf Variables of ``arrays``, fn's output on them, and the fixed weights ``r`` of the scalar
    <fn, r> whose gradients the comparisons take."""
    vs = [gpgan.Variable(a, requires_grad=True) for a in arrays]
    y = fn(*vs)
    r = gpgan.Variable(np.cos(np.arange(y.size, dtype=y.dtype)).reshape(y.shape))
    return vs, y, r


def values_and_grads(fn, arrays):
    """fn's value, the gradient of <fn, r> w.r.t. every input, and the gradient of the squared
    norm of those gradients (second order), as arrays."""
    vs, y, r = _probed(fn, arrays)
    grads = gpgan.grad((y * r).sum(), vs, create_graph=True)
    second = gpgan.grad(sum((g * g).sum() for g in grads), vs, allow_unused=True)  # a bias has none
    return [y.data] + [g.data for g in grads] + [g.data for g in second if g is not None]


def first_order_grads(fn, arrays):
    """fn's value and the gradient of <fn, r> w.r.t. every input, with no graph recorded (the
    backward of a training step's last pass), as arrays."""
    vs, y, r = _probed(fn, arrays)
    return [y.data] + [g.data for g in gpgan.grad((y * r).sum(), vs)]
