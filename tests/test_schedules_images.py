"""Schedules counted in images (R3GAN's cosine decay with warm-up), Adam's scheduled beta2 and
beta1 = 0, and the EMA by half-life in images, against closed forms."""
import math
import os

import numpy as np
import pytest

import gpgan.nn
from gpgan.optim import EMA, Adam, CosineLR, CosineValue, cosine_value, make_schedule
from gpgan.train.build import build_components
from gpgan.train.config import load_config, schedules_following_steps, validate_config


def test_cosine_value_closed_form():
    # no warm-up: base at 0, the mean of base and final halfway, final at the end and after
    assert cosine_value(0, 2e-4, 5e-5, 100) == pytest.approx(2e-4, rel=1e-15)
    assert cosine_value(50, 2e-4, 5e-5, 100) == pytest.approx(1.25e-4, rel=1e-12)
    assert cosine_value(25, 1.0, 0.0, 100) == pytest.approx(0.5 * (1 + math.cos(math.pi / 4)), rel=1e-12)
    assert cosine_value(100, 2e-4, 5e-5, 100) == pytest.approx(5e-5, rel=1e-12)
    assert cosine_value(1e9, 2e-4, 5e-5, 100) == 5e-5
    # a rise (the EMA half-life 0 -> 5M images)
    assert cosine_value(10, 0.0, 5e6, 20) == pytest.approx(2.5e6, rel=1e-12)
    # warm-up: linear from warmup_value to base, then the cosine over the rest
    assert cosine_value(5, 1.0, 0.0, 110, warmup_images=10, warmup_value=0.2) == pytest.approx(0.6, rel=1e-12)
    assert cosine_value(10, 1.0, 0.0, 110, warmup_images=10) == pytest.approx(1.0, rel=1e-12)
    assert cosine_value(60, 1.0, 0.0, 110, warmup_images=10) == pytest.approx(0.5, rel=1e-12)


def test_cosine_value_counts_images_per_step_and_checks_its_arguments():
    curve = CosineValue(0.05, 0.005, total_images=2e7, images_per_step=512)
    steps = 2e7 / 512 / 2
    assert curve.value_at(steps) == pytest.approx(0.0275, rel=1e-12)
    with pytest.raises(ValueError, match="warmup_images"):
        CosineValue(1, 0, total_images=10, warmup_images=10)
    with pytest.raises(ValueError, match="must be positive"):
        CosineValue(1, 0, total_images=0)


def test_cosine_lr_moves_the_rate_and_beta2_and_round_trips():
    p = gpgan.nn.Parameter(np.zeros(3))
    opt = Adam([p], lr=2e-4, betas=(0.0, 0.9))
    sched = make_schedule("cosine", opt, final_lr=5e-5, total_images=1000, images_per_step=100, final_beta2=0.99)
    assert isinstance(sched, CosineLR) and opt.lr == pytest.approx(2e-4) and opt.beta2 == pytest.approx(0.9)
    for _ in range(5):
        sched.step()
    assert opt.lr == pytest.approx(1.25e-4, rel=1e-12) and opt.beta2 == pytest.approx(0.945, rel=1e-12)
    state = sched.state_dict()
    opt2 = Adam([p], lr=2e-4, betas=(0.0, 0.9))
    sched2 = make_schedule("cosine", opt2, final_lr=5e-5, total_images=1000, images_per_step=100, final_beta2=0.99)
    sched2.load_state_dict(state)
    assert (opt2.lr, opt2.beta2) == (opt.lr, opt.beta2)
    for _ in range(10):
        sched.step()
    assert opt.lr == pytest.approx(5e-5) and opt.beta2 == pytest.approx(0.99)


