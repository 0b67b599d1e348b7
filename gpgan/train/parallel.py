"""Data-parallel training: one run over the processes of a communicator (``mpiexec -n N
gpgan-train ...``), each training on its slice of every batch.

Every process draws the same global inputs from the run's seed (data order, noise, penalty
numbers: :class:`~gpgan.train.feed.InputFeed`) and keeps its rows (:class:`ShardedFeed`). Its
losses are means over its slice, so the mean of the processes' gradients is the gradient of the
global batch; :class:`DataParallelStep` averages them in one flat all-reduce per update, with the
update's loss and penalty values in the same buffer, so every process applies, checks (the
non-finite gate) and logs the same numbers, and Adam, the EMA, schedules and lazy regularization
run identically everywhere. ADA's adaptive p: each critic update's buffer also carries the sign and
image counts of the process's real slice, summed (not averaged), so every process adapts the same p
from the global batch's counts. Parameters start from rank 0's (broadcast). BatchNorm normalizes with
the statistics of each process's slice (as PyTorch's DDP without SyncBatchNorm), and DRAGAN's
perturbation scale is the standard deviation of the slice. The sums over the slices round
differently from one process's sums over the whole batch: an N-process run agrees with the
1-process run to float32 rounding at first and then diverges, as chaotic training does (two runs
with the same N are identical).

Rank 0 alone writes the run folder (metrics, TensorBoard, samples, evaluations, checkpoints,
final.json); the others compute with it and write nothing. Stops (Ctrl-C, SIGTERM, a dead launcher,
``train.stop_after``) are agreed on every step, so every process stops at the same step.
"""
import numpy

from gpgan.backend import device_description, get_array_module, to_device
from gpgan.train.config import ConfigError
from gpgan.train.evaluation import EvaluationStopped
from gpgan.train.loop import Trainer
from gpgan.train.monitor import Monitor
from gpgan.train.step import TrainingStep

__all__ = ["check_divisible", "ShardedFeed", "DataParallelStep", "DataParallelTrainer"]


def check_divisible(config, size):
    """Refuse batch sizes that ``size`` processes cannot split into equal slices.

    Raises:
        ConfigError: naming the batch size and the number of processes.
    """
    tc = config["train"]
    for key in ("batch_size", "generator_batch_size"):
        batch = tc[key]
        if batch is not None and batch % size:
            raise ConfigError(f"train.{key} {batch} does not split over {size} processes: give a multiple of "
                              f"{size} (each process takes train.{key} / {size} of every batch)")


class ShardedFeed:
    """Wraps an :class:`~gpgan.train.feed.InputFeed`: draws every step's global inputs as one
    process would, and keeps process ``rank``'s rows of each array (all of them have the batch
    first)."""

    def __init__(self, feed, rank, size):
        self.feed, self.rank, self.size = feed, int(rank), int(size)

    @property
    def rng(self):
        """The wrapped feed's generator (checkpointed as "trainer")."""
        return self.feed.rng

    def shard(self, array):
        """Rows ``[rank * n, (rank + 1) * n)`` of ``array`` (``n = len(array) / size``)."""
        n = len(array) // self.size
        return array[self.rank * n:(self.rank + 1) * n]

    def next(self, step, device):
        """This process's slice of generator step ``step``'s inputs, on ``device``."""
        return self.feed.draw(step).map(lambda a: to_device(numpy.ascontiguousarray(self.shard(a)), device))


class DataParallelStep(TrainingStep):
    """A :class:`~gpgan.train.step.TrainingStep` whose updates use the gradients and values
    averaged over ``comm``'s processes."""

    def __init__(self, parts, critic_steps, comm, step=0, precision="float32"):
        super().__init__(parts, critic_steps, step, precision=precision)
        self.comm = comm

    def reduce_gradients(self, grads, who, values, counts=None):
        """One buffer: every gradient flattened, then the values (by name), then the counts;
        summed over the processes in place, the gradients and values divided by their number
        (the counts stay sums), and cut back into arrays.

        The counts (ADA's signs and images: whole numbers, at most the global batch) are exact in
        the buffer's float32 or float64, and so is their sum: every process gets the counts of the
        global batch, bit for bit those one process would count on it."""
        present = [a for a in grads if a is not None]
        names = sorted(values)
        xp = get_array_module(*present, *values.values())
        dtype = xp.result_type(*present, *(values[k] for k in names))
        parts = [a.ravel().astype(dtype, copy=False) for a in present]
        parts += [xp.reshape(values[k], (1,)).astype(dtype, copy=False) for k in names]
        averaged_size = sum(a.size for a in parts)
        if counts is not None:
            parts.append(counts.astype(dtype, copy=False))
        buffer = xp.concatenate(parts)
        self.comm.all_reduce_sum(buffer)
        buffer[:averaged_size] /= self.comm.size
        reduced, offset = [], 0
        for a in grads:
            if a is None:
                reduced.append(None)
                continue
            reduced.append(buffer[offset:offset + a.size].reshape(a.shape).astype(a.dtype, copy=False))
            offset += a.size
        averaged = {}
        for k in names:
            averaged[k] = buffer[offset:offset + 1].reshape(()).astype(values[k].dtype, copy=False)
            offset += 1
        if counts is not None:
            counts = buffer[offset:].astype(counts.dtype)
        return reduced, averaged, counts


