"""What the command-line tools share of argparse: the argument types (``type=``) and a parser whose
errors take one line."""
import argparse


def truncation(text):
    """An argparse type: ``--truncation T``, a number > 0 (see
    :func:`gpgan.train.sampling.check_truncation`, whose message it gives)."""
    from gpgan.train.sampling import check_truncation

    try:
        return check_truncation(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def whole_number(least):
    """An argparse type: a whole number ``>= least``; anything else exits 2 with
    ``argument --x: must be at least LEAST, got N`` (or ``expected a whole number, got 'TEXT'``)."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"must be at least {least}, got {value}")
        return value
    return parse


class Parser(argparse.ArgumentParser):
    """argparse's parser whose errors take one line on stderr, ``prog: error: message``, and exit
    with status 2 (argparse's own prints its whole usage block first). An unknown option or a
    missing argument also names where the accepted ones are listed: ``prog --help``."""

    POINT_TO_HELP = ("unrecognized arguments", "the following arguments are required", "ambiguous option",
                     "expected one argument")

    def error(self, message):
        if any(phrase in message for phrase in self.POINT_TO_HELP):
            message = f"{message} (`{self.prog} --help` lists what is accepted)"
        self.exit(2, f"{self.prog}: error: {message}\n")
