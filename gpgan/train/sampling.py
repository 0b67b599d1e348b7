"""Trained generators out of run folders: load one from a checkpoint (its EMA weights or the raw
ones), draw their latent noise (optionally truncated) and their output in batches of bounded
memory."""
import math
import os

import numpy

from gpgan.autograd import Variable, no_grad
from gpgan.backend import to_device
from gpgan.checkpoint import load_checkpoint
from gpgan.optim import EMA
from gpgan.train.run import RunFolder

__all__ = ["resolve_source", "skipped_note", "load_generator", "batches", "generate", "class_grid", "DEFAULT_BATCH",
           "check_truncation", "latent_batches", "draw_latents", "LATENT_BLOCK"]

#: generator outputs computed at once when drawing many samples
DEFAULT_BATCH = 500
#: rows of truncated latents drawn at once: whole blocks, whatever the batches asked for, so the
#: numbers depend on neither the batch size nor the number of samples
LATENT_BLOCK = 1024
# Below this truncation, uniform proposals on [-t, t] are accepted more often than standard normal
# ones: sqrt(2 pi) (2 Phi(t) - 1) / (2 t) against 2 Phi(t) - 1, equal where t = sqrt(pi / 2).
_UNIFORM_PROPOSALS_BELOW = math.sqrt(math.pi / 2)


def check_truncation(truncation):
    """``truncation`` as a float; a ValueError saying what is accepted unless it is None or a
    finite number > 0."""
    if truncation is None:
        return None
    try:
        value = float(truncation)
    except (TypeError, ValueError):
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"the truncation must be a number > 0 (each latent component is drawn within [-t, t]), "
                         f"got {truncation!r}")
    return value


def latent_batches(rng, n, dim, batch_size=DEFAULT_BATCH, truncation=None):
    """Latent noise for ``n`` samples, ``batch_size`` rows at a time: arrays (rows, ``dim``),
    float64, drawn from ``rng`` (a NumPy Generator) as they are asked for.

    ``truncation`` None: the standard normal, the numbers of one ``rng.standard_normal((n, dim))``
    (NumPy's Generator draws consecutive chunks from the same stream). A number t > 0: the
    truncation trick (Brock et al. 2019, BigGAN): each component from the standard normal
    restricted to [-t, t], by exact rejection (uniform proposals on [-t, t] accepted with
    probability exp(-z^2 / 2) for t < sqrt(pi / 2), else standard normal ones kept inside); drawn
    in whole blocks of :data:`LATENT_BLOCK` rows, so that the first rows are the same whatever
    ``n`` and ``batch_size``.
    """
    truncation = check_truncation(truncation)
    if truncation is None:
        for start in range(0, n, batch_size):
            yield rng.standard_normal((min(batch_size, n - start), dim))
        return
    left, given = numpy.empty((0, dim)), 0  # rows of the last block drawn, not given yet
    while given < n:
        # The batch first: one too large for memory fails at once (MemoryError, or NumPy's
        # ValueError past what it can address), as the untruncated draw does.
        batch = numpy.empty((min(batch_size, n - given), dim))
        filled = min(len(left), len(batch))
        batch[:filled], left = left[:filled], left[filled:]
        while filled < len(batch):
            block = _truncated_block(rng, dim, truncation)
            take = min(len(batch) - filled, LATENT_BLOCK)
            batch[filled:filled + take], left = block[:take], block[take:]
            filled += take
        given += len(batch)
        yield batch


def draw_latents(rng, n, dim, truncation=None):
    """All of :func:`latent_batches`' rows at once: (n, ``dim``) float64."""
    if check_truncation(truncation) is None or n == 0:
        return rng.standard_normal((n, dim))
    return next(latent_batches(rng, n, dim, n, truncation))


def _truncated_block(rng, dim, t):
    """(:data:`LATENT_BLOCK`, dim) components of the standard normal restricted to [-t, t]."""
    size = LATENT_BLOCK * dim
    if t < _UNIFORM_PROPOSALS_BELOW:
        def propose(k):
            z = rng.uniform(-t, t, k)
            return numpy.where(rng.random(k) < numpy.exp(-0.5 * z * z), z, numpy.nan)
    else:
        def propose(k):
            z = rng.standard_normal(k)
            return numpy.where(numpy.abs(z) <= t, z, numpy.nan)
    values = propose(size)
    rejected = numpy.flatnonzero(numpy.isnan(values))
    while len(rejected):
        values[rejected] = propose(len(rejected))
        rejected = rejected[numpy.isnan(values[rejected])]
    return values.reshape(LATENT_BLOCK, dim)


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
