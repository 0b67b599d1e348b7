"""Optimizers (Adam, SGD, RMSprop with torch semantics), learning-rate schedules, and an
exponential moving average of weights.

Owns how parameters change given their gradients, and the state that takes (moments, step
counts) with its state_dict; computing the gradients and deciding when to step belong to
:mod:`gpgan.autograd` and the trainer.

Public names: :class:`Optimizer`, :class:`Adam`, :class:`SGD`, :class:`RMSprop`,
:class:`LRSchedule`, :class:`ConstantLR`, :class:`LinearDecayLR`, :class:`CosineLR`,
:class:`CosineValue`, :func:`cosine_value`, :data:`SCHEDULES`, :func:`make_schedule`, :class:`EMA`.
"""
from gpgan.optim.adam import Adam
from gpgan.optim.ema import EMA
from gpgan.optim.optimizer import Optimizer
from gpgan.optim.rmsprop import RMSprop
from gpgan.optim.schedule import (
    SCHEDULES, ConstantLR, CosineLR, CosineValue, LinearDecayLR, LRSchedule, cosine_value, make_schedule,
)
from gpgan.optim.sgd import SGD

__all__ = ["Optimizer", "Adam", "SGD", "RMSprop", "LRSchedule", "ConstantLR", "LinearDecayLR", "CosineLR",
           "CosineValue", "cosine_value", "SCHEDULES", "make_schedule", "EMA"]
