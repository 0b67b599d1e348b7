"""Batch iterators whose whole state fits in a small JSON-able dict, so a run can resume exactly.

* :class:`ImageLoader` walks a uint8 image array in a fresh random order every epoch, with
  optional horizontal flips. The order and the flips of epoch ``e`` are drawn from a generator
  of their own (the run's stream ``epoch_order``, index ``e``: :func:`gpgan.backend.stream`), so
  the state is just ``(epoch, position)``: resuming rebuilds the same permutation instead of
  storing it.
* :class:`ToyLoader` draws fresh samples from a 2-D toy distribution with its own generator
  (the stream ``toy_data``), whose bit-generator state is the loader's state.

Both return float32 NumPy arrays on the CPU; the trainer moves them to its device.
"""
import numpy

from gpgan.backend import stream

__all__ = ["ImageLoader", "ToyLoader", "to_unit_range", "to_uint8"]


def to_unit_range(images):
    """uint8 images (any shape) -> float32 in [-1, 1]: ``x / 127.5 - 1``."""
    return images.astype(numpy.float32) * numpy.float32(1 / 127.5) - numpy.float32(1.0)


def to_uint8(images):
    """Images in [-1, 1] (any shape, NumPy) -> uint8, rounding to the nearest level and clipping:
    the inverse of :func:`to_unit_range` (a round trip returns the same bytes), so generated
    images are quantized exactly as real ones are stored."""
    return numpy.clip((numpy.asarray(images, dtype=numpy.float64) + 1.0) * 127.5 + 0.5, 0, 255).astype(numpy.uint8)


class ImageLoader:
    """Endless batches of images, reshuffled every epoch.

    Args:
        images: uint8 array (N, 3, H, W).
        batch_size: images per batch; an epoch is ``N // batch_size`` full batches (the
            remainder of each permutation is dropped, so every batch has the same size).
        seed: seeds the per-epoch order and flips.
        hflip: flip each image horizontally with probability 1/2 (decided per epoch and image).
        labels: None, or int64 (N,) class labels of the images (class-conditional training).

    ``next()`` returns float32 (batch_size, 3, H, W) in [-1, 1]; ``next_with_labels()`` returns
    ``(images, labels)``, the same batch with its labels (int64 (batch_size,)).
    """

    #: How epoch orders are seeded: 2, the run's stream "epoch_order" with the epoch; 1, ``(seed,
    #: epoch)``, which shared numbers with other streams (until 2026-11-27). A state saved without
    #: "order" is version 1's, and its run goes on with version 1's orders: an exact resume.
    ORDER = 2

    def __init__(self, images, batch_size, seed=0, hflip=False, labels=None):
        images = numpy.asarray(images)
        if images.dtype != numpy.uint8 or images.ndim != 4:
            raise ValueError(f"ImageLoader: images must be uint8 (N, C, H, W), got {images.dtype} {images.shape}")
        if batch_size > len(images):
            raise ValueError(f"ImageLoader: batch_size {batch_size} is larger than the data set "
                             f"({len(images)} images)")
        if labels is not None:
            labels = numpy.asarray(labels, dtype=numpy.int64)
            if labels.shape != (len(images),):
                raise ValueError(f"ImageLoader: {len(images)} images but labels of shape {labels.shape}")
        self.images = images
        self.labels = labels
        self.batch_size = int(batch_size)
        self.seed = int(seed)
        self.hflip = bool(hflip)
        self.epoch = 0
        self.position = 0
        self.order = self.ORDER
        self._epoch_cache = None

    def __len__(self):
        """Batches per epoch."""
        return len(self.images) // self.batch_size

    def _epoch_plan(self, epoch):
        if self._epoch_cache is None or self._epoch_cache[0] != epoch:
            rng = (stream(self.seed, "epoch_order", epoch) if self.order == 2
                   else numpy.random.default_rng([self.seed, epoch]))
            order = rng.permutation(len(self.images))
            flips = rng.random(len(self.images)) < 0.5 if self.hflip else None
            self._epoch_cache = (epoch, order, flips)
        return self._epoch_cache[1], self._epoch_cache[2]

    def next(self):
        return self.next_with_labels()[0]

    def next_with_labels(self):
        """``(images, labels)`` of the next batch (labels None when the loader has none)."""
        if self.position + self.batch_size > len(self.images):
            self.epoch += 1
            self.position = 0
        order, flips = self._epoch_plan(self.epoch)
        sl = slice(self.position, self.position + self.batch_size)
        batch = self.images[order[sl]]
        if flips is not None:
            f = flips[sl]
            batch[f] = batch[f, :, :, ::-1]
        self.position += self.batch_size
        return to_unit_range(batch), None if self.labels is None else self.labels[order[sl]]

    __next__ = next

    def __iter__(self):
        return self

    def state_dict(self):
        return {"epoch": self.epoch, "position": self.position, "images": len(self.images), "order": self.order}

    def load_state_dict(self, state):
        """Continue where ``state`` left off; its number of images must be this loader's (a
        folder that gained or lost images would order the epochs differently: no exact resume)."""
        saved = state.get("images")
        if saved is not None and int(saved) != len(self.images):
            raise ValueError(f"the data changed: the run trained on {int(saved):,} images and now finds "
                             f"{len(self.images):,}, so it cannot continue as it would have; restore the data, or "
                             "start a new run")
        order = int(state.get("order", 1))
        if order not in (1, 2):
            raise ValueError(f"the run's data order is of version {order}, which this gpgan does not know (it "
                             "knows 1 and 2); continue it with the gpgan that wrote it")
        self.epoch = int(state["epoch"])
        self.position = int(state["position"])
        self.order = order
        self._epoch_cache = None


class ToyLoader:
    """Endless batches from a toy 2-D sampler (an object with ``sample(n, rng)``).

    ``next()`` returns float32 (batch_size, 2).
    """

    def __init__(self, sampler, batch_size, seed=0):
        self.sampler = sampler
        self.batch_size = int(batch_size)
        self.rng = stream(seed, "toy_data")

    def next(self):
        return numpy.asarray(self.sampler.sample(self.batch_size, self.rng), dtype=numpy.float32)

    __next__ = next

    def __iter__(self):
        return self

    def state_dict(self):
        return {"rng": self.rng.bit_generator.state}

    def load_state_dict(self, state):
        self.rng.bit_generator.state = state["rng"]
