"""Class-conditional training: the loader's labels, the generator's embedding and the projection
critic against closed forms, their gradients to second order, and a conditional R3GAN run."""
import numpy as np
import pytest

import gpgan
import gpgan.nn as nn
from gpgan.autograd import gradcheck, gradgradcheck
from gpgan.data import ImageLoader
from gpgan.models import CRITICS, MODELS, make_conditional, supports_projection
from gpgan.train.config import ConfigError, load_config
from gpgan.train.loop import Trainer
from gpgan.train.run import RunFolder
from helpers import QUICKSTART, write_cifar

TINY = {"widths": [16, 16, 16], "blocks": [1, 1, 1], "group_size": 16}


def test_loader_labels_follow_their_images():
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(10, 3, 2, 2), dtype=np.uint8)
    labels = np.arange(10) % 4
    loader = ImageLoader(images, 3, seed=1, hflip=False, labels=labels)
    for _ in range(5):  # across an epoch boundary
        x, y = loader.next_with_labels()
        for xi, yi in zip(x, y):
            k = [i for i in range(10) if np.allclose(xi, images[i] / 127.5 - 1, atol=1e-6)]
            assert len(k) == 1 and labels[k[0]] == yi


def test_generator_embedding_and_projection_closed_forms():
    rng = np.random.default_rng(1)
    g = make_conditional("generator", "r3gan_generator", 10, 6, latent_dim=5, rng=rng, **TINY).double()
    assert g.latent_dim == 5 and g.base.latent_dim == 11
    z = rng.standard_normal((4, 5))
    y = np.array([3, 0, 9, 3])
    e = g.embedding.weight.data.T[y]  # row y of the embedding
    expected = g.base(gpgan.Variable(np.concatenate([z, e], axis=1))).data
    np.testing.assert_allclose(g(gpgan.Variable(z), y).data, expected, rtol=1e-12)
    # without labels the classes go in index order
    np.testing.assert_allclose(g(gpgan.Variable(z)).data, g(gpgan.Variable(z), np.arange(4) % 10).data)

    d = make_conditional("critic", "r3gan_critic", 10, rng=rng, **TINY).double()
    x = rng.standard_normal((4, 3, 16, 16))
    phi = d.base.features(gpgan.Variable(x)).data
    v = d.embedding.weight.data.T[y]
    expected = d.base.logits(gpgan.Variable(phi)).data[:, 0] + (v * phi).sum(axis=1)
    np.testing.assert_allclose(d(gpgan.Variable(x), y).data[:, 0], expected, rtol=1e-12)
    with pytest.raises(ValueError, match="needs the labels"):
        d(gpgan.Variable(x))


def test_projection_critic_gradients_to_second_order():
    rng = np.random.default_rng(2)
    d = make_conditional("critic", "resnet_critic", 3, width=2, image_size=8, init="default", rng=rng).double()
    params = dict(d.named_parameters())
    names = ["embedding.weight", "base.linear.weight"]
    y = np.array([2, 0])
    fn = lambda x, *w: nn.functional_call(d, dict(zip(names, w)), x, y)  # noqa: E731
    inputs = [rng.uniform(-1, 1, (2, 3, 8, 8))] + [params[n].data.copy() for n in names]
    gradcheck(fn, inputs, atol=1e-6, rtol=1e-5)
    gradgradcheck(fn, inputs, atol=1e-6, rtol=1e-5)


def test_conditional_config_errors():
    with pytest.raises(ConfigError, match="model.conditional needs class labels, but data.name 'grid25'"):
        load_config(QUICKSTART, ["model.conditional=true", "model.critic=r3gan_critic", "model.critic_options={}"])
    with pytest.raises(ConfigError, match="with model.conditional the accepted ones are none, r1, r2, r1r2"):
        load_config(QUICKSTART, ["model.conditional=true", "data.name=cifar10", "penalty.type=wgan_gp",
                                 "model.critic=resnet_critic", "model.critic_options={}"])
    # A generator is no critic (model.critic accepts critics only), and every critic has the
    # features a projection needs; from Python, a model without them is refused by name.
    with pytest.raises(ConfigError, match="model.critic: got 'mlp_generator' .*accepted: one of 'dcgan_critic'"):
        load_config(QUICKSTART, ["model.conditional=true", "data.name=cifar10", "model.critic=mlp_generator",
                                 "model.critic_options={}"])
    assert all(supports_projection(MODELS[name]) for name in CRITICS)
    with pytest.raises(ValueError, match="critic 'mlp_generator' has no feature map to project the labels on"):
        make_conditional("critic", "mlp_generator", 3, width=4)


def test_a_conditional_run_without_pairs_draws_the_fakes_classes(tmp_path):
    from gpgan.train.feed import InputFeed

    class Loader:
        def next_with_labels(self):
            return np.zeros((64, 3, 2, 2), np.float32), np.zeros(64, np.int64)

    feed = InputFeed(Loader(), np.random.default_rng(0), None, 4, 64, None, 1, num_classes=10)
    inputs = feed.draw(0)
    assert (inputs.critic[0].labels == 0).all() and inputs.real_labels is None
    for drawn in (inputs.critic[0].fake_labels, inputs.labels):
        assert drawn.shape == (64,) and len(set(drawn.tolist())) > 5  # uniform over 10 classes, not the reals'


