"""The GAN training loop: critic steps with a gradient penalty, generator steps, EMA, logging,
samples, evaluation, checkpoints, and exact resumption.

One *step* is one generator update, preceded by ``train.critic_steps`` critic updates. Critic
step ``k`` (counted over the whole run from 0) applies the penalty when ``k % interval == 0``.

Randomness, all seeded from ``train.seed`` and all restored on resume:

* model initialization: gpgan's global generator, reseeded with the seed (its state is also
  checkpointed, for layers such as dropout that draw from it);
* latent noise and the penalty's random coefficients: the trainer's generator ``rng``;
* data order and flips (images) or samples (toy): the loader (see :mod:`gpgan.data.loader`);
* the fixed noise of sample grids and evaluations: generators seeded from the seed, used only
  for that, so logging and sampling never shift the training stream.

metrics.jsonl holds one record per logged step (every ``log_interval`` steps, on evaluation
steps and at the last step)::

    step, loss/critic, loss/generator, penalty, penalty/term, grad_norm/real, grad_norm/fake,
    lr/generator, lr/critic, time_per_step [, eval/modes, eval/high_quality, eval/reverse_kl]

``time_per_step`` (seconds per generator step since the previous record) is the only key that
depends on the machine's speed: everything else is identical, bit for bit on CPU, for the same
config, seed and device, and identical between an uninterrupted and a resumed run.
"""
import math
import os
import signal
import time

import numpy

import gpgan
from gpgan.autograd import Variable, no_grad
from gpgan.backend import random as global_random
from gpgan.backend import get_array_module, to_device
from gpgan.train.config import IMAGE_DATA_NAMES

__all__ = ["Trainer", "TrainingInterrupted", "NonFiniteLossError", "TIMING_KEYS", "EVAL_BEST", "PARENT_ENV"]

# When set to a process id, training stops as on SIGTERM (checkpoint, exit 130) once that process
# is no longer this one's parent. gpgan-ablate sets it: its trainers run in sessions of their own,
# so nothing else would stop them if gpgan-ablate were killed outright.
PARENT_ENV = "GPGAN_STOP_WITH_PARENT"

#: keys of metrics.jsonl whose values depend on timing (excluded when comparing runs)
TIMING_KEYS = ("time_per_step",)
#: evaluation metric -> "max" or "min": which direction is best (for final.json's "best")
EVAL_BEST = {"eval/modes": "max", "eval/high_quality": "max", "eval/reverse_kl": "min"}


class TrainingInterrupted(Exception):
    """Raised after a checkpoint was saved because of Ctrl-C, SIGTERM or ``train.stop_after``."""

    def __init__(self, step, checkpoint, reason):
        self.step, self.checkpoint, self.reason = step, checkpoint, reason
        super().__init__(f"{reason} at step {step}; checkpoint saved to {checkpoint}")


class NonFiniteLossError(RuntimeError):
    """A loss became NaN or infinite; no checkpoint was written for it."""


def _scalar(v):
    return float(v.data) if isinstance(v, Variable) else float(v)


