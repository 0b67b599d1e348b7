"""gpgan's global random generator, used by initializers and dropout when no generator is given,
and the named random streams of a run.

Random numbers are always drawn on the CPU with NumPy's PCG64 and copied to the device, so a seed
gives the same numbers on every device.

A run draws from one generator per use, each seeded with ``(seed, stream number[, index])``
(:func:`stream`), so no two uses draw the same numbers. The weights' stream is the global
generator reseeded with ``manual_seed(seed)``: NumPy's seed sequence of ``seed`` alone, which is
that of ``(seed, 0)``.
"""
import numpy

_rng = numpy.random.default_rng(0)


def manual_seed(seed):
    """Reseed the global generator; returns it."""
    global _rng
    _rng = numpy.random.default_rng(seed)
    return _rng


def get_rng(rng=None):
    """``rng`` if given, else the global generator."""
    return _rng if rng is None else rng


#: A run's random streams and their numbers, one owner for all of them.
STREAMS = {
    "weights": 0,       # the initial weights (manual_seed(seed))
    "toy_data": 1,      # a toy loader's samples
    "trainer": 2,       # noise, classes, penalty and augmentation numbers of every step
    "fixed_noise": 3,   # the noise of the sample grids
    "fixed_real": 4,    # a toy run's fixed real samples
    "eval_noise": 5,    # the noise of the image metrics' samples
    "epoch_order": 6,   # an image loader's order and flips of epoch e: (seed, 6, e)
}


def stream(seed, name, *index):
    """A new NumPy generator of run seed ``seed``'s stream ``name`` (a key of :data:`STREAMS`),
    with ``index`` (whole numbers) for streams made afresh per epoch."""
    return numpy.random.default_rng([int(seed), STREAMS[name], *(int(i) for i in index)])
