"""Argument types the command-line tools share (argparse ``type=``)."""
import argparse


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