def test_conditional_r3gan_run_trains_and_feeds_labels(tmp_path):
    root = tmp_path / "cifar"
    write_cifar(root, per_batch=6)
    config = load_config(QUICKSTART, [
        "data.name=cifar10", f"data.root={root}", "model.conditional=true", "loss=rpgan", "penalty.type=r1r2",
        "penalty.weight=0.05", "model.generator=r3gan_generator", "model.critic=r3gan_critic",
        "model.generator_options={latent_dim: 4, widths: [16, 16, 16, 16], blocks: [1, 1, 1, 1]}",
        "model.critic_options={widths: [16, 16, 16, 16], blocks: [1, 1, 1, 1]}",
        "train.batch_size=4", "train.steps=2", "train.eval_interval=0", "train.n_samples=4", "train.log_interval=1"])
    trainer = Trainer(config, RunFolder.create(tmp_path, "c", "t"), quiet=True)
    assert trainer.parts.num_classes == 10 and trainer.parts.generator.latent_dim == 4
    inputs = trainer.feed.draw(0)
    c = inputs.critic[0]
    assert c.labels.dtype == np.int64 and c.labels.shape == (4,) and c.fake_labels.shape == (4,)
    assert inputs.labels.shape == (4,) and inputs.real_labels.shape == (4,)
    assert (0 <= c.fake_labels).all() and (c.fake_labels < 10).all()
    # RpGAN pairs each real with a fake of its class, in the critic's steps and the generator's
    # (R3GAN's Trainer.py); another loss draws the fakes' classes from the run's noise.
    assert (c.fake_labels == c.labels).all() and (inputs.labels == inputs.real_labels).all()
    summary = trainer.fit()
    assert np.isfinite(summary["final"]["loss/critic"]) and np.isfinite(summary["final"]["grad_norm/fake"])

    # gpgan-sample: a grid with one row per class, a class of its own, and bad classes refused
    from PIL import Image

    from gpgan.cli.sample import main as sample
    from gpgan.train.sampling import class_grid, generate, load_generator, resolve_source
    trainer.run.write_config(config)
    run = trainer.run.path
    assert sample([str(run), "--n", "20", "--out", str(tmp_path / "grid.png"), "--quiet"]) == 0
    with Image.open(tmp_path / "grid.png") as img:
        assert img.size[1] > 4 * img.size[0]  # 10 rows of 2 images: a tall picture
    assert sample([str(run), "--n", "6", "--class", "3", "--out", str(tmp_path / "c3.npz"), "--quiet"]) == 0
    generator, _, _ = load_generator(*resolve_source(str(run)))
    z = np.random.default_rng(0).standard_normal((6, 4))
    expected = generate(generator, z, labels=np.full(6, 3))
    from gpgan.data import to_uint8
    np.testing.assert_array_equal(np.load(tmp_path / "c3.npz")["images"], to_uint8(expected).transpose(0, 2, 3, 1))
    assert sample([str(run), "--class", "10", "--out", str(tmp_path / "x.png"), "--quiet"]) == 1
    # An interpolation fills whole rows: --n 3 is 2 rows of 2 images, each with its class (it had 3
    # labels for the 4 latents).
    assert sample([str(run), "--interpolate", "--n", "3", "--class", "3", "--out", str(tmp_path / "i.png"),
                   "--quiet"]) == 0
    labels, cols = class_grid(20, 10)
    assert cols == 2 and list(labels[:4]) == [0, 0, 1, 1] and labels[-1] == 9


@pytest.mark.parametrize("name,options,shape", [
    ("dcgan_critic", {"width": 2, "norm": "spectral"}, (2, 3, 32, 32)),
    ("mlp_critic", {"width": 4, "depth": 2}, (2, 2)),
    ("resnet_critic", {"width": 2, "image_size": 8}, (2, 3, 8, 8)),
    ("r3gan_critic", TINY, (2, 3, 16, 16)),
])
def test_every_critic_splits_into_features_and_logits(name, options, shape):
    """forward(x) = logits(features(x)), which a projection critic relies on."""
    from gpgan.models import make_model
    rng = np.random.default_rng(5)
    d = make_model(name, rng=rng, **options)
    d.eval()  # spectral norm's vectors fixed between the two calls
    x = gpgan.Variable(rng.uniform(-1, 1, shape).astype(np.float32))
    phi = d.features(x)
    assert phi.shape == (2, d.feature_dim)
    np.testing.assert_allclose(d.logits(phi).data, d(x).data, rtol=1e-5, atol=1e-6)
    assert make_conditional("critic", name, 3, rng=rng, **options)(x, np.array([0, 2])).shape == (2, 1)
