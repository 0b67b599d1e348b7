"""Differentiable functions on Variables, each with a differentiable backward.

Users write ``import gpgan.functions as F``. Names, argument order and keywords follow
``torch.nn.functional`` where it has the same function.
"""
from gpgan.functions import _operators
from gpgan.functions.arithmetic import add, div, mul, neg, pow, sub
from gpgan.functions.array import broadcast_to, flatten, getitem, reshape, sum_to, transpose
from gpgan.functions.device import to_device
from gpgan.functions.linalg import matmul
from gpgan.functions.math import cos, exp, log, sin
from gpgan.functions.reduction import mean, sum

_operators.install()
