"""Whether operations are recorded into the graph (``no_grad``, ``enable_grad``)."""
class _Mode:
    # A plain module-level object, not thread-local: reading it is on every op's hot path.
    grad_enabled = True


_mode = _Mode()


def is_grad_enabled():
    """True when new operations are recorded for backward."""
    return _mode.grad_enabled


class set_grad_enabled:
    """Context in which recording is switched on or off; restores the previous state on exit.

    A small class rather than ``contextlib.contextmanager``: the engine enters it on every
    backward, and a generator-based context costs several times more.
    """

    __slots__ = ("enabled", "previous")

    def __init__(self, enabled):
        self.enabled = bool(enabled)

    def __enter__(self):
        self.previous = _mode.grad_enabled
        _mode.grad_enabled = self.enabled

    def __exit__(self, *exc):
        _mode.grad_enabled = self.previous
        return False


def no_grad():
    """Context in which nothing is recorded: results have no creator and need no memory for backward.

    >>> with gpgan.no_grad():
    ...     y = model(x)          # y.requires_grad is False
    """
    return set_grad_enabled(False)


def enable_grad():
    """Context that records operations again, inside an outer ``no_grad``."""
    return set_grad_enabled(True)
