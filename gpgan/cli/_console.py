"""How a command-line tool speaks: one line on stderr each, ``prog: message``, ``prog: warning:
message`` or ``prog: error: message``, and an exception's text without Python's words."""

import sys


class Console:
    """The messages of the tool ``prog`` (e.g. ``"gpgan-eval"``)."""

    def __init__(self, prog):
        self.prog = prog

    def speaks(self):
        """Whether this process prints (a data-parallel trainer's other ranks do not)."""
        return True

    def say(self, message, after_progress=False):
        """Print ``prog: message``; ``after_progress``: start a new line first (after a progress
        bar that Ctrl-C cut off)."""
        if self.speaks():
            lead = "\n" if after_progress else ""
            print(f"{lead}{self.prog}: {message}", file=sys.stderr)

    def warn(self, message):
        self.say(f"warning: {message}")

    def error(self, message, status=1):
        """Print ``prog: error: message``; returns ``status``, the tool's exit status."""
        self.say(f"error: {message}")
        return status

    @staticmethod
    def text(exc):
        """An exception's message; an OSError as ``PATH: reason`` without Python's ``[Errno N]``."""
        from gpgan.files import error_text

        return error_text(exc)
