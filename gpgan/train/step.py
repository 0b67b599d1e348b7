"""The training step: critic updates with the gradient penalty, the generator update, the EMA and
the learning-rate schedules, as one function of (state, inputs) on the device.

:class:`TrainingStep` never reads the device (no ``float()``, ``bool()`` or host copy of an array),
so it can be replayed as a whole (a CUDA graph) or wrapped by a communicator that sums gradients
over processes (:meth:`TrainingStep.reduce_gradients`). Its results are device scalars that the
loop reads when it logs.

CUDA graphs (``graph=True``): each kind of step (which critic steps are penalized, whether the EMA
still copies, the input shapes) runs eagerly the first time (compiling its kernels), is captured the
second time (:class:`gpgan.backend.graph.CapturedStep`) and replayed from then on, its inputs
copied into the captured step's input arrays. What changes from step to step on the host (the step number,
learning rates, Adam's bias corrections, counters) goes through
:func:`~gpgan.backend.graph.host_effect`, and every state the step keeps is updated in place, so
a replay computes exactly what the eager step computes.

Non-finite values: each update checks, on the device, that its loss (and penalty) are finite and
that every parameter's squared gradient norm is finite (a finite loss can still send gradients
whose squares overflow, which would turn Adam's second moment infinite for good). The first
failure is recorded in :attr:`TrainingStep.fault` and closes a gate that every later update is
applied through, so no non-finite update ever reaches the weights; the loop reads the record at
its next read of the device (before logging, sampling, evaluating or saving) and stops the run,
naming the step.
"""
import enum
from dataclasses import dataclass

import numpy

import gpgan
from gpgan.autograd import Variable, no_grad
from gpgan.backend import get_array_module
from gpgan.backend.graph import CapturedStep, host_effect, host_number
from gpgan.backend.precision import matmul_precision

__all__ = ["TrainingStep", "StepResult", "Fault", "FaultCode", "FAULTS"]


class FaultCode(enum.IntEnum):
    """What went non-finite, as the fault record on the device stores it (0: nothing)."""

    NONE = 0
    CRITIC_LOSS = 1
    PENALTY = 2
    CRITIC_GRADIENT = 3
    GENERATOR_LOSS = 4
    GENERATOR_GRADIENT = 5


#: what a fault code in :attr:`TrainingStep.fault` names, and whose parameters the count is of;
#: a network's checks run in this order (the first failing one wins)
FAULTS = {FaultCode.CRITIC_LOSS: ("loss/critic", "critic"), FaultCode.PENALTY: ("penalty", "critic"),
          FaultCode.CRITIC_GRADIENT: ("gradient", "critic"),
          FaultCode.GENERATOR_LOSS: ("loss/generator", "generator"),
          FaultCode.GENERATOR_GRADIENT: ("gradient", "generator")}
#: the gradient check of each network: its value is a count of bad parameters, not a loss
_GRADIENT_FAULTS = {"critic": FaultCode.CRITIC_GRADIENT, "generator": FaultCode.GENERATOR_GRADIENT}
# The fault record: (generator step, critic step or -1, code, value, bad parameters, parameters).
_RECORD = 6


@dataclass
class StepResult:
    """What one generator step leaves for the loop, all on the device.

    ``values``: name -> 0-d array for "loss/critic", "loss/generator" and, when the step
    penalized its last penalized critic step, "penalty" and "penalty/term". ``real`` and ``fake``:
    the last critic step's batches (for logging the critic's input-gradient norms).
    """

    values: dict
    real: object
    fake: object
    labels: tuple = (None, None)  # a conditional run's labels of ``real`` and ``fake``


@dataclass
class Fault:
    """The first non-finite value of a run, read back from the device."""

    step: int           # 1-based generator step
    critic_step: int    # 0-based critic step within it, or -1 for the generator's update
    what: str           # "loss/critic", "penalty", "gradient" or "loss/generator"
    owner: str          # "critic" or "generator"
    value: float        # the loss or penalty value (nan / inf)
    bad: int            # parameters with a non-finite squared gradient norm
    parameters: int     # parameters with a gradient

    def describe(self, critic_steps):
        """``"<what> at step N (critic step j of J)"``."""
        if self.what == "gradient":
            what = (f"gradient of the {self.owner} ({self.bad} of {self.parameters} parameters have an "
                    "infinite or NaN squared norm)")
        else:
            what = f"{self.what} ({self.value})"
        where = f"step {self.step}"
        if self.critic_step >= 0:
            where += f" (critic step {self.critic_step + 1} of {critic_steps})"
        return f"{what} at {where}"


