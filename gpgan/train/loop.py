"""The training loop: step after step until ``train.steps``, with logging, samples, evaluations,
checkpoints and a clean stop on Ctrl-C, SIGTERM, ``train.stop_after`` or a non-finite value.

The pieces live beside it: :mod:`~gpgan.train.build` makes the components from the config,
:mod:`~gpgan.train.feed` draws each step's inputs, :mod:`~gpgan.train.step` does the step's
maths on the device, :mod:`~gpgan.train.monitor` logs, samples and evaluates, and
:class:`~gpgan.train.run.RunFolder` owns the files.

Randomness, all seeded from ``train.seed`` and all restored on resume: the initial weights (gpgan's
global generator, reseeded with the seed and checkpointed for layers such as dropout); latent
noise and the penalty's random numbers (the feed's generator, "trainer" in checkpoints); data
order and flips, or toy samples (the loader); the fixed noise of samples and evaluations (the
monitor's own). The same config, seed and device give the same run, bit for bit on the same
machine and install (another CPU model, other CPU extras or another process count agree to float32
rounding at first, then diverge as chaotic training does; the manifest records each), and a
resumed run continues exactly as the uninterrupted one.
"""
import contextlib
import os
import signal
import time

import gpgan
from gpgan.backend import random as global_random
from gpgan.backend import stream
from gpgan.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from gpgan.files import describe_os_error
from gpgan.kernels import configure_process
from gpgan.metrics import is_better
from gpgan.train.build import build_components
from gpgan.train.config import best_metric
from gpgan.train.evaluation import EvaluationStopped, ImageMetrics
from gpgan.train.feed import InputFeed
from gpgan.train.interrupt import install_signal_handlers, parent_to_watch
from gpgan.train.monitor import Monitor
from gpgan.train.step import TrainingStep

__all__ = ["Trainer", "TrainingInterrupted", "NonFiniteLossError", "RunWriteError"]

class TrainingInterrupted(Exception):
    """Raised after a checkpoint was saved because of Ctrl-C, SIGTERM or ``train.stop_after``;
    ``owes_evaluation``: the interrupt came during the step's evaluation, which a resume does
    first."""

    def __init__(self, step, checkpoint, reason, owes_evaluation=False):
        self.step, self.checkpoint, self.reason = step, checkpoint, reason
        self.owes_evaluation = owes_evaluation
        owed = "; its evaluation was left off and a resume does it first" if owes_evaluation else ""
        super().__init__(f"{reason} at step {step}{owed}; checkpoint saved to {checkpoint}")


class RunWriteError(Exception):
    """A file of the run could not be written (a full disk, a lost mount) during training. What
    was being written was left out whole (atomic writes; metrics.jsonl cut back to its last whole
    record); the checkpoints written before stay. The message names the file, the step and the
    last good checkpoint."""

    def __init__(self, step, error, last_checkpoint):
        self.step, self.error, self.last_checkpoint = step, error, last_checkpoint
        keep = (f"the last good checkpoint is {last_checkpoint[1]} (step {last_checkpoint[0]})"
                if last_checkpoint else "no checkpoint was written yet")
        super().__init__(f"at step {step}: {describe_os_error(error)}; {keep}")


class NonFiniteLossError(RuntimeError):
    """A loss, penalty or gradient became NaN or infinite; no checkpoint was written for it."""