class DataParallelTrainer(Trainer):
    """A :class:`~gpgan.train.loop.Trainer` for one process of a data-parallel run.

    Args:
        config, run, quiet: as for :class:`~gpgan.train.loop.Trainer` (processes other than rank 0
            are always quiet).
        comm: the run's :class:`gpgan.parallel.Communicator` (its device one is made here: on
            CUDA, each process takes the GPU of its local rank).

    Every process must construct it together (it broadcasts rank 0's weights).

    Raises:
        ConfigError: a batch size that does not split over the processes.
    """

    def __init__(self, config, run, comm, quiet=False, dry_run=False):
        check_divisible(config, comm.size)
        self.comm = comm.for_device(config["device"])
        quiet = quiet or not comm.is_root

        def build():
            Trainer.__init__(self, config, run, quiet=quiet, dry_run=dry_run)
        # Rank 0 first: it alone downloads missing data; then the others read them.
        self.comm.on_root(build)
        self.comm.together(lambda: None if self.comm.is_root else build())
        self.step_fn = DataParallelStep(self.parts, self.tc["critic_steps"], self.comm,
                                        precision=self.tc["precision"])
        self.feed = ShardedFeed(self.feed, self.comm.rank, self.comm.size)
        self.monitor = Monitor(self.parts, run, writes=self.comm.is_root, average=self.comm.mean,
                               images=self.image_metrics)
        self._broadcast_weights()
        device = config["device"]
        self.processes = self.comm.all_gather_object(
            {"rank": self.comm.rank, "host": self.comm.host_name, "device": device,
             "device_name": device_description(device)})

    def _broadcast_weights(self):
        """Rank 0's parameters, buffers and EMA everywhere: the processes start identical."""
        for module in (self.parts.generator, self.parts.critic):
            for p in module.parameters():
                self.comm.broadcast(p.data)
            for _, b in module.named_buffers():
                self.comm.broadcast(b)
        if self.parts.ema is not None:
            for array in self.parts.ema.params.values():
                self.comm.broadcast(array)

    def manifest_entries(self):
        return {**super().manifest_entries(), "world_size": self.comm.size, "communicator": self.comm.backend,
                "processes": self.processes}

    def _stop_reason(self, step, last):
        """This process's reason, or another's: one small all-reduce per step, so that every
        process stops at the same step (and saves the same checkpoint)."""
        mine = super()._stop_reason(step, last)
        if not self.comm.all_reduce_host([mine is not None], "max")[0]:
            return None
        if mine is not None:
            self.comm.all_gather_object(mine)
            return mine
        reasons = self.comm.all_gather_object(None)
        rank, reason = next((r, text) for r, text in enumerate(reasons) if text is not None)
        return f"{reason} (on rank {rank})"

    def _evaluate(self, step):
        """Rank 0 evaluates (the others get {}); an interrupt that stopped it there stops the
        evaluation on every process, so that all save the step's checkpoint and stop together."""
        try:
            evaluation, reason = super()._evaluate(step), None
        except EvaluationStopped as exc:
            evaluation, reason = None, exc.reason
        reason = self.comm.broadcast_object(reason)
        if reason is not None:
            raise EvaluationStopped(reason if self.comm.is_root else f"{reason} (on rank 0)")
        return evaluation

    def save_checkpoint(self, path=None):
        """Rank 0 writes; the weights are the same on every process. Returns the path."""
        if self.comm.is_root:
            return super().save_checkpoint(path)
        return self.run.checkpoint_path(self.step) if path is None else path

    def _patience_spent(self):
        """Rank 0's verdict (it alone evaluates) on every process, so that all stop at one step."""
        return self.comm.broadcast_object(super()._patience_spent())

    def _write_final(self, stop=None):
        return self.comm.on_root(lambda: super(DataParallelTrainer, self)._write_final(stop))