class TrainingStep:
    """One generator step with its critic steps (see the module docstring).

    Args:
        parts: the :class:`gpgan.train.build.Components` (models, optimizers, schedules, EMA,
            loss, penalty); their state is what the step changes.
        critic_steps: critic updates per generator update.
        step: generator steps already done (a resumed run starts there).
        graph: capture and replay each kind of step as a CUDA graph (CuPy arrays only).
        precision: of the step's float32 products on CUDA, 'float32' or 'bf16'
            (:mod:`gpgan.backend.precision`).

    Attributes:
        step: generator steps done.
        fault: None, or a device array holding the first fault's record (read it with
            :meth:`read_fault`).
    """

    def __init__(self, parts, critic_steps, step=0, graph=False, precision="float32"):
        self.parts = parts
        self.precision = precision  # of the step's products (gpgan.backend.precision)
        self.graph = bool(graph)
        self._graphs = {}   # kind of step -> CapturedStep (rehearsed), then (CapturedStep, its input arrays)
        self.critic_steps = int(critic_steps)
        self.step = int(step)
        self.generator, self.critic = parts.generator, parts.critic
        self.g_params = list(self.generator.parameters())
        self.d_params = list(self.critic.parameters())
        self.loss, self.penalty = parts.loss, parts.penalty
        # The augmentation (None: none), and whether a penalty on the loss's own points
        # differentiates at the un-augmented images, through the augmentation.
        self.augment = getattr(parts, "augment", None)
        self.through_augment = self.augment is not None and parts.config["augment"]["penalty_points"] == "unaugmented"
        self.fault = None
        self._ok = None  # 0-d bool on the device: no fault so far

    # -- hooks --------------------------------------------------------------------------------
    def reduce_gradients(self, grads, who, values, counts=None):
        """``(grads, values, counts)`` as the update should see them: the gradient arrays (None for
        unused parameters), the values computed with them (name -> 0-d array: the loss, and on
        penalized critic steps the penalty and its term) and ``counts`` (None, or a 1-d float64
        array of whole numbers: ADA's sign and image counts of the minibatch). Identity here; a
        data-parallel step averages the gradients and values over its processes and sums the
        counts, in one all-reduce, so that every process checks, applies and logs the same numbers
        and adapts the same p (``who``: "critic" or "generator")."""
        return grads, values, counts

    # -- the step -----------------------------------------------------------------------------
    def __call__(self, inputs):
        """Train one generator step on ``inputs`` (:class:`gpgan.train.feed.StepInputs` on the
        device); returns a :class:`StepResult` (in graph mode, the same arrays at every replay of a
        kind of step, holding the latest values)."""
        if not self.graph:
            return self._run(inputs)
        kind = self.kind(inputs)
        entry = self._graphs.get(kind)
        if entry is None:  # first of its kind: eager, as the capture will run it
            captured = self._graphs[kind] = CapturedStep(self._run)
            return captured.rehearse(inputs)
        if isinstance(entry, CapturedStep):  # second: captured (and run)
            result = entry.capture(inputs)
            self._graphs[kind] = (entry, inputs)
            return result
        captured, fixed = entry
        _copy_inputs(inputs, fixed)
        return captured.replay()

    def kind(self, inputs):
        """What a captured step depends on besides its inputs' values: one CUDA graph is captured
        for each kind met (a hashable tuple)."""
        ema = self.parts.ema
        # Which critic steps are penalized is its own part: R1's and R2's draws are empty dicts, so
        # the input arrays of a lazily penalized step and of a plain one have the same shapes.
        return (tuple((name, a.shape) for name, a in inputs.named_arrays()),
                tuple(c.draws is not None for c in inputs.critic),
                ema is not None and self.step + 1 < ema.start_step)

    def _run(self, inputs):
        with matmul_precision(self.precision):
            return self._run_steps(inputs)

    def _run_steps(self, inputs):
        values = {}
        real = fake = None
        self._step_number = host_effect(self._number_of_step)
        host_effect(self._set_penalty_weight)
        if self.augment is not None:
            self.augment.begin_step(lambda: self.step)
        for j, critic_inputs in enumerate(inputs.critic):
            real, fake = self._critic_update(j, critic_inputs, values)
        self._generator_update(inputs, values)
        if self.augment is not None:
            values.update(self.augment.log_values())
        host_effect(self._count_step)
        if self.parts.ema is not None:
            self.parts.ema.update(self.step)
        host_effect(self._advance_schedules)
        last = inputs.critic[-1]
        return StepResult(values, real, fake, (last.labels, last.fake_labels))

    # host effects (run again before each replay of a captured step)
    def _number_of_step(self):
        return host_number(self.step + 1, numpy.float64)

    def _set_penalty_weight(self):
        """The scheduled penalty weight for the images seen before this step (R3GAN's gamma)."""
        if self.parts.penalty_weight is not None:
            self.penalty.weight = self.parts.penalty_weight.value_at(self.step)

    def _count_step(self):
        self.step += 1

    def _advance_schedules(self):
        self.parts.g_sched.step()
        self.parts.d_sched.step()

    def _critic_update(self, j, inputs, values):
        with no_grad():
            fake_data = self.generator(Variable(inputs.noise), *_given(inputs.fake_labels)).data
        # R1 and R2 (and r1r2, both) differentiate the critic at the loss's own points: then those
        # points are leaves that require grad and the loss's forward serves the penalty too.
        shared = self.penalty.shared_points if inputs.draws is not None else None
        real, fake, seen_real, seen_fake = self._critic_points(inputs, fake_data, shared)
        d_real = self.critic(seen_real, *_given(inputs.labels))
        d_fake = self.critic(seen_fake, *_given(inputs.fake_labels))
        # ADA's counts of this minibatch (adaptive p; else None) travel with the update's
        # all-reduce, and p is adapted after it: nothing reads p between here and there.
        counts = self.augment.count(d_real.data) if self.augment is not None else None
        loss = self.loss.critic_loss(d_real, d_fake)
        total, computed = loss, {"loss/critic": loss.data}
        if inputs.draws is not None:
            forward = {"real": (real, d_real), "fake": (fake, d_fake),
                       "real+fake": ((real, d_real), (fake, d_fake))}.get(shared)
            pen, term, _ = self.penalty.evaluate(self.critic, real, fake, inputs.draws, forward=forward)
            total = loss + pen
            computed["penalty"], computed["penalty/term"] = pen.data, term.data
        computed, counts = self._apply(total, self.d_params, self.parts.d_opt, "critic", j, computed, counts)
        values.update(computed)
        if counts is not None:
            self.augment.adapt(counts)
        return real.data, fake.data

    def _critic_points(self, inputs, fake_data, shared):
        """``(real, fake, seen_real, seen_fake)``: the penalty's real and fake points (leaves; those
        ``shared`` names, "real", "fake" or "real+fake", require grad) and what the critic sees.
        Without an augmentation the two are the same; with one, the critic sees augmented images,
        and the points are the augmented images too, or (``through_augment``) the un-augmented
        ones, differentiated through the augmentation."""
        augment = self.augment
        if augment is not None and not self.through_augment:
            with no_grad():
                real_data = augment(inputs.real, inputs.augment_real).data
                fake_data = augment(fake_data, inputs.augment_fake).data
        else:
            real_data = inputs.real
        names = shared.split("+") if shared else ()
        real = Variable(real_data, requires_grad="real" in names)
        fake = Variable(fake_data, requires_grad="fake" in names)
        if not self.through_augment:
            return real, fake, real, fake
        return real, fake, augment(real, inputs.augment_real), augment(fake, inputs.augment_fake)

    def _generator_update(self, inputs, values):
        """The generator's update on ``inputs`` (StepInputs): its noise and labels, and for a
        pairing loss (rpgan) its real batch, whose critic values are a constant here (the
        generator's gradient reaches only D(fake)); with an augmentation both batches are
        augmented as the critic step's are."""
        d_real = None
        if self.loss.pairs_real:
            with no_grad():
                real = Variable(inputs.real)
                if self.augment is not None:
                    real = self.augment(real, inputs.augment_real)
                d_real = self.critic(real, *_given(inputs.real_labels))
        fake = self.generator(Variable(inputs.noise), *_given(inputs.labels))
        if self.augment is not None:
            fake = self.augment(fake, inputs.augment)
        loss = self.loss.generator_loss(self.critic(fake, *_given(inputs.labels)), d_real)
        computed, _ = self._apply(loss, self.g_params, self.parts.g_opt, "generator", -1,
                                  {"loss/generator": loss.data})
        values.update(computed)

    def _apply(self, loss, params, optimizer, who, critic_step, computed, counts=None):
        """Differentiate ``loss``, check it and the ``computed`` values (name -> 0-d array), and
        update ``params`` through the run's gate; returns the values and ``counts`` as reduced
        (:meth:`reduce_gradients`)."""
        grads = gpgan.grad(loss, params, allow_unused=True)
        arrays, computed, counts = self.reduce_gradients([None if g is None else g.data for g in grads], who,
                                                         computed, counts)
        # The loss and penalty checks of this update, in FAULTS' order (the first failing one wins).
        checks = [(code, computed[what]) for code, (what, owner) in FAULTS.items()
                  if owner == who and what in computed and code not in _GRADIENT_FAULTS.values()]
        gradients = [a for a in arrays if a is not None]
        xp = get_array_module(loss.data)
        if gradients:
            # One dot product per parameter: an infinite or NaN squared norm flags the gradient.
            squared = xp.empty(len(gradients), dtype=numpy.result_type(*gradients))
            for k, a in enumerate(gradients):  # not xp.stack: CuPy copies its list of pointers from the host
                squared[k] = xp.vdot(a.ravel(), a.ravel())
            bad = (~xp.isfinite(squared)).sum()
            checks = checks + [(_GRADIENT_FAULTS[who], bad)]
        else:
            bad = xp.zeros((), dtype=numpy.int64)
        gate = self._check(xp, critic_step, checks, bad, len(gradients))
        for p, a in zip(params, arrays):
            p.grad = a
        optimizer.step(gate=gate)
        for p in params:
            p.grad = None
        return computed, counts

    def _check(self, xp, critic_step, checks, bad, n_params):
        """Record the first failing check (code, value) and return the updated gate."""
        code = xp.zeros((), dtype=numpy.int64)  # FaultCode.NONE
        value = xp.zeros((), dtype=numpy.float64)
        for check_code, x in reversed(checks):  # the first failing check in list order wins
            counts = check_code in _GRADIENT_FAULTS.values()  # a count of bad parameters, else a value
            failed = (x > 0) if counts else ~xp.isfinite(x)
            code = xp.where(failed, int(check_code), code)  # a plain int: the array libraries' scalar
            if not counts:
                value = xp.where(failed, x.astype(numpy.float64), value)
        record = xp.empty(_RECORD, dtype=numpy.float64)  # (filled in place: see _apply on xp.stack)
        for k, v in enumerate((self._step_number, critic_step, code, value, bad, n_params)):
            record[k] = v
        failed = code != int(FaultCode.NONE)
        if self._ok is None:
            self.fault = xp.zeros(_RECORD, dtype=numpy.float64)
            self._ok = xp.ones((), dtype=bool)
        # in place: a captured step reads and writes these arrays at every replay
        self.fault[...] = xp.where(self._ok & failed, record, self.fault)
        self._ok &= ~failed
        return self._ok

    # -- reading back (the loop's business) ------------------------------------------------------
    def read_fault(self):
        """The run's first :class:`Fault`, or None. Reads the device."""
        if self.fault is None:
            return None
        record = [float(v) for v in numpy.asarray(gpgan.backend.to_device(self.fault, "cpu"))]
        code = FaultCode(int(record[2]))
        if code == FaultCode.NONE:
            return None
        what, owner = FAULTS[code]
        return Fault(step=int(record[0]), critic_step=int(record[1]), what=what, owner=owner, value=record[3],
                     bad=int(record[4]), parameters=int(record[5]))


def _given(labels):
    """The extra arguments of a model call: ``(labels,)`` in a conditional run, else none."""
    return () if labels is None else (labels,)


def _copy_inputs(inputs, fixed):
    """Copy the arrays of ``inputs`` into the same-shaped arrays of ``fixed`` (both StepInputs)."""
    for source, target in zip(inputs.arrays(), fixed.arrays()):
        target[...] = source
