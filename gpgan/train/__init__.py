"""Training: gpgan's config schema (:mod:`~gpgan.train.config`), the run folder
(:mod:`~gpgan.train.run`), building components from a config (:mod:`~gpgan.train.build`), each
step's inputs (:mod:`~gpgan.train.feed`), the step's maths on the device (:mod:`~gpgan.train.step`),
logging, samples and evaluation (:mod:`~gpgan.train.monitor`), the loop (:mod:`~gpgan.train.loop`),
starting, resuming and forking runs (:mod:`~gpgan.train.launch`), how a run is asked to stop
(:mod:`~gpgan.train.interrupt`), and one run over several
processes (:mod:`~gpgan.train.parallel`, on :mod:`gpgan.parallel`'s communicators).

Names are imported on first use, so that ``python -m gpgan.train.config`` (which prints the
config reference) and reading a config import neither models nor tensorboardX.
"""
import importlib

_LAZY = {
    "ConfigError": "gpgan.train.config",
    "load_config": "gpgan.train.config",
    "validate_config": "gpgan.train.config",
    "RunFolder": "gpgan.train.run",
    "Trainer": "gpgan.train.loop",
    "TrainingStep": "gpgan.train.step",
    "build_components": "gpgan.train.build",
    "start_run": "gpgan.train.launch",
    "resume_run": "gpgan.train.launch",
    "fork_run": "gpgan.train.launch",
    "DataParallelTrainer": "gpgan.train.parallel",
}

__all__ = list(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'gpgan.train' has no attribute {name!r}")
