"""``EMA``: an exponential moving average of a network's weights (for sampling a generator).

Works with any object that has ``named_parameters()`` (yielding ``(name, Variable)``) and
``named_buffers()`` (yielding ``(name, array)``), such as :class:`gpgan.nn.Module`. The average is
kept in the parameters' dtype and on their device; buffers (BatchNorm running statistics,
spectral-norm vectors) are not averaged but copied, so the averaged network is self-consistent.
"""
import contextlib

from gpgan.backend import device_of, to_device
from gpgan.backend.graph import host_effect, host_number

__all__ = ["EMA"]


def _copy_on(array, reference):
    """A copy of ``array`` on ``reference``'s device in ``reference``'s dtype."""
    return to_device(array, device_of(reference)).astype(reference.dtype, copy=True)


def _write(target, value, where):
    """Copy ``value`` into the array ``target`` in place (so every holder of ``target`` sees it)."""
    if tuple(target.shape) != tuple(value.shape):
        raise ValueError(f"EMA: entry {where!r} has shape {tuple(value.shape)} in the average but "
                         f"{tuple(target.shape)} in the module")
    target[...] = to_device(value, device_of(target)).astype(target.dtype, copy=False)


class EMA:
    """Exponential moving average of ``module``'s parameters.

    ``update(step)``: while ``step < start_step`` the average is a copy of the weights; from
    ``start_step`` on, ``avg = d * avg + (1 - d) * w`` for every parameter, with ``d = decay`` (or
    from ``half_life``, below), and with ``rampup`` ``d = min(that, (1 + n) / (10 + n))`` at the
    n-th averaging update (n from 0; TensorFlow's ExponentialMovingAverage with ``num_updates``):
    0.1 at first, 0.5 at n = 8, 0.9 at n = 80, 0.99 from n = 890, so a short run's average is not
    its initial weights. Buffers are copied on every update.

    n is :attr:`averaged`, which is checkpointed, so a resumed run ramps exactly as an
    uninterrupted one. The ramp's numbers are host numbers (:mod:`gpgan.backend.graph`), so a
    step replayed as a CUDA graph uses the current ones.

    Args:
        module: the network to average (read by :meth:`update`).
        decay: in [0, 1]; 0.999 averages over about the last 1000 updates.
        start_step: the first step that averages (before it the average follows the weights).
        rampup: ramp the decay up as above (False: the decay from the first averaging update).
        half_life: None (``decay`` at every update), or an object whose ``value_at(step)`` is the
            half-life in images after ``step`` updates (a constant or a ramp, such as R3GAN's
            cosine from 0 to 5M images: :class:`gpgan.optim.CosineValue`); update number ``k``
            (1-based) then uses ``decay = 0.5 ** (images_per_step / half_life.value_at(k - 1))``,
            R3GAN's ``ema_beta`` (a half-life of 0 copies the weights).
        images_per_step: the images one update stands for (with ``half_life``).

    Attributes:
        params: ``name -> array``, the averaged parameters.
        buffers: ``name -> array``, the buffers copied at the last update.
        num_updates: how many times :meth:`update` was called.
        averaged: how many of those updates averaged (did not copy).
    """

    def __init__(self, module, decay=0.999, start_step=0, rampup=False, half_life=None, images_per_step=1):
        if not 0.0 <= decay <= 1.0:
            raise ValueError(f"EMA: decay must be in [0, 1], got {decay}")
        if int(start_step) != start_step or start_step < 0:
            raise ValueError(f"EMA: start_step must be a non-negative integer, got {start_step!r}")
        self.module = module
        self.decay = float(decay)
        self.start_step = int(start_step)
        self.rampup = bool(rampup)
        self.half_life = half_life
        self.images_per_step = float(images_per_step)
        self.num_updates = 0
        self.averaged = 0
        self.params = {name: p.data.copy() for name, p in module.named_parameters()}
        self.buffers = {name: b.copy() for name, b in module.named_buffers()}

    def _lookup(self, table, name, kind):
        try:
            return table[name]
        except KeyError:
            raise KeyError(f"EMA: the module has a {kind} {name!r} that the average does not know "
                           f"(known: {', '.join(map(repr, table)) or 'none'})") from None

    def decay_at(self, step):
        """The decay of update number ``step`` (1-based; the training step makes one per generator
        step): ``decay``, or from the half-life after ``step - 1`` steps."""
        if self.half_life is None:
            return self.decay
        return 0.5 ** (self.images_per_step / max(self.half_life.value_at(step - 1), 1e-8))

    def ramped_decay(self):
        """The decay the coming averaging update uses: :meth:`decay_at` of update number
        ``num_updates + 1``, ramped with ``rampup`` (see the class docstring)."""
        decay = self.decay_at(self.num_updates + 1)
        if self.rampup:
            n = self.averaged
            decay = min(decay, (1.0 + n) / (10.0 + n))
        return decay

    def _numbers(self, dtype):
        """``(decay, 1 - decay)`` of the coming update as the kernels read them. Host numbers read
        from the live counts (not from an argument, which a captured CUDA graph would replay
        unchanged): each replay gets the decay of its own update."""
        decay = self.ramped_decay()
        return host_number(decay, dtype), host_number(1.0 - decay, dtype)

    def update(self, step):
        """Fold the module's current weights into the average (see the class docstring)."""
        copy_only = step < self.start_step
        numbers = {}  # dtype -> (decay, 1 - decay)
        for name, p in self.module.named_parameters():
            avg = self._lookup(self.params, name, "parameter")
            w = p.data
            if device_of(avg) != device_of(w):  # the module moved (module.to(device))
                avg = self.params[name] = _copy_on(avg, w)
            if copy_only:
                avg[...] = w
            else:  # in the average's dtype: float32 stays float32
                if avg.dtype not in numbers:
                    numbers[avg.dtype] = host_effect(self._numbers, avg.dtype)
                decay, rest = numbers[avg.dtype]
                avg *= decay
                avg += rest * w
        for name, b in self.module.named_buffers():
            current = self._lookup(self.buffers, name, "buffer")
            if device_of(current) != device_of(b) or current.shape != b.shape:
                self.buffers[name] = b.copy()
            else:
                current[...] = b
        if not copy_only:
            host_effect(self._count_averaged)
        host_effect(self._count_update)

    def _count_averaged(self):
        self.averaged += 1

    def _count_update(self):
        self.num_updates += 1

    def copy_to(self, module):
        """Write the averaged parameters and the stored buffers into ``module``'s arrays, in place
        (on the module's device, in its dtypes)."""
        targets = self._targets(module)
        for (kind, name), target in targets.items():
            _write(target, (self.params if kind == "parameter" else self.buffers)[name], name)

    def _targets(self, module):
        """``(kind, name) -> live array`` of ``module``, checked against the average's entries."""
        targets = {("parameter", name): p.data for name, p in module.named_parameters()}
        targets.update({("buffer", name): b for name, b in module.named_buffers()})
        for kind, table in (("parameter", self.params), ("buffer", self.buffers)):
            for name in table:
                if (kind, name) not in targets:
                    raise KeyError(f"EMA: the average has a {kind} {name!r} that the module lacks")
        for kind, name in targets:
            self._lookup(self.params if kind == "parameter" else self.buffers, name, kind)
        return targets

    @contextlib.contextmanager
    def swapped_into(self, module=None):
        """Context manager: ``module`` (default: the averaged one) holds the averaged weights
        inside the block; its own parameters and buffers are restored exactly on exit, also when
        the block raises. Yields the module::

            with ema.swapped_into(generator):
                images = generator(z)
        """
        module = self.module if module is None else module
        targets = self._targets(module)
        saved = {key: target.copy() for key, target in targets.items()}
        try:
            self.copy_to(module)
            yield module
        finally:
            for key, target in self._targets(module).items():
                target[...] = saved[key]

    # -- state --------------------------------------------------------------------------------
    def state_dict(self):
        """Flat dict: ``decay``, ``start_step``, ``num_updates``, ``averaged``, ``param.<name>``
        and ``buffer.<name>`` (copies, on the average's device)."""
        out = {"decay": self.decay, "start_step": self.start_step, "num_updates": self.num_updates,
               "averaged": self.averaged}
        out.update({f"param.{name}": a.copy() for name, a in self.params.items()})
        out.update({f"buffer.{name}": b.copy() for name, b in self.buffers.items()})
        return out

    def validate_state_dict(self, state_dict):
        """Raise ValueError naming the first entry that is missing, unexpected or of another
        shape than this average's; change nothing."""
        for key in ("decay", "start_step", "num_updates"):
            if key not in state_dict:
                raise ValueError(f"EMA.load_state_dict: missing key {key!r}")
        expected = {f"param.{n}": a for n, a in self.params.items()}
        expected.update({f"buffer.{n}": b for n, b in self.buffers.items()})
        for key, current in expected.items():
            if key not in state_dict:
                raise ValueError(f"EMA.load_state_dict: missing key {key!r}")
            shape = tuple(state_dict[key].shape)
            if shape != tuple(current.shape):
                raise ValueError(f"EMA.load_state_dict: entry {key!r} has shape {shape} but the "
                                 f"average has {tuple(current.shape)}")
        for key in state_dict:
            if key not in expected and key not in ("decay", "start_step", "num_updates", "averaged"):
                raise ValueError(f"EMA.load_state_dict: unexpected key {key!r}")

    def load_state_dict(self, state_dict):
        """Restore from :meth:`state_dict` output (validated first; arrays are copied onto the
        current average's device and dtype). ``rampup`` is not state: it stays the constructor's."""
        self.validate_state_dict(state_dict)
        self.decay = float(state_dict["decay"])
        self.start_step = int(state_dict["start_step"])
        self.num_updates = int(state_dict["num_updates"])
        # A checkpoint written before ``averaged`` existed came from the trainer, which updates
        # once per step from step 1, copying while step < start_step.
        self.averaged = int(state_dict["averaged"]) if "averaged" in state_dict else \
            max(self.num_updates - max(self.start_step - 1, 0), 0)
        self.params = {n: _copy_on(state_dict[f"param.{n}"], a) for n, a in self.params.items()}
        self.buffers = {n: _copy_on(state_dict[f"buffer.{n}"], b) for n, b in self.buffers.items()}

    def __repr__(self):
        return (f"EMA(decay={self.decay}, start_step={self.start_step}, rampup={self.rampup}, "
                f"{len(self.params)} parameters, {len(self.buffers)} buffers)")
