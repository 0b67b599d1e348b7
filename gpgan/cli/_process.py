"""The process settings of a command-line tool (:func:`gpgan.configure_process`) and the signals
that stop it."""
import contextlib
import signal


def configure(argv):
    """Make the process settings before the tool's work starts; returns None, or the one-line
    error of a malformed setting (``GPGAN_KEEP_HOST_MEMORY``, ``GPGAN_NUM_THREADS``).

    Run as a program (``argv`` None, as the console scripts and ``python -m`` call ``main``), the
    process starts again once with the settings where NumPy was loaded before they could be set,
    as importing the tool does; called with an argument list from Python (tests, notebooks), it
    goes on without restarting.
    """
    from gpgan import configure_process

    try:
        configure_process(restart=argv is None)
    except ValueError as exc:
        return str(exc)
    return None


@contextlib.contextmanager
def stopped_by_signals():
    """Within: SIGINT and SIGTERM raise KeyboardInterrupt in the main thread, so that the tool
    stops as on Ctrl-C (its outputs are staged or written atomically: nothing partial is left),
    also where SIGINT came in ignored, as for a command a script starts in the background
    (``nohup gpgan-sample ... &``). The handlers before are restored after. Off the main thread
    the process's handlers are left alone. gpgan-train installs its own (a checkpoint at the end
    of the step)."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt

    try:
        before = {sig: signal.signal(sig, handler) for sig, handler in
                  ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, interrupt))}
    except ValueError:  # not the main thread
        before = {}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