class Trainer:
    """Trains the run a config describes into its run folder.

    Args:
        config: a resolved config (:func:`gpgan.train.config.load_config`).
        run: the :class:`gpgan.train.run.RunFolder` it trains into (nothing is written to it
            before :meth:`fit`).
        quiet: no progress bar.
        dry_run: build and check everything, but compute no reference features for the image
            metrics (``--dry-run``: such a trainer is not for training).

    Everything a run needs is had here, before training: the data, the models, and for image
    metrics the Inception weights and the reference's statistics (computed once, then cached).

    Raises:
        InceptionWeightsError, FileNotFoundError, ValueError: what the image metrics need cannot
            be had (offline: the message says where to put the weights).
    """

    def __init__(self, config, run, quiet=False, dry_run=False):
        if not dry_run:
            configure_process()  # BLAS spin (where not loaded yet), threads, host memory kept
        self.config, self.run, self.quiet = config, run, quiet
        self.tc = tc = config["train"]
        self.parts = build_components(config, progress=not quiet)
        self.image_metrics = ImageMetrics.for_run(config, progress=not quiet, compute=not dry_run)
        self.step_fn = TrainingStep(self.parts, tc["critic_steps"],
                                    graph=self.parts.device == "cuda" and tc["cuda_graph"],
                                    precision=tc["precision"])
        penalty = self.parts.penalty if config["penalty"]["type"] != "none" else None
        self.feed = InputFeed(self.parts.loader, stream(tc["seed"], "trainer"), penalty,
                              self.parts.latent_dim, tc["batch_size"], tc["generator_batch_size"],
                              tc["critic_steps"], generator_reals=self.parts.loss.pairs_real,
                              num_classes=self.parts.num_classes, augment=self.parts.augment)
        self.monitor = Monitor(self.parts, run, images=self.image_metrics)
        self.best_metric = best_metric(config)
        self.best_value = None  # the best evaluation of best_metric so far (checkpoints/best.npz)
        # train.patience's count: evaluations in a row that did not beat patience_mark, the value at the
        # last improvement by more than train.patience_min_delta (with 0, patience_mark is best_value)
        self.evals_since_best = 0
        self.patience_mark = None
        self.wall_time = 0.0
        self.last = {}          # the latest value of each step output (device scalars or floats)
        self._last_batch = None
        self._last_labels = (None, None)
        self._interrupt = None
        self._parent_pid = None
        # The step an interrupt stopped during its evaluation, left to finish (a checkpoint's
        # "owed"): {"record": Monitor.measure's, "time_per_step": s, "sample": bool}; else None.
        self._owed = None
        self._clock = None  # perf_counter when wall_time was last brought up to date

    @property
    def step(self):
        """Generator steps done."""
        return self.step_fn.step

    @property
    def recorded_through(self):
        """The last step whose metrics record belongs to the state loaded (:meth:`load_checkpoint`):
        its step, or the one before when that step still owes its evaluation and record. A resume
        cuts metrics.jsonl and TensorBoard back to it, so that a crash while the owed step was
        being finished cannot leave its record twice."""
        return self.step - 1 if self._owed is not None else self.step

    def manifest_entries(self):
        """What this trainer adds to manifest.json and its resume entries: what the image metrics
        compare with (when there are any) and the number of processes (``world_size``; a
        data-parallel run adds the processes' hosts and devices)."""
        if self.image_metrics is None:
            return {"world_size": 1}
        return {"world_size": 1, "image_metrics": self.image_metrics.provenance()}

    # -- one step -----------------------------------------------------------------------------
    def train_step(self):
        """Draw the next step's inputs, train one generator step on them; advances :attr:`step`."""
        result = self.step_fn(self.feed.next(self.step, self.parts.device))
        self.last.update(result.values)
        self._last_batch = (result.real, result.fake)
        self._last_labels = result.labels

    # -- state --------------------------------------------------------------------------------
    def _state(self):
        modules, optimizers, emas = self.parts.state_objects()
        return modules, optimizers, emas, {"trainer": self.feed.rng, "global": global_random}

    def save_checkpoint(self, path=None):
        """Write the whole training state to ``path`` (default: the run's checkpoint of this
        step, keeping the last ``train.keep_checkpoints``); refused when a weight is not finite."""
        self._raise_on_fault()
        bad = _first_non_finite(self.parts)
        if bad is not None:
            raise NonFiniteLossError(f"weight {bad} is not finite at step {self.step}; no checkpoint written")
        periodic = path is None
        path = self.run.checkpoint_path(self.step) if periodic else path
        meta = {"step": self.step, "data": self.parts.loader.state_dict(), "wall_time_s": self.wall_time,
                "last": {k: float(v) for k, v in self.last.items()}, "gpgan_version": gpgan.__version__,
                "best": {"metric": self.best_metric, "value": self.best_value,
                         "evals_since": self.evals_since_best, "patience_mark": self.patience_mark}}
        if self._owed is not None:
            meta["owed"] = self._owed
        if self.parts.augment is not None:  # ADA's p and its adaptation's sums (floats, exact in JSON)
            meta["augment"] = self.parts.augment.state_dict()
        modules, optimizers, emas, rngs = self._state()
        save_checkpoint(path, modules, optimizers, emas=emas, rngs=rngs, meta=meta)
        if periodic:
            self.run.prune_checkpoints(self.tc["keep_checkpoints"])
        return path

    def load_checkpoint(self, path):
        """Restore every state from ``path``; returns its step."""
        modules, optimizers, emas, rngs = self._state()
        meta = load_checkpoint(path, modules, optimizers, emas=emas, rngs=rngs)
        self.parts.loader.load_state_dict(meta["data"])
        if self.parts.augment is not None:
            self.parts.augment.load_state_dict(_augment_state(path, meta))
        self.step_fn.step = int(meta["step"])
        self.wall_time = float(meta.get("wall_time_s", 0.0))
        self.last = dict(meta.get("last", {}))
        best = meta.get("best") or {}
        same = best.get("metric") == self.best_metric
        self.best_value = best.get("value") if same else None
        self.evals_since_best = int(best.get("evals_since", 0)) if same else 0
        # checkpoints before train.patience_min_delta: their mark was the best value
        self.patience_mark = best.get("patience_mark", self.best_value) if same else None
        self._owed = meta.get("owed")
        return self.step

    def _keep_best(self, evaluation):
        """Save checkpoints/best.npz when ``evaluation`` beats the best value of the best metric,
        and count it for train.patience unless it beats the mark by more than train.patience_min_delta."""
        value = evaluation.get(self.best_metric)
        if value is None:
            return
        if is_better(self.best_metric, value, self.patience_mark, by=self.tc["patience_min_delta"]):
            self.patience_mark, self.evals_since_best = value, 0
        else:
            self.evals_since_best += 1
        if is_better(self.best_metric, value, self.best_value):
            self.best_value = value
            self.save_checkpoint(self.run.best_checkpoint_path)

    def _patience_spent(self):
        """Why the run stops early (train.patience evaluations without a better best metric), or None."""
        patience = self.tc["patience"]
        if not patience or self.evals_since_best < patience:
            return None
        delta = self.tc["patience_min_delta"]
        if delta:  # the count runs against the mark, which the best may have passed by less than delta
            on, best = f"{self.patience_mark:.6g} by more than {delta:g}", f"; best {self.best_value:.6g}"
        else:
            on, best = f"{self.best_value:.6g}", ""
        return (f"stopped early: {self.best_metric} did not improve on {on} in {self.evals_since_best} "
                f"evaluations (train.patience: {patience}{best})")

    # -- stops --------------------------------------------------------------------------------
    def _raise_on_fault(self):
        """Stop the run if a step met a non-finite value (reads the device)."""
        fault = self.step_fn.read_fault()
        if fault is None:
            return
        last = self.run.latest_checkpoint()
        keep = f"the last good checkpoint is {last[1]} (step {last[0]})" if last else "no checkpoint was written yet"
        raise NonFiniteLossError(f"non-finite {fault.describe(self.tc['critic_steps'])}; training stopped before "
                                 f"applying it, {keep}. Lower the learning rates or raise the penalty weight.")

    def _on_signal(self, signum, frame):
        if self._interrupt is not None:  # second Ctrl-C: stop now, without a checkpoint
            raise KeyboardInterrupt
        self._interrupt = "interrupted (Ctrl-C)" if signum == signal.SIGINT else "terminated (SIGTERM)"

    def _interrupted(self):
        """Why the run must stop at once (Ctrl-C, SIGTERM, the launching process gone), or None;
        also what stops an evaluation between its batches."""
        if self._parent_pid is not None and os.getppid() != self._parent_pid:
            self._interrupt = self._interrupt or f"the launching process {self._parent_pid} exited"
        return self._interrupt

    def _stop_reason(self, step, last):
        reason = self._interrupted()
        if reason:
            return reason
        if self.tc["stop_after"] and step == self.tc["stop_after"] and not last:
            return "stopped by train.stop_after"
        return None

    def _evaluate(self, step):
        """The step's evaluation; raises EvaluationStopped when an interrupt came during it."""
        return self.monitor.evaluate(step, stop=self._interrupted)

    # -- the loop -----------------------------------------------------------------------------
    def fit(self):
        """Train from :attr:`step` to ``train.steps``, writing into the run folder.

        Returns:
            the final.json summary.

        Raises:
            TrainingInterrupted: after Ctrl-C / SIGTERM / ``train.stop_after`` (checkpoint saved).
            NonFiniteLossError: when a loss, penalty or gradient becomes NaN/inf (no checkpoint of
                it is saved).
            RunWriteError: when a file of the run cannot be written (a full disk), naming it, the
                step and the last good checkpoint.
        """
        from tqdm import tqdm

        tc, total = self.tc, self.tc["steps"]
        every = lambda n, step: n and step % n == 0  # noqa: E731
        try:
            return self._fit_steps(tc, total, every, tqdm)
        finally:
            self.run.release()  # (the lock its start, resume or fork took: the run is written)

    def _fit_steps(self, tc, total, every, tqdm):
        """:meth:`fit` without the lock's release."""
        self.monitor.open(self.recorded_through)
        handlers = install_signal_handlers(self._on_signal)
        self._parent_pid = parent_to_watch()
        bar = tqdm(total=total, initial=self.step, disable=True if self.quiet else None, unit="step",
                   dynamic_ncols=True, desc=os.path.basename(self.run.path))
        ended = False
        try:
            try:
                summary = self._loop(tc, total, every, bar)
                ended = True
                self.monitor.close()
                return summary
            except OSError as exc:  # a full disk: name the file and the step, keep what was saved
                raise RunWriteError(self.step, exc, self.run.latest_checkpoint()) from exc
        finally:
            bar.close()
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
            if not ended:  # the error on its way out is the one to tell, not the close's
                with contextlib.suppress(OSError):
                    self.monitor.close()

    def _loop(self, tc, total, every, bar):
        """The steps of :meth:`fit` up to final.json (its returned summary)."""
        self._clock = time.perf_counter()
        early = None
        if self._owed is not None:  # the step an interrupt stopped during its evaluation: finish it
            owed = self._owed
            early = self._conclude(self.step, owed["record"], owed["time_per_step"], evaluate=True,
                                   sample=owed["sample"], checkpoint=True, stop=None, bar=bar)
        # A resumed run whose patience was spent when it stopped (Ctrl-C at that evaluation, or a
        # lower train.patience on resume) ends here, as the uninterrupted run would have.
        early = early or self._patience_spent()
        last_time, last_step = time.perf_counter(), self.step
        while self.step < total and not early:
            self.train_step()
            bar.update(1)
            step, last = self.step, self.step == total
            evaluate = self.monitor.evaluates and (last or every(tc["eval_interval"], step))
            log = last or evaluate or every(tc["log_interval"], step)
            sample = every(tc["sample_interval"], step)
            stop = self._stop_reason(step, last)
            checkpoint = last or stop or every(tc["checkpoint_interval"], step)
            if log or sample or checkpoint:
                self._raise_on_fault()  # before anything reads the weights or losses
            record = per_step = None
            if log:
                per_step = (time.perf_counter() - last_time) / max(1, step - last_step)
                record = self.monitor.measure(step, self.last, *self._last_batch, labels=self._last_labels)
            concluding = time.perf_counter()
            early = self._conclude(step, record, per_step, evaluate, sample, checkpoint, stop, bar)
            if log:  # the next record's time per step counts training alone
                last_time, last_step = time.perf_counter(), step
            else:
                last_time += time.perf_counter() - concluding
        # final.png; TensorBoard has this step's picture already where it was a sample step
        self.monitor.write_samples(self.step, final=True, log=not every(tc["sample_interval"], self.step))
        self._count_wall_time()
        return self._write_final(early)

    def _conclude(self, step, record, time_per_step, evaluate, sample, checkpoint, stop, bar):
        """Everything after step ``step``'s training: evaluate, keep the best, log ``record`` (from
        Monitor.measure; None: not a logged step), sample, checkpoint (``checkpoint``, or patience
        spent). Returns why the run ends early (train.patience), or None.

        Raises:
            TrainingInterrupted: ``stop`` (after the checkpoint); or an interrupt during the
                evaluation, which is then left off: the step's checkpoint records what the step
                still owes ("owed": its evaluation, record and samples), which a resume does first.
        """
        try:
            evaluation = self._evaluate(step) if evaluate else {}
        except EvaluationStopped as exc:
            self._owed = {"record": record, "time_per_step": time_per_step, "sample": bool(sample)}
            raise TrainingInterrupted(step, self._save_periodic(), exc.reason, owes_evaluation=True) from None
        self._owed = None
        self._keep_best(evaluation)
        early = self._patience_spent() if evaluate else None  # at the last step too: final.json says so
        if record is not None:
            record = self.monitor.write_record(record, evaluation, time_per_step)
            bar.set_postfix(_progress(record, self.monitor.latest_eval), refresh=False)
        if sample:
            self.monitor.write_samples(step)
        if checkpoint or early:
            path = self._save_periodic()
            if stop:
                raise TrainingInterrupted(step, path, stop)
        return early

    def _count_wall_time(self):
        now = time.perf_counter()
        self.wall_time += now - self._clock
        self._clock = now

    def _save_periodic(self):
        """The checkpoint of this step, its wall time brought up to date; returns its path."""
        self._count_wall_time()
        return self.save_checkpoint()

    def _write_final(self, stop=None):
        """Write final.json (from metrics.jsonl; ``stop``: why it ended before train.steps) and
        return its summary."""
        summary = Monitor.summary(self.run.read_metrics(), self.step, self.wall_time)
        if stop:
            summary["stop"] = stop
        self.run.write_final(summary)
        return summary


