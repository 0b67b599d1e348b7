"""gpgan.train.Trainer in process: lazy regularization applies the penalty on every
``penalty.interval``-th critic step only, counted over the whole run (across generator steps)."""
import numpy as np
import pytest

from gpgan.train.config import load_config
from gpgan.train.run import RunFolder
from gpgan.train.loop import Trainer
from helpers import QUICKSTART, ROOT, TINY_DCGAN, write_cifar_fixture



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


@pytest.mark.parametrize("penalty,loss,shared_calls,own_calls", [
    ("r1", "non_saturating", 3, 4), ("r2", "non_saturating", 3, 4),
    # rpgan's generator step runs the critic on the reals too; r1r2 reuses both forwards
    ("r1r2", "rpgan", 4, 6)])
def test_r1_and_r2_reuse_the_critic_loss_forward(tmp_path, monkeypatch, penalty, loss, shared_calls, own_calls):
    """A penalized R1/R2 critic step runs the critic twice (real, fake), not three times, and
    trains the same weights as the step that gives the penalty a forward of its own: equal to
    float64 rounding after 20 steps (in float32 the runs part by rounding, as any two orders of
    summation do, and then by the chaos of training)."""
    def train(folder, share):
        trainer = tiny_trainer(tmp_path / folder, f"penalty.type={penalty}", f"loss={loss}", "train.steps=20")
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

    shared, shared_weights = train("shared", True)
    own, own_weights = train("own", False)
    # Per generator step: real and fake for the critic loss (+1 per point set for the penalty's
    # own), 1 for the generator's loss (2 for rpgan's: fake and real).
    assert len(shared) == 20 * shared_calls and len(own) == 20 * own_calls
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


def test_rpgan_generator_step_pairs_a_real_batch_of_its_own(tmp_path, monkeypatch):
    """rpgan's generator loss is softplus(-(D(G(z)) - D(x_r))) averaged, with x_r a real batch drawn
    for the generator step after the critic steps' (R3GAN's loop fetches one per phase) and D the
    critic after its update: checked against that formula in NumPy. Other losses draw no such batch."""
    trainer = tiny_trainer(tmp_path, "loss=rpgan", "penalty.type=r1r2", "train.critic_steps=2")
    assert tiny_trainer(tmp_path / "ns", "penalty.type=r1").feed.draw(0).real is None
    loader = trainer.parts.loader
    state = loader.state_dict()
    batches = [loader.next() for _ in range(3)]
    loader.load_state_dict(state)
    inputs = trainer.feed.next(0, "cpu")
    np.testing.assert_array_equal(inputs.critic[0].real, batches[0])
    np.testing.assert_array_equal(inputs.critic[1].real, batches[1])
    np.testing.assert_array_equal(inputs.real, batches[2])
    critic, generator = trainer.parts.critic, trainer.parts.generator
    seen = {}
    update = trainer.step_fn._generator_update

    def recording(step_inputs, values):
        from gpgan import Variable, no_grad
        with no_grad():
            d_real = critic(Variable(step_inputs.real)).data
            d_fake = critic(generator(Variable(step_inputs.noise))).data
        seen["expected"] = float(np.logaddexp(0.0, -(d_fake.astype(np.float64) - d_real)).mean())
        seen["real"] = step_inputs.real
        return update(step_inputs, values)

    monkeypatch.setattr(trainer.step_fn, "_generator_update", recording)
    result = trainer.step_fn(inputs)
    assert seen["real"] is inputs.real
    np.testing.assert_allclose(float(result.values["loss/generator"]), seen["expected"], rtol=1e-5)


