"""Training: the config schema (:mod:`gpgan.train.config`), the run folder
(:mod:`gpgan.train.run`) and the training loop (:mod:`gpgan.train.trainer`).

The trainer is imported lazily (``from gpgan.train.trainer import Trainer``) so that reading a
config does not import models, optimizers or tensorboardX.
"""
from gpgan.train.config import ConfigError, load_config, validate_config  # noqa: F401
from gpgan.train.run import RunFolder  # noqa: F401

__all__ = ["ConfigError", "load_config", "validate_config", "RunFolder"]