class Trainer:
    """Builds everything a config describes and trains it into a run folder.

    Args:
        config: a resolved config (:func:`gpgan.train.config.load_config`).
        run: the :class:`gpgan.train.run.RunFolder` to write into.
        quiet: no progress bar.
        progress_stream: where the tqdm bar goes (stderr by default).
    """

    def __init__(self, config, run, quiet=False):
        from gpgan.data import make_loader
        from gpgan.losses import make_loss, make_penalty
        from gpgan.models import make_model
        from gpgan.optim import EMA, Adam, make_schedule

        self.config = config
        self.run = run
        self.quiet = quiet
        self.device = config["device"]
        tc = config["train"]
        self.tc = tc
        seed = tc["seed"]
        self.total_steps = tc["steps"]

        # Data first: a missing data set fails before any model is built.
        data = config["data"]
        self.is_toy = data["name"] not in IMAGE_DATA_NAMES
        self.loader, self.sampler = make_loader(
            data["name"], tc["batch_size"], seed=seed, root=data["root"], download=data["download"],
            split=data["split"], hflip=data["hflip"], options=data["options"], progress=not quiet)

        gpgan.manual_seed(seed)
        mc = config["model"]
        self.generator = make_model(mc["generator"], **mc["generator_options"]).to(self.device)
        self.critic = make_model(mc["critic"], **mc["critic_options"]).to(self.device)
        self.latent_dim = int(self.generator.latent_dim)
        self.g_params = list(self.generator.parameters())
        self.d_params = list(self.critic.parameters())

        def adam(params, oc):
            return Adam(params, lr=oc["lr"], betas=tuple(oc["betas"]), eps=oc["eps"])
        oc = config["optim"]
        self.g_opt = adam(self.g_params, oc["generator"])
        self.d_opt = adam(self.d_params, oc["critic"])
        self.g_sched = make_schedule(oc["generator"]["schedule"], self.g_opt, self.total_steps)
        self.d_sched = make_schedule(oc["critic"]["schedule"], self.d_opt, self.total_steps)
        ec = tc["ema"]
        self.ema = EMA(self.generator, decay=ec["decay"], start_step=ec["start_step"]) if ec["enabled"] else None

        self.loss = make_loss(config["loss"])
        pc = config["penalty"]
        self.penalty = make_penalty(pc["type"], weight=pc["weight"], center=pc["center"],
                                    interval=pc["interval"], **pc["options"])
        self.penalized = pc["type"] != "none"

        self.rng = numpy.random.default_rng([seed, 2])
        n_fixed = tc["eval_samples"] if self.is_toy else tc["n_samples"]
        self.fixed_z = numpy.random.default_rng([seed, 3]).standard_normal(
            (n_fixed, self.latent_dim)).astype(numpy.float32)
        if self.is_toy:
            self.fixed_real = self.sampler.sample(n_fixed, numpy.random.default_rng([seed, 4]))

        self.step = 0
        self.wall_time = 0.0
        self._interrupt = None
        self._writer = None
        self._last = {}

    # -- state --------------------------------------------------------------------------------
    def _state_objects(self):
        modules = {"generator": self.generator, "critic": self.critic}
        optimizers = {"generator": self.g_opt, "critic": self.d_opt,
                      "schedule_generator": self.g_sched, "schedule_critic": self.d_sched}
        emas = {"generator": self.ema} if self.ema is not None else {}
        rngs = {"trainer": self.rng, "global": global_random}
        return modules, optimizers, emas, rngs

    def _check_finite_weights(self):
        arrays = [("generator." + n, p.data) for n, p in self.generator.named_parameters()]
        arrays += [("critic." + n, p.data) for n, p in self.critic.named_parameters()]
        for name, a in arrays:
            xp = gpgan.backend.get_array_module(a)
            if not bool(xp.isfinite(a).all()):
                return name
        return None

    def save_checkpoint(self):
        """Write checkpoints/ckpt_<step>.npz (refused when a weight is not finite); keep the last K."""
        from gpgan.checkpoint import save_checkpoint

        bad = self._check_finite_weights()
        if bad is not None:
            raise NonFiniteLossError(f"weight {bad} is not finite at step {self.step}; no checkpoint written")
        modules, optimizers, emas, rngs = self._state_objects()
        path = self.run.checkpoint_path(self.step)
        meta = {"step": self.step, "data": self.loader.state_dict(), "wall_time_s": self.wall_time,
                "last": self._last, "gpgan_version": gpgan.__version__}
        save_checkpoint(path, modules, optimizers, emas=emas, rngs=rngs, meta=meta)
        self.run.prune_checkpoints(self.tc["keep_checkpoints"])
        return path

    def load_checkpoint(self, path):
        """Restore every state from ``path``; returns its step."""
        from gpgan.checkpoint import load_checkpoint

        modules, optimizers, emas, rngs = self._state_objects()
        meta = load_checkpoint(path, modules, optimizers, emas=emas, rngs=rngs)
        self.loader.load_state_dict(meta["data"])
        self.step = int(meta["step"])
        self.wall_time = float(meta.get("wall_time_s", 0.0))
        self._last = dict(meta.get("last", {}))
        return self.step

    # -- pieces of a step ---------------------------------------------------------------------
    def _noise(self, n):
        z = self.rng.standard_normal((n, self.latent_dim)).astype(numpy.float32)
        return Variable(to_device(z, self.device))

    def _check(self, name, value, critic_step=None):
        if not math.isfinite(value):
            self._stop_non_finite(f"{name} ({value})", critic_step)

    def _stop_non_finite(self, what, critic_step=None):
        where = f"step {self.step + 1}" + ("" if critic_step is None else
                                            f" (critic step {critic_step + 1} of {self.tc['critic_steps']})")
        last = self.run.latest_checkpoint()
        keep = (f"the last good checkpoint is {last[1]} (step {last[0]})" if last else
                "no checkpoint was written yet")
        raise NonFiniteLossError(
            f"non-finite {what} at {where}; training stopped before applying it, "
            f"{keep}. Lower the learning rates or raise the penalty weight.")

    def _apply_grads(self, loss, params, optimizer, who, critic_step=None):
        grads = gpgan.grad(loss, params, allow_unused=True)
        arrays = [g.data for g in grads if g is not None]
        if arrays:
            # A finite loss can still send inf/NaN gradients (an exploding critic), or finite ones
            # whose squares overflow: Adam's second moment would turn inf for good (its updates
            # silently 0). Both make a parameter's squared gradient norm non-finite. One dot
            # product per parameter, one sync per update.
            xp = get_array_module(arrays[0])
            sq = xp.stack([xp.vdot(a.ravel(), a.ravel()) for a in arrays])
            bad = int((~xp.isfinite(sq)).sum())
            if bad:
                self._stop_non_finite(f"gradient of the {who} ({bad} of {len(arrays)} parameters have an "
                                      "infinite or NaN squared norm)", critic_step)
        for p, g in zip(params, grads):
            p.grad = g
        optimizer.step()
        for p in params:
            p.grad = None

    def critic_step(self, k, j):
        """One critic update (critic step ``k`` of the run, ``j``-th of this generator step)."""
        real = Variable(to_device(self.loader.next(), self.device))
        with no_grad():
            fake = self.generator(self._noise(self.tc["batch_size"]))
        loss = self.loss.critic_loss(self.critic(real), self.critic(fake))
        total = loss
        pen = None
        if self.penalized and k % self.penalty.interval == 0:
            pen, stats = self.penalty(self.critic, real, fake, rng=self.rng)
            total = loss + pen
            self._last["penalty"] = _scalar(pen)
            self._last["penalty/term"] = float(stats["penalty"])
        self._last["loss/critic"] = _scalar(loss)
        self._check("loss/critic", self._last["loss/critic"], j)
        if pen is not None:
            self._check("penalty", self._last["penalty"], j)
        self._apply_grads(total, self.d_params, self.d_opt, "critic", j)
        self._last_batch = (real, fake)

    def generator_step(self):
        n = self.tc["generator_batch_size"] or self.tc["batch_size"]
        loss = self.loss.generator_loss(self.critic(self.generator(self._noise(n))))
        self._last["loss/generator"] = _scalar(loss)
        self._check("loss/generator", self._last["loss/generator"])
        self._apply_grads(loss, self.g_params, self.g_opt, "generator")

    def train_step(self):
        """One generator step with its critic steps; advances ``self.step``."""
        n_critic = self.tc["critic_steps"]
        for j in range(n_critic):
            self.critic_step(self.step * n_critic + j, j)
        self.generator_step()
        self.step += 1
        if self.ema is not None:
            self.ema.update(self.step)
        self.g_sched.step()
        self.d_sched.step()

    # -- logging, samples, evaluation ---------------------------------------------------------
    def _sample_generator(self, z):
        """Generator output for ``z`` (numpy) in eval mode, from the EMA weights when enabled."""
        def run():
            was_training = self.generator.training
            self.generator.eval()
            try:
                with no_grad():
                    out = self.generator(Variable(to_device(z, self.device)))
                return out.numpy()
            finally:
                self.generator.train(was_training)
        if self.ema is not None:
            with self.ema.swapped_into(self.generator):
                return run()
        return run()

    def write_samples(self, final=False):
        """samples/step_N.png (or final.png): a grid of images, or generated-over-real points."""
        from gpgan.viz import save_image_grid, scatter_plot

        path = self.run.sample_path(None if final else self.step)
        out = self._sample_generator(self.fixed_z)
        if self.is_toy:
            real = self.fixed_real
            lo, hi = real.min(axis=0), real.max(axis=0)
            pad = 0.25 * (hi - lo)
            limits = ((lo[0] - pad[0], hi[0] + pad[0]), (lo[1] - pad[1], hi[1] + pad[1]))
            scatter_plot(path, [(real, (170, 170, 170), "real"), (out, (31, 119, 180), "generated")],
                         limits=limits, title=f"step {self.step}")
        else:
            save_image_grid(path, out, nrow=max(1, int(math.ceil(math.sqrt(len(out))))))
        if self._writer is not None:
            from PIL import Image

            with Image.open(path) as img:
                self._writer.add_image("samples", numpy.asarray(img.convert("RGB")), self.step,
                                       dataformats="HWC")
        return path

    def evaluate(self):
        """Toy data with modes: mode metrics of ``eval_samples`` generated points."""
        from gpgan.metrics import mode_metrics

        if not self.is_toy or self.sampler.means is None:
            return {}
        points = self._sample_generator(self.fixed_z)
        metrics = mode_metrics(points, self.sampler.means, self.sampler.std)
        return {f"eval/{k}": (int(v) if k == "modes" else float(v)) for k, v in metrics.items()}

    def log(self, time_per_step, evaluation):
        from gpgan.losses import gradient_norm

        real, fake = self._last_batch
        record = {"step": self.step}
        record["loss/critic"] = self._last["loss/critic"]
        record["loss/generator"] = self._last["loss/generator"]
        record["penalty"] = self._last.get("penalty", 0.0)
        record["penalty/term"] = self._last.get("penalty/term", 0.0)
        record["grad_norm/real"] = gradient_norm(self.critic, real)
        record["grad_norm/fake"] = gradient_norm(self.critic, fake)
        record["lr/generator"] = float(self.g_opt.lr)
        record["lr/critic"] = float(self.d_opt.lr)
        record.update(evaluation)
        record["time_per_step"] = time_per_step
        self.run.append_metrics(record)
        if self._writer is not None:
            for key, value in record.items():
                if key != "step" and math.isfinite(value):
                    self._writer.add_scalar(key, value, self.step)
        return record

    # -- the loop -----------------------------------------------------------------------------
    def _on_signal(self, signum, frame):
        if self._interrupt is not None:  # second Ctrl-C: stop now, without a checkpoint
            raise KeyboardInterrupt
        self._interrupt = "interrupted (Ctrl-C)" if signum == signal.SIGINT else "terminated (SIGTERM)"

    def _summary(self, started):
        records = self.run.read_metrics()
        final = {k: v for k, v in records[-1].items() if k not in TIMING_KEYS + ("step",)} if records else {}
        best = {}
        for key, direction in EVAL_BEST.items():
            values = [r[key] for r in records if key in r]
            if values:
                best[key] = max(values) if direction == "max" else min(values)
        return {"status": "finished", "steps": self.step, "wall_time_s": self.wall_time,
                "final": final, "best": best}

    def fit(self):
        """Train from ``self.step`` to ``train.steps``, writing into the run folder.

        Returns:
            the final.json summary.

        Raises:
            TrainingInterrupted: after Ctrl-C / SIGTERM / ``train.stop_after`` (checkpoint saved).
            NonFiniteLossError: when a loss becomes NaN/inf (no checkpoint of it is saved).
        """
        from tqdm import tqdm

        tc = self.tc
        self._writer = _make_writer(self.run.path, purge_step=self.step or None)
        handlers = {}
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                handlers[sig] = signal.signal(sig, self._on_signal)
            except ValueError:  # not the main thread
                pass
        parent = os.environ.get(PARENT_ENV, "")
        self._parent_pid = int(parent) if parent.isdigit() else None
        bar = tqdm(total=self.total_steps, initial=self.step, disable=True if self.quiet else None,
                   unit="step", dynamic_ncols=True, desc=os.path.basename(self.run.path))
        started = time.perf_counter()
        try:
            last_time, last_step = time.perf_counter(), self.step
            while self.step < self.total_steps:
                self.train_step()
                bar.update(1)
                step, last = self.step, self.step == self.total_steps
                evaluation = {}
                if self.is_toy and (last or (tc["eval_interval"] and step % tc["eval_interval"] == 0)):
                    evaluation = self.evaluate()
                if last or step % tc["log_interval"] == 0 or evaluation:
                    now = time.perf_counter()
                    record = self.log((now - last_time) / max(1, step - last_step), evaluation)
                    last_time, last_step = now, step
                    bar.set_postfix({"D": f"{record['loss/critic']:.3f}", "G": f"{record['loss/generator']:.3f}"},
                                    refresh=False)
                if tc["sample_interval"] and step % tc["sample_interval"] == 0:
                    self.write_samples()
                if self._parent_pid is not None and os.getppid() != self._parent_pid:
                    self._interrupt = self._interrupt or f"the launching process {self._parent_pid} exited"
                stop = self._interrupt or (
                    "stopped by train.stop_after" if tc["stop_after"] and step == tc["stop_after"] and not last
                    else None)
                if last or stop or (tc["checkpoint_interval"] and step % tc["checkpoint_interval"] == 0):
                    self.wall_time += time.perf_counter() - started
                    started = time.perf_counter()
                    path = self.save_checkpoint()
                    if stop:
                        raise TrainingInterrupted(step, path, stop)
            self.write_samples(final=True)
            self.wall_time += time.perf_counter() - started
            summary = self._summary(started)
            self.run.write_final(summary)
            return summary
        finally:
            bar.close()
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
            if self._writer is not None:
                self._writer.close()
                self._writer = None


def _make_writer(logdir, purge_step=None):
    """A tensorboardX SummaryWriter (None if tensorboardX cannot be imported)."""
    try:
        from tensorboardX import SummaryWriter
    except Exception:  # an optional nicety: metrics.jsonl holds the same numbers
        return None
    return SummaryWriter(logdir=logdir, purge_step=purge_step, flush_secs=30)
