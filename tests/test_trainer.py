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