def test_schedules_in_images_drive_rate_beta2_penalty_weight_and_ema(tmp_path):
    """R3GAN's schedules through a config: the rates and beta2 (cosine), the penalty weight
    (cosine with warm-up) and the EMA half-life (ramp from 0), each at the images seen before the
    step (generator steps x batch_size x critic_steps), against cosine_value."""
    from gpgan.optim import cosine_value
    trainer = tiny_trainer(
        tmp_path, "loss=rpgan", "penalty.type=r1r2", "penalty.weight=0.05", "penalty.weight_final=0.005",
        "optim.generator.schedule=cosine", "optim.generator.lr_final=5e-5", "optim.generator.lr=2e-4",
        "optim.generator.betas=0,0.9", "optim.generator.beta2_final=0.99",
        "optim.critic.schedule=cosine", "optim.critic.lr=2e-4", "optim.critic.betas=0,0.9",
        "schedule.total_images=48", "schedule.warmup_images=8",
        "train.ema.enabled=true", "train.ema.half_life_images=16", "train.ema.half_life_ramp=true")
    parts = trainer.parts
    weights, decays = [], []
    evaluate = parts.penalty.evaluate

    def recording(*args, **kwargs):
        weights.append(parts.penalty.weight)
        return evaluate(*args, **kwargs)

    parts.penalty.evaluate = recording
    for k in range(6):  # 8 images per step (batch 8, one critic step)
        images = 8 * k
        assert parts.g_opt.lr == pytest.approx(cosine_value(images, 2e-4, 5e-5, 48, 8), rel=1e-12)
        assert parts.d_opt.lr == pytest.approx(cosine_value(images, 2e-4, 0.0, 48, 8), rel=1e-12)
        assert parts.g_opt.beta2 == pytest.approx(cosine_value(images, 0.9, 0.99, 48), rel=1e-12)
        assert parts.d_opt.beta2 == 0.9 and parts.g_opt.beta1 == 0.0
        decays.append(parts.ema.decay_at(k + 1))
        trainer.train_step()
        assert weights[-1] == pytest.approx(cosine_value(images, 0.05, 0.005, 48, 8), rel=1e-12)
        half = cosine_value(images, 0.0, 16.0, 48)
        assert decays[-1] == pytest.approx(0.5 ** (8 / max(half, 1e-8)), rel=1e-12)
    assert weights[0] == 0.0 and decays[0] == 0.0  # warm-up from 0; the ramp's first update copies
    logged = trainer.monitor._scheduled(6)
    assert logged == {"schedule/penalty_weight": pytest.approx(cosine_value(48, 0.05, 0.005, 48, 8)),
                      "schedule/beta2_generator": pytest.approx(0.99),
                      "schedule/ema_half_life_images": pytest.approx(16.0)}


def test_schedule_config_errors(tmp_path):
    from gpgan.train.config import ConfigError
    with pytest.raises(ConfigError, match="optim.critic.lr_final is set but optim.critic.schedule is 'linear'"):
        load_config(QUICKSTART, ["optim.critic.lr_final=0.1"])
    with pytest.raises(ConfigError, match="schedule.warmup_images 5e\\+06 must be below"):
        load_config(QUICKSTART, ["schedule.warmup_images=5000000"])
    with pytest.raises(ConfigError, match="penalty.weight_final is set but penalty.type is 'none'"):
        load_config(QUICKSTART, ["penalty.type=none", "penalty.weight_final=0.1"])
    with pytest.raises(ConfigError, match="train.ema.half_life_images is set but train.ema.enabled is false"):
        load_config(QUICKSTART, ["train.ema.enabled=false", "train.ema.half_life_images=100"])
    with pytest.raises(ConfigError, match="train.ema.half_life_ramp needs train.ema.half_life_images"):
        load_config(QUICKSTART, ["train.ema.half_life_ramp=true"])
    with pytest.raises(ConfigError, match="loss 'rpgan' pairs each generated sample"):
        load_config(QUICKSTART, ["loss=rpgan", "train.generator_batch_size=3"])


