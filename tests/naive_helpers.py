"""Small helpers shared by the tests' naive (loop-by-loop) reference implementations."""


def pair(v):
    """``(v, v)`` for a number, ``tuple(v)`` for a pair: how the functions read kernel, stride, padding."""
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)
