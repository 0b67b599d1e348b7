"""gpgan-train with augmentations, end to end on a fixture CIFAR-10 folder with tiny DCGANs:
DiffAugment runs, and ADA with an adaptive p (R1 through the augmentation) stopped and resumed
equals the uninterrupted run bit for bit, p and r_t included."""
import json
import os

import numpy as np
import pytest

from gpgan.checkpoint import read_meta
from helpers import ROOT, TINY_DCGAN, assert_same_weights, gpgan_train, metrics, sets, write_cifar_fixture

CONFIG = os.path.join(ROOT, "configs", "r1_cifar.yaml")
# p moves by 4 images / (0.04 * 1000) = 0.1 at each adjustment, every minibatch, from 0.5: visible in 6 steps.
ADA = ["augment.type=ada", "augment.p=0.5", "augment.interval=1", "augment.speed_kimg=0.04",
       "augment.penalty_points=unaugmented"]


def test_diffaugment_run(tmp_path):
    write_cifar_fixture(tmp_path / "cifar")
    args = [CONFIG, *sets(TINY_DCGAN + [f"data.root={tmp_path / 'cifar'}", "train.steps=3", "augment.type=diffaugment"]),
            "--out", str(tmp_path / "exp"), "--quiet"]
    gpgan_train(*args, "--name", "a", check=0)
    gpgan_train(*args, "--name", "plain", "--set", "augment.type=none", check=0)
    run, plain = tmp_path / "exp" / "r1_cifar" / "a", tmp_path / "exp" / "r1_cifar" / "plain"
    records = metrics(run)
    assert [r["step"] for r in records] == [1, 2, 3] and "augment/p" not in records[0]
    assert all(np.isfinite(r["loss/critic"]) for r in records)
    assert records != metrics(plain)  # the critic saw other images


def test_ada_run_resumes_exactly(tmp_path):
    write_cifar_fixture(tmp_path / "cifar")
    common = [CONFIG, *sets(TINY_DCGAN + [f"data.root={tmp_path / 'cifar'}", "train.steps=6", "train.critic_steps=2",
                                          *ADA]),
              "--out", str(tmp_path / "exp"), "--quiet"]
    gpgan_train(*common, "--name", "straight", check=0)
    gpgan_train(*common, "--name", "resumed", "--set", "train.stop_after=3", check=130)
    run = tmp_path / "exp" / "r1_cifar" / "resumed"
    meta = read_meta(run / "checkpoints" / "ckpt_000003.npz")
    assert set(meta["augment"]) == {"p", "rt", "signs", "images", "batches"}
    gpgan_train("--resume", str(run), "--quiet", check=0)
    straight = tmp_path / "exp" / "r1_cifar" / "straight"
    records = metrics(straight)
    assert metrics(run) == records
    assert_same_weights(run, straight)
    p = [r["augment/p"] for r in records]
    assert len(set(p)) > 1 and all(0 <= v <= 1 for v in p)  # p adapted
    assert all(r["augment/rt"] in (-1.0, 1.0) or -1 < r["augment/rt"] < 1 for r in records)
    assert meta["augment"]["p"] == records[2]["augment/p"]
    with open(straight / "final.json") as f:
        assert "augment/p" in json.load(f)["final"]


def test_resume_without_augment_state_is_refused(tmp_path):
    """A run's augment section cannot change on resume (the config check refuses it first)."""
    write_cifar_fixture(tmp_path / "cifar")
    common = [CONFIG, *sets(TINY_DCGAN + [f"data.root={tmp_path / 'cifar'}", "train.steps=4"]),
              "--out", str(tmp_path / "exp"), "--quiet"]
    gpgan_train(*common, "--name", "r", "--set", "train.stop_after=2", check=130)
    proc = gpgan_train("--resume", str(tmp_path / "exp" / "r1_cifar" / "r"), "--set", "augment.type=ada", "--quiet")
    assert proc.returncode == 2 and "augment.type" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.cuda
def test_cuda_ada_graph_equals_eager_and_resumes_exactly(tmp_path):
    """ADA with an adaptive p and R1 through it on CUDA: the captured step replays the eager one
    bit for bit (p lives on the device and is adjusted in place), and a stopped and resumed run
    equals both."""
    write_cifar_fixture(tmp_path / "cifar")
    common = [CONFIG, *sets(TINY_DCGAN + [f"data.root={tmp_path / 'cifar'}", "train.steps=6", "train.critic_steps=2",
                                          *ADA]),
              "--out", str(tmp_path / "exp"), "--quiet", "--device", "cuda"]
    gpgan_train(*common, "--name", "graph", check=0)
    gpgan_train(*common, "--name", "eager", "--set", "train.cuda_graph=false", check=0)
    gpgan_train(*common, "--name", "resumed", "--set", "train.stop_after=3", check=130)
    gpgan_train("--resume", str(tmp_path / "exp" / "r1_cifar" / "resumed"), "--quiet", check=0)
    runs = tmp_path / "exp" / "r1_cifar"
    graph = metrics(runs / "graph")
    assert len({r["augment/p"] for r in graph}) > 1
    assert graph == metrics(runs / "eager") == metrics(runs / "resumed")
    assert_same_weights(runs / "graph", runs / "eager")
    assert_same_weights(runs / "graph", runs / "resumed")
