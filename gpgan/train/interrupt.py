"""How a training process is asked to stop: SIGINT and SIGTERM, and its launcher's exit.

Either way the loop (:mod:`gpgan.train.loop`) finishes the step (an evaluation under way is left
off, and the resume does it), saves a checkpoint and exits with 130. Launchers
(:mod:`gpgan.studies`) set :data:`PARENT_ENV` in a trainer's environment through
:func:`stop_with_parent`; the loop reads it back with :func:`parent_to_watch`. This module imports
the standard library only, so a launcher takes the contract without the training code.
"""
import os
import signal

__all__ = ["PARENT_ENV", "stop_with_parent", "parent_to_watch", "install_signal_handlers"]

# When set to a process id, training stops as on SIGTERM (checkpoint, exit 130) once that process
# is no longer this one's parent. gpgan-ablate sets it: its trainers run in sessions of their own,
# so nothing else would stop them if gpgan-ablate were killed outright.
PARENT_ENV = "GPGAN_STOP_WITH_PARENT"


def stop_with_parent(env, pid=None):
    """Set in ``env`` (a trainer's environment, changed in place) that the trainer stops once
    process ``pid`` (default: this one) is no longer its parent."""
    env[PARENT_ENV] = str(os.getpid() if pid is None else pid)
    return env


def parent_to_watch(environ=None):
    """The process id in :data:`PARENT_ENV` (``os.environ`` by default), or None when unset or
    not a process id."""
    value = (os.environ if environ is None else environ).get(PARENT_ENV, "")
    return int(value) if value.isdigit() else None


def install_signal_handlers(handler):
    """Route SIGINT and SIGTERM to ``handler``; returns the previous handlers (none off the main thread)."""
    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            previous[sig] = signal.signal(sig, handler)
        except ValueError:  # not the main thread
            pass
    return previous
