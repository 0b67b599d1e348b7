"""gpgan-train with augmentations, end to end on a fixture CIFAR-10 folder with tiny DCGANs:
DiffAugment runs, and ADA with an adaptive p (R1 through the augmentation) or R3GAN's cosine p
(RpGAN + R1 + R2 through it, every schedule in images) stopped and resumed equals the uninterrupted
run bit for bit, p and r_t included; the cosine p against its closed form."""
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


# R3GAN's schedules at a tiny scale: 2 critic steps of 4 reals = 8 images per generator step; the
# cosine over 40 images after a 12-image warm-up (not a whole number of steps), so 7 steps reach
# past its end. p goes from 0.1 to 0.6 as the learning rates and the penalty weight decay; R3GAN's
# pipe: the colour ops at p / 2, cutout at p.
COSINE = ["augment.type=ada", "augment.p_mode=cosine", "augment.p=0.1", "augment.p_end=0.6",
          "augment.color_multiplier=0.5", "augment.cutout_multiplier=1",
          "augment.penalty_points=unaugmented", "loss=rpgan", "penalty.type=r1r2", "penalty.weight=0.05",
          "penalty.weight_final=0.005", "schedule.total_images=40", "schedule.warmup_images=12",
          "optim.critic.schedule=cosine", "optim.critic.lr_final=5e-5", "optim.generator.schedule=cosine",
          "optim.generator.lr_final=5e-5", "train.critic_steps=2", "train.steps=7"]


def _cosine_p(images, p0=0.1, p_end=0.6, total=40.0, warmup=12.0):
    """R3GAN's aug_scheduler written out (training/training_loop.py's cosine_decay_with_warmup)."""
    if images > total:
        return p_end
    if images < warmup:
        return p0 * images / warmup
    return p_end + (p0 - p_end) * (1 + np.cos(np.pi * (images - warmup) / (total - warmup))) / 2


def test_ada_cosine_p_follows_the_images_and_resumes_exactly(tmp_path):
    """augment/p of step N is the p that step used: the cosine at the (N - 1) * 8 images seen before
    it; a run stopped at step 3 and resumed equals the uninterrupted one bit for bit (p is set from
    the step count, the weights and every other state from the checkpoint)."""
    write_cifar_fixture(tmp_path / "cifar")
    common = [CONFIG, *sets(TINY_DCGAN + [f"data.root={tmp_path / 'cifar'}", *COSINE]),
              "--out", str(tmp_path / "exp"), "--quiet"]
    gpgan_train(*common, "--name", "straight", check=0)
    gpgan_train(*common, "--name", "resumed", "--set", "train.stop_after=3", check=130)
    run, straight = tmp_path / "exp" / "r1_cifar" / "resumed", tmp_path / "exp" / "r1_cifar" / "straight"
    gpgan_train("--resume", str(run), "--quiet", check=0)
    records = metrics(straight)
    assert [r["step"] for r in records] == list(range(1, 8))
    for r in records:
        assert r["augment/p"] == pytest.approx(_cosine_p((r["step"] - 1) * 8), rel=1e-12, abs=1e-15), r["step"]
        assert r["augment/rt"] is None  # nothing adapts
    assert records[0]["augment/p"] == 0.0 and records[-1]["augment/p"] == 0.6  # warm-up from 0; past the end
    assert metrics(run) == records
    assert_same_weights(run, straight)


def test_resume_without_augment_state_is_refused(tmp_path):
    """A run's augment section cannot change on resume (the config check refuses it first)."""
    write_cifar_fixture(tmp_path / "cifar")
    common = [CONFIG, *sets(TINY_DCGAN + [f"data.root={tmp_path / 'cifar'}", "train.steps=4"]),
              "--out", str(tmp_path / "exp"), "--quiet"]
    gpgan_train(*common, "--name", "r", "--set", "train.stop_after=2", check=130)
    proc = gpgan_train("--resume", str(tmp_path / "exp" / "r1_cifar" / "r"), "--set", "augment.type=ada", "--quiet")
    assert proc.returncode == 2 and "augment.type" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.cuda
@pytest.mark.parametrize("augment", [ADA, COSINE], ids=["adaptive", "cosine"])
def test_cuda_ada_graph_equals_eager_and_resumes_exactly(tmp_path, augment):
    """ADA with an adaptive p and R1 through it, or R3GAN's cosine p with RpGAN + R1 + R2, on CUDA:
    the captured step replays the eager one bit for bit (p lives on the device, adjusted in place
    or written by a host effect before each replay), and a stopped and resumed run equals both."""
    write_cifar_fixture(tmp_path / "cifar")
    common = [CONFIG, *sets(TINY_DCGAN + [f"data.root={tmp_path / 'cifar'}", "train.steps=6", "train.critic_steps=2",
                                          *augment]),
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