def test_rpgan_with_schedules_resumes_exactly(tmp_path):
    """Training 6 steps straight equals 3 steps, a checkpoint, a fresh trainer loading it, and 3
    more: the weights, the EMA and the scheduled numbers bit for bit (the schedules are functions
    of the restored step, the EMA's of its restored update count)."""
    overrides = ["loss=rpgan", "penalty.type=r1r2", "penalty.weight_final=0.1", "optim.generator.schedule=cosine",
                 "optim.critic.schedule=cosine", "optim.critic.beta2_final=0.99", "schedule.warmup_images=8",
                 "train.ema.half_life_images=16", "train.ema.half_life_ramp=true"]
    straight = tiny_trainer(tmp_path / "a", *overrides)
    for _ in range(6):
        straight.train_step()
    first = tiny_trainer(tmp_path / "b", *overrides)
    for _ in range(3):
        first.train_step()
    path = first.save_checkpoint(str(tmp_path / "ckpt.npz"))
    resumed = tiny_trainer(tmp_path / "c", *overrides)
    resumed.load_checkpoint(path)
    for _ in range(3):
        resumed.train_step()
    for a, b in zip(straight.parts.critic.parameters(), resumed.parts.critic.parameters()):
        np.testing.assert_array_equal(a.data, b.data)
    for name, avg in straight.parts.ema.params.items():
        np.testing.assert_array_equal(avg, resumed.parts.ema.params[name])
    assert straight.parts.penalty.weight == resumed.parts.penalty.weight
    assert straight.parts.d_opt.beta2 == resumed.parts.d_opt.beta2 and straight.parts.d_opt.lr == resumed.parts.d_opt.lr


@pytest.mark.parametrize("overrides,cls,state_name", [
    (["optim.generator.type=sgd", "optim.critic.type=sgd", "optim.critic.momentum=0.9",
      "optim.critic.nesterov=true", "optim.generator.lr=0.01", "optim.critic.lr=0.01"], "SGD", "momentum_buffer"),
    (["optim.generator.type=rmsprop", "optim.critic.type=rmsprop", "optim.critic.momentum=0.5",
      "optim.critic.centered=true", "optim.critic.alpha=0.9", "optim.critic.eps=1e-6"], "RMSprop", "grad_avg"),
    (["optim.critic.type=adam"], "Adam", "exp_avg_sq"),
])
def test_each_optimizer_type_trains_and_resumes_exactly(tmp_path, overrides, cls, state_name):
    """optim.<who>.type builds that optimizer with its options; 6 steps straight equal 3 steps, a
    checkpoint (which holds the optimizer's running arrays), a fresh trainer loading it, and 3 more."""
    straight = tiny_trainer(tmp_path / "a", *overrides)
    initial = [p.data.copy() for p in straight.parts.critic.parameters()]
    assert type(straight.parts.d_opt).__name__ == cls and type(straight.parts.g_opt).__name__ == cls
    for _ in range(6):
        straight.train_step()
    after = list(straight.parts.critic.parameters())
    assert all(np.isfinite(p.data).all() for p in after)
    assert any(not np.array_equal(a, p.data) for a, p in zip(initial, after))
    first = tiny_trainer(tmp_path / "b", *overrides)
    for _ in range(3):
        first.train_step()
    path = first.save_checkpoint(str(tmp_path / "ckpt.npz"))
    with np.load(path) as saved:
        assert any(key.endswith(f".{state_name}") and "critic" in key for key in saved.files)
    resumed = tiny_trainer(tmp_path / "c", *overrides)
    resumed.load_checkpoint(path)
    for _ in range(3):
        resumed.train_step()
    for net in ("critic", "generator"):
        for a, b in zip(getattr(straight.parts, net).parameters(), getattr(resumed.parts, net).parameters()):
            np.testing.assert_array_equal(a.data, b.data)
    sd_a, sd_b = straight.parts.d_opt.state_dict(), resumed.parts.d_opt.state_dict()
    assert sd_a.keys() == sd_b.keys() and any(k.endswith(state_name) for k in sd_a)
    for key in sd_a:
        np.testing.assert_array_equal(sd_a[key], sd_b[key])


def test_optimizer_config_errors():
    from gpgan.train.config import ConfigError
    with pytest.raises(ConfigError, match="optim.critic.type.*'adam', 'sgd', 'rmsprop'"):
        load_config(QUICKSTART, ["optim.critic.type=adagrad"])
    with pytest.raises(ConfigError, match="optim.generator.betas is set but optim.generator.type is 'sgd'; "
                                          "it applies to adam only"):
        load_config(QUICKSTART, ["optim.generator.type=sgd", "optim.generator.betas=0,0.99"])
    with pytest.raises(ConfigError, match="optim.critic.momentum is set but optim.critic.type is 'adam'; "
                                          "it applies to sgd and rmsprop only"):
        load_config(QUICKSTART, ["optim.critic.momentum=0.9"])
    with pytest.raises(ConfigError, match="optim.critic.nesterov needs optim.critic.momentum > 0"):
        load_config(QUICKSTART, ["optim.critic.type=sgd", "optim.critic.nesterov=true"])
    with pytest.raises(ConfigError, match="optim.critic.beta2_final is set but optim.critic.type is 'rmsprop'"):
        load_config(QUICKSTART, ["optim.critic.type=rmsprop", "optim.critic.schedule=cosine",
                                 "optim.critic.beta2_final=0.99"])


