"""What a run shows of itself while it trains: metrics records (metrics.jsonl and TensorBoard),
sample grids or scatter plots from fixed noise, and evaluations of the generator (mode metrics of
toy data, the image metrics of ``eval.metrics``).

Everything here reads the device; the loop calls it between steps. Sampling and evaluating use
generators of their own, seeded from ``train.seed``, so they never shift the training streams:
a run with image metrics trains exactly as the same run without them.

metrics.jsonl holds one record per logged step::

    step, loss/critic, loss/generator, penalty, penalty/term, grad_norm/real, grad_norm/fake,
    lr/generator, lr/critic [, schedule/...] [, augment/p, augment/rt] [, eval/..., eval_std/...], time_per_step

The ``schedule/`` keys are the numbers that R3GAN's schedules move, where a run schedules them:
``schedule/penalty_weight``, ``schedule/beta2_generator``, ``schedule/beta2_critic`` and
``schedule/ema_half_life_images`` (the values the next step uses). ``augment/p`` and
``augment/rt`` (ADA only): the probability of each op after the step (adaptive: as adjusted in it;
fixed, linear and cosine: the p the step used, set from the step count as it began), and the last
adjustment's ``r_t = E[sign(D(real))]`` (null before the first, and when p does not adapt).

``time_per_step`` (seconds per generator step since the previous record, training alone: the
evaluations, samples and checkpoints between are not counted) and, on the records of image
evaluations, ``time_eval_features`` (seconds to generate ``eval.samples`` images and take their
Inception features) and ``time_eval_scores`` (seconds for the metrics from those features) are the
keys that depend on the machine's speed (:data:`TIMING_KEYS`).
"""
import contextlib
import math
import os
import time

import numpy

from gpgan.backend import stream
from gpgan.losses import gradient_norm
from gpgan.metrics import is_better, mode_metrics
from gpgan.train.sampling import batches, class_grid, generate

__all__ = ["Monitor", "TIMING_KEYS"]

#: keys of metrics.jsonl whose values depend on timing (excluded when comparing runs)
TIMING_KEYS = ("time_per_step", "time_eval_features", "time_eval_scores")
#: the augmentation's keys (ADA's probability and r_t), when the step reports them
AUGMENT_KEYS = ("augment/p", "augment/rt")


def _make_writer(logdir, purge_step=None):
    """A :class:`TensorBoardEvents` in ``logdir`` (None if tensorboardX cannot be imported)."""
    try:
        return TensorBoardEvents(logdir, purge_step)
    except ImportError:  # an optional nicety: metrics.jsonl holds the same numbers
        return None


class TensorBoardEvents:
    """A TensorBoard events file written in the caller's thread, with tensorboardX's record
    format and summaries. (tensorboardX's SummaryWriter writes from a thread of its own: on a
    full disk that thread dies with a traceback, and the next writes block forever on its full
    queue.) An OSError of a write names the events file.

    ``purge_step``: TensorBoard hides the events of earlier files from that step on (a resumed
    run writes them again), as SummaryWriter's ``purge_step`` does."""

    def __init__(self, logdir, purge_step=None):
        from tensorboardX.event_file_writer import EventsWriter
        from tensorboardX.proto.event_pb2 import Event, SessionLog
        from tensorboardX.summary import image, scalar

        self._event, self._scalar, self._image = Event, scalar, image
        self._file = EventsWriter(os.path.join(logdir, "events"))  # writes the file's version record
        self.path = getattr(self._file, "_file_name", logdir)
        if purge_step is not None:
            now = time.time()
            self._write(Event(step=purge_step, wall_time=now, file_version="brain.Event:2"))
            self._write(Event(step=purge_step, wall_time=now, session_log=SessionLog(status=SessionLog.START)))
            self.flush()

    def add_scalar(self, tag, value, step):
        self._write(self._event(summary=self._scalar(tag, value), step=step, wall_time=time.time()))

    def add_image(self, tag, image, step, dataformats="HWC"):
        self._write(self._event(summary=self._image(tag, image, dataformats=dataformats), step=step,
                                wall_time=time.time()))

    def _write(self, event):
        self._named(self._file.write_event, event)

    def flush(self):
        self._named(self._file.flush)

    def close(self):
        self._named(self._file.close)

    def _named(self, write, *args):
        try:
            write(*args)
        except OSError as exc:
            if exc.filename is None:
                exc.filename = self.path
            raise


