"""The process settings of a command-line tool (:func:`gpgan.configure_process`)."""


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
