"""gpgan.train.Trainer in process: lazy regularization applies the penalty on every
``penalty.interval``-th critic step only, counted over the whole run (across generator steps)."""
import os

import numpy as np
import pytest

from gpgan.train.config import load_config
from gpgan.train.run import RunFolder
from gpgan.train.loop import Trainer

QUICKSTART = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs", "quickstart.yaml")


def tiny_trainer(tmp_path, *overrides):
    config = load_config(QUICKSTART, ["model.generator_options.width=8", "model.critic_options.width=8",
                                      "train.batch_size=8", "train.steps=6", *overrides])
    return Trainer(config, RunFolder.create(tmp_path, "quickstart", "t"), quiet=True)


@pytest.mark.parametrize("interval,critic_steps,expected", [
    (1, 1, [1, 1, 1, 1, 1, 1]),
    (3, 2, [1, 1, 0, 1, 1, 0]),   # critic steps 0..11: penalized at 0, 3, 6, 9
    (4, 1, [1, 0, 0, 0, 1, 0]),
])
def test_lazy_regularization_penalizes_every_interval_th_critic_step(tmp_path, interval, critic_steps, expected):
    trainer = tiny_trainer(tmp_path, "penalty.type=r1", f"penalty.interval={interval}",
                           f"train.critic_steps={critic_steps}")
    calls, values = [], []
    penalty = trainer.step_fn.penalty
    evaluate = penalty.evaluate

    def counting(*args, **kwargs):
        value, term, sq = evaluate(*args, **kwargs)
        calls[-1] += 1
        values.append((float(value.data), float(term.data)))
        return value, term, sq

    penalty.evaluate = counting
    for _ in expected:
        calls.append(0)
        trainer.train_step()
    assert calls == expected
    # Lazy regularization scales the applied penalty by the interval (StyleGAN2): gamma / 2 * k * E||g||^2.
    weight = trainer.config["penalty"]["weight"]
    for applied, term in values:
        np.testing.assert_allclose(applied, weight / 2 * interval * term, rtol=1e-5)


@pytest.mark.parametrize("penalty", ["r1", "r2"])
def test_r1_and_r2_reuse_the_critic_loss_forward(tmp_path, monkeypatch, penalty):
    """A penalized R1/R2 critic step runs the critic twice (real, fake), not three times, and
    trains the same weights as the step that gives the penalty a forward of its own: equal to
    float64 rounding after 20 steps (in float32 the runs part by rounding, as any two orders of
    summation do, and then by the chaos of training)."""
    def train(folder, share):
        trainer = tiny_trainer(tmp_path / folder, f"penalty.type={penalty}", "train.steps=20")
        for module in (trainer.parts.generator, trainer.parts.critic):
            module.to("cpu", np.float64)
        next_inputs = trainer.feed.next
        monkeypatch.setattr(trainer.feed, "next", lambda *a: next_inputs(*a).map(lambda x: x.astype(np.float64)))
        if not share:
            monkeypatch.setattr(type(trainer.step_fn.penalty), "shared_points", None)
        critic, calls = trainer.parts.critic, []
        forward = critic.forward
        monkeypatch.setattr(critic, "forward", lambda x: calls.append(x.shape) or forward(x))
        for _ in range(20):
            trainer.train_step()
        monkeypatch.undo()
        return calls, [p.data.copy() for p in critic.parameters()]

    shared_calls, shared_weights = train("shared", True)
    own_calls, own_weights = train("own", False)
    # Per generator step: real and fake for the critic loss (+1 for the penalty's own), 1 for
    # the generator's loss.
    assert len(shared_calls) == 20 * 3 and len(own_calls) == 20 * 4
    for a, b in zip(shared_weights, own_weights):
        assert a.dtype == np.float64
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-13)


def test_the_ema_ramp_makes_a_short_runs_average_its_trained_weights(tmp_path):
    """At decay 0.999 and 20 steps, a plain average is still 98% the initial weights (why a
    200-step CIFAR run's EMA grid was blank); with train.ema.rampup it is a ramped average of
    the trained weights, recomputed here from the raw weights of each step in float64."""
    def run(folder, rampup):
        trainer = tiny_trainer(tmp_path / folder, "train.ema.decay=0.999", f"train.ema.rampup={rampup}",
                               "train.steps=20")
        initial = {n: p.data.astype(np.float64) for n, p in trainer.parts.generator.named_parameters()}
        expected = dict(initial)
        for n in range(20):
            trainer.train_step()
            d = min(0.999, (1 + n) / (10 + n)) if rampup else 0.999
            for name, p in trainer.parts.generator.named_parameters():
                expected[name] = d * expected[name] + (1 - d) * p.data
        return trainer, initial, expected

    for rampup in (True, False):
        trainer, initial, expected = run(f"r{rampup}", rampup)
        ema = trainer.parts.ema
        assert ema.rampup is rampup and ema.averaged == 20
        raw = dict(trainer.parts.generator.named_parameters())
        for name, avg in ema.params.items():
            np.testing.assert_allclose(avg, expected[name], rtol=1e-5, atol=1e-6, err_msg=name)
        name = "net.0.weight" if "net.0.weight" in raw else next(iter(raw))
        moved = np.linalg.norm(raw[name].data - initial[name])
        from_start = np.linalg.norm(ema.params[name] - initial[name]) / moved
        if rampup:
            assert from_start > 0.5
        else:
            assert from_start < 0.05
