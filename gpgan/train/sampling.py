"""Trained generators out of run folders: load one from a checkpoint (its EMA weights or the raw
ones) and draw from it in batches of bounded memory."""
import os

import numpy

from gpgan.autograd import Variable, no_grad
from gpgan.backend import to_device
from gpgan.checkpoint import load_checkpoint
from gpgan.optim import EMA
from gpgan.train.run import RunFolder

__all__ = ["resolve_source", "skipped_note", "load_generator", "batches", "generate", "class_grid", "DEFAULT_BATCH"]

#: generator outputs computed at once when drawing many samples
DEFAULT_BATCH = 500


def resolve_source(source, skipped=None):
    """``(run folder, checkpoint path)`` for a run folder (its newest readable checkpoint) or a
    checkpoint file inside a run's checkpoints/. ``skipped``: a list that receives ``(path,
    reason)`` of the run's newer checkpoints that did not read back (see :func:`skipped_note`).

    Raises:
        FileNotFoundError: naming ``source`` when it is neither, or when the run has no readable
            checkpoint.
    """
    if os.path.isdir(source):
        run = RunFolder(source)
        if not run.exists():
            raise FileNotFoundError(f"{source} is not a run folder (it has no config.yaml)")
        step, path, damaged = run.latest_readable_checkpoint()
        if path is None:
            why = f" ({len(damaged)} damaged: {damaged[0][1]})" if damaged else ""
            raise FileNotFoundError(f"{run.checkpoints_dir} holds no readable checkpoint (ckpt_N.npz){why}")
        if skipped is not None:
            skipped.extend(damaged)
        return run, path
    if not os.path.isfile(source):
        raise FileNotFoundError(f"{source} is neither a run folder nor a checkpoint file")
    run = RunFolder(os.path.dirname(os.path.dirname(os.path.abspath(source))))
    if not run.exists():
        raise FileNotFoundError(f"{source} is not a checkpoint inside a run folder (RUN/checkpoints/ckpt_N.npz)")
    return run, source


def skipped_note(skipped, used):
    """One line telling that the newer checkpoints ``skipped`` (``[(path, reason)]``) did not read
    back and ``used`` was taken instead; None when none was skipped."""
    if not skipped:
        return None
    names = ", ".join(os.path.basename(path) for path, _ in skipped)
    return (f"{names} did not read back ({skipped[0][1]}); using the newest readable checkpoint, "
            f"{os.path.basename(used)}")


def load_generator(run, checkpoint, use_ema=None, device="cpu"):
    """``(generator in eval mode, config, whether the EMA weights are in it)``.

    ``use_ema``: None takes the EMA when the run kept one.
    """
    from gpgan.train.build import make_generator

    config = run.read_config()
    generator = make_generator(config).to(device)
    has_ema = config["train"]["ema"]["enabled"]
    if use_ema is None:
        use_ema = has_ema
    if use_ema and not has_ema:
        raise ValueError(f"the run {run.path} kept no EMA of the generator (train.ema.enabled is false); "
                         "use --no-ema")
    emas = {"generator": EMA(generator)} if use_ema else {}
    load_checkpoint(checkpoint, {"generator": generator}, {}, emas=emas)
    if use_ema:
        emas["generator"].copy_to(generator)
    generator.eval()
    return generator, config, use_ema


def batches(generator, noise, device="cpu", batch_size=DEFAULT_BATCH, labels=None):
    """Yield the generator's output (NumPy, float32) for ``noise`` (N, latent), ``batch_size``
    rows at a time, without recording a graph: memory stays bounded by one batch. ``labels``:
    a conditional generator's classes (N,) ints; None lets it take its own (``i mod K`` per batch)."""
    noise = numpy.asarray(noise, dtype=numpy.float32)
    with no_grad():
        for start in range(0, len(noise), batch_size):
            z = Variable(to_device(noise[start:start + batch_size], device))
            if labels is None:
                yield generator(z).numpy()
            else:
                yield generator(z, to_device(numpy.asarray(labels[start:start + batch_size]), device)).numpy()


def generate(generator, noise, device="cpu", batch_size=DEFAULT_BATCH, labels=None):
    """All of :func:`batches`' output, concatenated: (N, ...) float32."""
    return numpy.concatenate(list(batches(generator, noise, device, batch_size, labels)))


def class_grid(n, num_classes):
    """``(labels, columns)`` of a grid of ``n`` images with one row per class: ``num_classes``
    rows of ``ceil(n / num_classes)`` images, row r of class r (the last row may be short)."""
    cols = max(1, -(-n // num_classes))
    return numpy.arange(n) // cols % num_classes, cols