def test_fault_codes_are_named_and_read_back(tmp_path):
    """A NaN in the critic's weights makes the critic's loss non-finite at its first update: the
    record on the device holds FaultCode.CRITIC_LOSS and read_fault names it; the update is gated."""
    from gpgan.train.step import FAULTS, FaultCode
    assert set(FAULTS) == set(FaultCode) - {FaultCode.NONE}
    assert {owner for code, (what, owner) in FAULTS.items() if what == "gradient"} == {"critic", "generator"}
    trainer = tiny_trainer(tmp_path)
    assert trainer.step_fn.read_fault() is None
    weight = next(iter(trainer.parts.critic.parameters()))
    weight.data[...] = np.nan
    others = [p.data.copy() for p in trainer.parts.generator.parameters()]
    trainer.train_step()
    assert int(trainer.step_fn.fault[2]) == FaultCode.CRITIC_LOSS
    fault = trainer.step_fn.read_fault()
    assert (fault.what, fault.owner, fault.step, fault.critic_step) == ("loss/critic", "critic", 1, 0)
    assert np.isnan(fault.value)
    for before, p in zip(others, trainer.parts.generator.parameters()):  # the gate closed: no update
        np.testing.assert_array_equal(before, p.data)


def test_the_logging_interval_leaves_a_spectrally_normalized_critic_as_it_trains(tmp_path):
    """A logged step measures the critic's input gradients with a forward of its own; spectral
    norm's power iteration must not advance there, or logging more often would change the run."""
    import os

    write_cifar_fixture(tmp_path / "cifar")
    weights = {}
    for every in (1, 5):
        config = load_config(os.path.join(ROOT, "configs", "r1_cifar.yaml"), TINY_DCGAN + [
            "model.critic_options.norm=spectral", f"data.root={tmp_path / 'cifar'}", "train.steps=6",
            "train.sample_interval=0", "train.checkpoint_interval=0", f"train.log_interval={every}"])
        trainer = Trainer(config, RunFolder.create(tmp_path, "r1_cifar", f"log{every}"), quiet=True)
        trainer.fit()
        critic = trainer.parts.critic
        weights[every] = {name: np.array(p.data) for name, p in critic.named_parameters()}
        weights[every].update({name: np.array(b) for name, b in critic.named_buffers()})
    assert any(name.endswith("_u") for name in weights[1])
    assert weights[1].keys() == weights[5].keys()
    for name in weights[1]:
        np.testing.assert_array_equal(weights[1][name], weights[5][name], err_msg=name)


def test_the_run_lock_is_let_go_however_fit_ends_and_by_a_launch_not_trained(tmp_path, monkeypatch):
    # In one process (an API user, a notebook): a fit that fails before its first step, and a
    # launch that is closed without training, leave the run free for the next resume.
    from gpgan.train import launch
    from gpgan.train.monitor import Monitor
    from gpgan.train.run import RunInUseError

    tiny = ["model.generator_options.width=8", "model.critic_options.width=8", "train.steps=4", "train.batch_size=16"]
    started = launch.start_run(QUICKSTART, tiny, out=str(tmp_path), name="a", quiet=True)
    run_dir = started.run.path
    with pytest.raises(RunInUseError):  # held from the start, by the launch
        launch.resume_run(run_dir, quiet=True)

    def full_disk(self, *args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Monitor, "open", full_disk)
    with pytest.raises(OSError):
        started.trainer.fit()
    monkeypatch.undo()
    resumed = launch.resume_run(run_dir, quiet=True)  # free again
    resumed.close()
    again = launch.resume_run(run_dir, quiet=True)
    again.trainer.fit()
    assert RunFolder(run_dir).is_finished()