def _progress(record, evaluation):
    """The progress bar's postfix: critic and generator losses, the penalty, the last evaluation's
    scores (not their spreads, eval_std/...)."""
    shown = {"D": f"{record['loss/critic']:.3f}", "G": f"{record['loss/generator']:.3f}"}
    if record["penalty"]:
        shown["pen"] = f"{record['penalty']:.3g}"
    for key, value in evaluation.items():
        if key.startswith("eval/"):
            shown[key.split("/", 1)[-1]] = f"{value:.3g}" if isinstance(value, float) else str(value)
    return shown


def _augment_state(path, meta):
    """The augmentation's state in a checkpoint's ``meta``; a checkpoint of a run without an
    augmentation has none (the augment section is not among the keys a resume may change)."""
    if "augment" not in meta:
        raise CheckpointError(f"checkpoint {path} holds no augmentation state (it was written by a run without "
                              "augment.type); resume it without an augmentation")
    return meta["augment"]


def _first_non_finite(parts):
    """The name of the first generator or critic parameter holding a non-finite value, or None."""
    for prefix, module in (("generator.", parts.generator), ("critic.", parts.critic)):
        for name, p in module.named_parameters():
            xp = gpgan.backend.get_array_module(p.data)
            if not bool(xp.isfinite(p.data).all()):
                return prefix + name
    return None