class Monitor:
    """Logs, samples and evaluates one run.

    Args:
        parts: the run's :class:`gpgan.train.build.Components`.
        run: its :class:`gpgan.train.run.RunFolder`.
        writes: False for the processes of a data-parallel run other than rank 0: they build the
            records (the averaging is collective) but write, sample and evaluate nothing.
        average: name -> value to name -> mean over the run's processes, for the values measured
            on this process's slice of the batch (the critic's input-gradient norms); None: one
            process.
        images: the run's :class:`~gpgan.train.evaluation.ImageMetrics` (None: none asked for).
    """

    def __init__(self, parts, run, writes=True, average=None, images=None):
        self.parts, self.run = parts, run
        self.writes = writes
        self.average = average
        tc = parts.config["train"]
        seed = tc["seed"]
        n_fixed = tc["eval_samples"] if parts.is_toy else tc["n_samples"]
        self.fixed_noise = stream(seed, "fixed_noise").standard_normal(
            (n_fixed, parts.latent_dim)).astype(numpy.float32)
        self.fixed_real = parts.sampler.sample(n_fixed, stream(seed, "fixed_real")) if parts.is_toy else None
        self.images = images
        # The image metrics' noise: fixed, so successive evaluations differ only by the generator.
        self.eval_noise = None if images is None else stream(seed, "eval_noise").standard_normal(
            (parts.config["eval"]["samples"], parts.latent_dim)).astype(numpy.float32)
        self.writer = None
        self.latest_eval, self.latest_eval_step = {}, None

    # -- TensorBoard ----------------------------------------------------------------------------
    def open(self, step):
        """Start writing TensorBoard events; events logged after ``step`` by an earlier attempt
        of the run are dropped (a resumed run rewrites them), the step's own are kept."""
        if self.writes:
            # A run resumed from step 0 (no checkpoint left) drops all the earlier attempt's events.
            earlier = step or self.run.has_events()
            self.writer = _make_writer(self.run.path, purge_step=step + 1 if earlier else None)

    def close(self):
        """Close the events file; its OSError (a full disk) is raised after the writer is let go."""
        writer, self.writer = self.writer, None
        if writer is not None:
            writer.close()

    # -- the generator's output ------------------------------------------------------------------
    @contextlib.contextmanager
    def _sampling_generator(self, use_ema=True):
        """The generator in eval mode, holding the EMA weights when kept and ``use_ema`` (restored
        afterwards)."""
        generator, ema = self.parts.generator, self.parts.ema if use_ema else None
        with ema.swapped_into(generator) if ema is not None else contextlib.nullcontext():
            was_training = generator.training
            generator.eval()
            try:
                yield generator
            finally:
                generator.train(was_training)

    def generate(self, noise, labels=None, use_ema=True):
        """Generator output (NumPy) for ``noise`` (NumPy) in eval mode, from the EMA weights when
        kept and ``use_ema``, else from the raw weights (``labels``: a conditional generator's
        classes)."""
        with self._sampling_generator(use_ema) as generator:
            return generate(generator, noise, self.parts.device, labels=labels)

    @property
    def evaluates(self):
        """Whether the run has evaluations: toy data (mode metrics), or images with ``eval.metrics``."""
        return self.parts.is_toy or self.images is not None

    def evaluate(self, step, stop=None):
        """The step's evaluation: the mode metrics of the generated fixed-noise points (toy data with
        modes), or the image metrics of ``eval.samples`` images from fixed noise with their two
        timing keys (``time_eval_features``, ``time_eval_scores``); {} otherwise.

        ``stop``: asked between the image metrics' batches; a reason from it raises
        :class:`~gpgan.train.evaluation.EvaluationStopped` (the generator is left as it was).
        The mode metrics take milliseconds and are not stopped."""
        sampler = self.parts.sampler
        if not self.writes:
            return {}
        timing = {}
        if self.images is not None:
            with self._sampling_generator() as generator:
                self.latest_eval = self.images.score(batches(generator, self.eval_noise, self.parts.device), stop)
            timing = {f"time_eval_{part}": seconds for part, seconds in self.images.last_seconds.items()}
        elif self.parts.is_toy and sampler.means is not None:
            metrics = mode_metrics(self.generate(self.fixed_noise), sampler.means, sampler.std)
            self.latest_eval = {f"eval/{k}": (int(v) if k == "modes" else float(v)) for k, v in metrics.items()}
        else:
            return {}
        self.latest_eval_step = step
        return {**self.latest_eval, **timing}

    def write_samples(self, step, final=False, log=True):
        """samples/step_N.png (or final.png): a grid of images captioned with the step, the raw
        weights' grid beside the EMA's when an EMA is kept, upscaled to a readable size; or
        generated over real points titled with the step's evaluation (when the step was
        evaluated). ``log``: also show it in TensorBoard (not twice for one step)."""
        from gpgan.viz import grid_picture, save_picture, scatter_samples

        path = self.run.sample_path(None if final else step)
        if not self.writes:
            return path
        n, classes = len(self.fixed_noise), self.parts.num_classes
        labels, cols = (None, max(1, int(math.ceil(math.sqrt(n))))) if classes is None else class_grid(n, classes)
        out = self.generate(self.fixed_noise, labels)
        if self.parts.is_toy:
            scatter_samples(path, self.fixed_real, out, title=self._sample_title(step))
        else:
            panels = [("raw weights", out)]
            if self.parts.ema is not None:
                panels = [("raw weights", self.generate(self.fixed_noise, labels, use_ema=False)), ("EMA weights", out)]
            save_picture(path, grid_picture(panels, cols, caption=f"step {step}"))  # conditional: a row per class
        if self.writer is not None and log:
            from PIL import Image

            with Image.open(path) as img:
                self.writer.add_image("samples", numpy.asarray(img.convert("RGB")), step, dataformats="HWC")
            self.writer.flush()
        return path

    def _sample_title(self, step):
        """``"step 500: 25/25 modes, 83% high quality, reverse KL 0.010"`` (the metrics only when
        this step was evaluated)."""
        title = f"step {step}"
        ev = self.latest_eval if self.latest_eval_step == step else {}
        if "eval/modes" in ev:
            title += (f": {ev['eval/modes']}/{len(self.parts.sampler.means)} modes, "
                      f"{100 * ev['eval/high_quality']:.0f}% high quality, reverse KL {ev['eval/reverse_kl']:.3f}")
        return title

    # -- metrics records -------------------------------------------------------------------------
    def _scheduled(self, step):
        """The ``schedule/`` keys of the numbers this run schedules, at ``step`` steps done."""
        parts, out = self.parts, {}
        if parts.penalty_weight is not None:
            out["schedule/penalty_weight"] = parts.penalty_weight.value_at(step)
        for who, sched in (("generator", parts.g_sched), ("critic", parts.d_sched)):
            if getattr(sched, "beta2_curve", None) is not None:
                out[f"schedule/beta2_{who}"] = sched.beta2_at(step)
        half_life = getattr(parts.ema, "half_life", None)
        if half_life is not None:
            out["schedule/ema_half_life_images"] = half_life.value_at(step)
        return out

    def measure(self, step, last, real, fake, labels=(None, None)):
        """The metrics record of ``step`` without its evaluation and timing (see
        :meth:`write_record`). In a data-parallel run every process calls it (the gradient norms
        are averaged over them).

        ``last``: the latest value of each step output (device scalars or floats); ``real`` and
        ``fake``: the last critic batch, whose input-gradient norms are logged (``labels``: a
        conditional run's labels of the two, which its critic reads).
        """
        record = {"step": step}
        record["loss/critic"] = float(last["loss/critic"])
        record["loss/generator"] = float(last["loss/generator"])
        record["penalty"] = float(last.get("penalty", 0.0))
        record["penalty/term"] = float(last.get("penalty/term", 0.0))
        critic = self.parts.critic
        real_labels, fake_labels = labels or (None, None)
        with _buffers_kept(critic):  # a logged step trains as any other (spectral norm's u, v)
            norms = {"grad_norm/real": gradient_norm(critic if real_labels is None else
                                                     (lambda x: critic(x, real_labels)), real),
                     "grad_norm/fake": gradient_norm(critic if fake_labels is None else
                                                     (lambda x: critic(x, fake_labels)), fake)}
        record.update({k: float(v) for k, v in (self.average(norms) if self.average is not None else norms).items()})
        record["lr/generator"] = float(self.parts.g_opt.lr)
        record["lr/critic"] = float(self.parts.d_opt.lr)
        record.update(self._scheduled(step))
        for key in AUGMENT_KEYS:
            if key in last:
                value = float(last[key])
                record[key] = value if math.isfinite(value) else None
        return record

    def write_record(self, measured, evaluation, time_per_step):
        """Append the record of :meth:`measure` completed with the step's ``evaluation`` and
        ``time_per_step`` to metrics.jsonl and TensorBoard (rank 0 of a data-parallel run);
        returns it. The timing keys come last."""
        timing = {k: evaluation[k] for k in TIMING_KEYS if k in evaluation}
        record = {**measured, **{k: v for k, v in evaluation.items() if k not in timing},
                  "time_per_step": time_per_step, **timing}
        if not self.writes:
            return record
        self.run.append_metrics(record)
        if self.writer is not None:
            step = record["step"]
            for key, value in record.items():
                if key != "step" and value is not None and math.isfinite(value):
                    self.writer.add_scalar(key, value, step)
            self.writer.flush()
        return record

    @staticmethod
    def summary(records, steps, wall_time):
        """final.json's content: status, steps, wall time, the last record's values and the best
        value of every evaluation metric (by its direction)."""
        final = {k: v for k, v in records[-1].items() if k not in TIMING_KEYS + ("step",)} if records else {}
        best = {}
        for record in records:
            for key, value in record.items():
                if key.startswith("eval/") and is_better(key, value, best.get(key)):
                    best[key] = value
        return {"status": "finished", "steps": steps, "wall_time_s": wall_time, "final": final, "best": best}


@contextlib.contextmanager
def _buffers_kept(module):
    """Put ``module``'s buffers back as they were after the block: a training-mode forward
    advances spectral norm's power iteration (and batch norm's running statistics), which a
    measurement must not do, or the logging interval would change the run."""
    saved = [(b, b.copy()) for _, b in module.named_buffers()]
    try:
        yield
    finally:
        for buffer, value in saved:
            buffer[...] = value
