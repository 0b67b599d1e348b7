"""Training: the config schema (:mod:`gpgan.train.config`), the run folder
(:mod:`gpgan.train.run`) and the training loop (:mod:`gpgan.train.trainer`).

Names are imported on first use, so that ``python -m gpgan.train.config`` (which prints the
config reference) and reading a config import neither models nor tensorboardX.
"""
import importlib

_LAZY = {
    "ConfigError": "gpgan.train.config",
    "load_config": "gpgan.train.config",
    "validate_config": "gpgan.train.config",
    "RunFolder": "gpgan.train.run",
    "Trainer": "gpgan.train.trainer",
}

__all__ = list(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'gpgan.train' has no attribute {name!r}")
