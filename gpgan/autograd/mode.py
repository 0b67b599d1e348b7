"""Whether operations are recorded into the graph (``no_grad``, ``enable_grad``)."""
import contextlib


class _Mode:
    # A plain module-level object, not thread-local: reading it is on every op's hot path.
    grad_enabled = True


_mode = _Mode()


def is_grad_enabled():
    """True when new operations are recorded for backward."""
    return _mode.grad_enabled


@contextlib.contextmanager
def set_grad_enabled(enabled):
    """Context in which recording is switched on or off; restores the previous state on exit."""
    previous = _mode.grad_enabled
    _mode.grad_enabled = bool(enabled)
    try:
        yield
    finally:
        _mode.grad_enabled = previous


def no_grad():
    """Context in which nothing is recorded: results have no creator and need no memory for backward.

    >>> with gpgan.no_grad():
    ...     y = model(x)          # y.requires_grad is False
    """
    return set_grad_enabled(False)


def enable_grad():
    """Context that records operations again, inside an outer ``no_grad``."""
    return set_grad_enabled(True)