def test_adam_with_beta1_zero_and_a_moving_beta2_matches_the_formula():
    """beta1 = 0 (R3GAN's): m is the gradient itself; beta2 read at each step (as torch reads its
    param group's betas), with the bias correction 1 - beta2_t^t of the current beta2."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal(4)
    p = gpgan.nn.Parameter(w.copy())
    opt = Adam([p], lr=0.1, betas=(0.0, 0.9), eps=1e-8)
    v = np.zeros(4)
    for t, beta2 in enumerate([0.9, 0.95, 0.99], start=1):
        g = rng.standard_normal(4)
        opt.beta2 = beta2
        p.grad = g.copy()
        opt.step()
        v = beta2 * v + (1 - beta2) * g * g
        w = w - 0.1 * g / (np.sqrt(v) / math.sqrt(1 - beta2 ** t) + 1e-8)
        np.testing.assert_allclose(p.data, w, rtol=1e-14)


class _Net(gpgan.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = gpgan.nn.Parameter(np.zeros(2))


def test_ema_by_half_life_in_images_with_ramp():
    """decay = 0.5 ** (images_per_step / half_life(images before the step)); a half-life of 0
    copies (the ramp's start); a constant half-life H halves a step's weight every H images."""
    net = _Net()
    ramp = CosineValue(0.0, 400.0, total_images=800, images_per_step=100)
    ema = EMA(net, half_life=ramp, images_per_step=100)
    values = [1.0, 2.0, 3.0]
    avg = np.zeros(2)
    for step, value in enumerate(values, start=1):
        net.w.data[...] = value
        ema.update(step)
        half = ramp.value_at(step - 1)
        decay = 0.5 ** (100 / max(half, 1e-8))
        assert ema.decay_at(step) == pytest.approx(decay, rel=1e-15)
        avg = decay * avg + (1 - decay) * value
        np.testing.assert_allclose(ema.params["w"], avg, rtol=1e-14)
    assert ema.decay_at(1) == 0.0  # half-life 0: the first update copies the weights
    constant = EMA(_Net(), half_life=CosineValue(300.0, 300.0, 1, images_per_step=100), images_per_step=100)
    assert constant.decay_at(10) ** 3 == pytest.approx(0.5, rel=1e-12)


QUICKSTART = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs", "quickstart.yaml")
SMALL = ["model.generator_options.width=8", "model.critic_options.width=8"]
COSINES = ["optim.generator.schedule=cosine", "optim.critic.schedule=cosine", "optim.generator.lr_final=1e-5",
           "optim.critic.lr_final=1e-5", "penalty.weight_final=0.5", "train.ema.enabled=true",
           "train.ema.half_life_images=5000", "train.ema.half_life_ramp=true"]


def _curves_at(config, step):
    """Each schedule that build_components makes from ``config``, by the key that sets it: its value at ``step``."""
    c = build_components(config, progress=False)
    values = {"optim.generator.schedule": c.g_sched.lr_at(step), "optim.critic.schedule": c.d_sched.lr_at(step)}
    if c.penalty_weight is not None:
        values["penalty.weight_final"] = c.penalty_weight.value_at(step)
    if c.ema is not None and c.ema.half_life is not None:
        values["train.ema.half_life_ramp"] = c.ema.half_life.value_at(step)
    return values


@pytest.mark.parametrize("overrides", [[], ["optim.critic.schedule=constant"], COSINES,
                                       COSINES + ["schedule.total_images=1e6"],
                                       COSINES + ["optim.generator.schedule=linear", "optim.generator.lr_final=null",
                                                  "schedule.total_images=1e6"]])
def test_schedules_following_steps_are_those_that_extending_a_run_changes(overrides):
    # What a resume with more train.steps warns of: exactly the curves that build reads over
    # train.steps (their values at step 40 move when the run is made twice as long).
    short, long = (load_config(QUICKSTART, SMALL + overrides + [f"train.steps={n}"]) for n in (100, 200))
    a, b = _curves_at(short, 40), _curves_at(long, 40)
    assert sorted(schedules_following_steps(long)) == sorted(k for k in a if a[k] != b[k])
    assert schedules_following_steps(short) == schedules_following_steps(long)


def test_ada_cosine_p_follows_steps_without_total_images():
    ada = {"augment": {"type": "ada", "p_mode": "cosine", "p": 0.2, "p_end": 0.0}}
    config = validate_config({**ada, "data": {"name": "cifar10"}})
    assert schedules_following_steps(config) == ["augment.p_mode"]
    config = validate_config({**ada, "data": {"name": "cifar10"}, "schedule": {"total_images": 1e6}})
    assert schedules_following_steps(config) == []
