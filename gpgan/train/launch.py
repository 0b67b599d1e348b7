"""Starting, resuming and forking runs: each returns a :class:`~gpgan.train.loop.Trainer` bound to
its run folder, ready to ``fit()``.

Every check that can fail (the config, the run name, the data, the models, the checkpoint) runs
before anything is written, so a refused start leaves no trace.

Under ``mpiexec`` (a ``comm`` of several processes) every process calls the same function: rank 0
alone checks names and writes, the others build the same trainer and load the same checkpoint,
and every step that one process may fail runs through ``comm.on_root`` or ``comm.together``, so
a failure reaches every process (none waits for one that gave up).

Resuming takes the config from the run folder. Only ``train.steps`` (to extend a run; it may
only grow), ``train.patience``, ``train.patience_min_delta``, ``train.stop_after``,
``train.cuda_graph`` and ``device`` may differ (:data:`~gpgan.train.config.RESUMABLE_CHANGES`); any
other difference is refused, naming the changed keys. The newest checkpoint that reads back whole
is used; damaged newer ones are set aside (renamed ``*.damaged``) and named.
"""
import os
import shutil
from dataclasses import dataclass, field

from gpgan.files import atomic_write, check_writable_folder_path, error_text
from gpgan.train.config import (
    RESUMABLE_CHANGES,
    RUN_END_KEYS,
    ConfigError,
    apply_overrides,
    get_key,
    load_config,
    schedules_following_steps,
    validate_config,
)
from gpgan.parallel import LocalCommunicator
from gpgan.train.loop import Trainer
from gpgan.train.run import RunFolder

__all__ = ["Launch", "ResumeError", "make_trainer", "start_run", "plan_run", "resume_run", "fork_run", "resume_config",
           "config_name"]


class ResumeError(ValueError):
    """The newest readable checkpoint of a run failed to load, and newer ones do not read."""


@dataclass
class Launch:
    """What a start, resume or fork prepared: the trainer (None when there is nothing to do),
    its run folder, and lines worth telling the user. The run's lock is held (by rank 0) until the
    trainer's ``fit`` ends, or :meth:`close` for a launch that is not trained."""

    trainer: object
    run: RunFolder
    notes: list = field(default_factory=list)

    def close(self):
        """Let the run's lock go without training (``fit`` does it when it ends)."""
        self.run.release()


def config_name(path):
    """A run's config name: the config file's name without its extension."""
    return os.path.splitext(os.path.basename(os.fspath(path)))[0]


def make_trainer(config, run, quiet=False, comm=None, dry_run=False):
    """The trainer of ``config`` into ``run``: a :class:`~gpgan.train.loop.Trainer`, or with a
    ``comm`` of several processes a :class:`~gpgan.train.parallel.DataParallelTrainer`
    (``dry_run``: checked, not for training; see :class:`~gpgan.train.loop.Trainer`)."""
    if comm is None or comm.size == 1:
        return Trainer(config, run, quiet=quiet, dry_run=dry_run)
    from gpgan.train.parallel import DataParallelTrainer

    return DataParallelTrainer(config, run, comm, quiet=quiet, dry_run=dry_run)


def _prepare(config_path, overrides, out, name, quiet, comm, dry_run=False):
    """``(config, run folder, trainer)`` of a new run, every check done and nothing written."""
    config = load_config(config_path, overrides)
    run = comm.on_root(lambda: _new_folder(out, config_name(config_path), name))
    # data and models first: fail before writing
    return config, run, make_trainer(config, run, quiet, comm, dry_run=dry_run)


def start_run(config_path, overrides=(), out="experiments", name=None, quiet=False, argv=None, comm=None):
    """A new run of the config at ``config_path`` (with ``--set`` ``overrides``) in
    ``out/<config name>/<name or timestamp>``; ``comm``: the processes of a data-parallel run.

    Raises:
        ConfigError: a bad config, or a ``name`` that is not a plain name or already holds a run.
        (FileNotFoundError, ValueError, ...): missing data, unusable models (before writing).
    """
    comm = comm or LocalCommunicator()
    config, run, trainer = _prepare(config_path, overrides, out, name, quiet, comm)

    def initialize():
        run.initialize(config, argv, **trainer.manifest_entries())
        return run.path  # a timestamped name may have moved aside for another run's
    run.path = comm.on_root(initialize)
    return Launch(trainer, run, [f"run folder {run.path}"])


def plan_run(config_path, overrides=(), out="experiments", name=None, comm=None):
    """``(config, run folder, notes)`` that :func:`start_run` would use, checked as it would check
    them (the data, the models, the Inception weights and the image metrics' reference included,
    without computing the reference's features), with nothing written (``--dry-run``); ``notes``:
    lines worth telling the user."""
    config, run, trainer = _prepare(config_path, overrides, out, name, True, comm or LocalCommunicator(),
                                    dry_run=True)
    check_writable_folder_path(run.path)  # a file in the way, or a folder it cannot write in
    notes = [f"image metrics: {trainer.image_metrics.note}"] if trainer.image_metrics is not None else []
    return config, run, notes


def _new_folder(out, config_name_, name):
    try:  # a bad command line (exit 2), found before any work
        return RunFolder.new(out, config_name_, name)
    except (ValueError, FileExistsError) as exc:
        raise ConfigError(f"--name: {exc}") from None


def resume_config(run, config_path=None, overrides=()):
    """The config a resumed (or forked) ``run`` continues with, checked against its own.

    Raises:
        ConfigError: naming every changed key other than :data:`RESUMABLE_CHANGES`
            (``train.steps`` may only grow).
    """
    saved = run.read_config()
    if config_path is not None:
        requested = load_config(config_path, overrides)
    else:
        base = apply_overrides(saved, [("train.stop_after", None)])
        requested = validate_config(apply_overrides(base, overrides), source="the run's config.yaml + --set")
    changed = run.config_differences(requested, ignore=RESUMABLE_CHANGES)
    if changed:
        details = "; ".join(f"{k}: run has {old!r}, requested {new!r}" for k, old, new in changed)
        raise ConfigError(f"cannot resume with a changed config ({details}). Only "
                          f"{', '.join(RESUMABLE_CHANGES)} may change on resume (train.steps only up); "
                          "start a new run for anything else")
    if requested["train"]["steps"] < saved["train"]["steps"]:
        raise ConfigError(f"train.steps may only grow on resume: the run has {saved['train']['steps']}, "
                          f"requested {requested['train']['steps']}")
    return requested


def _open_run(run_dir):
    run = RunFolder(run_dir)
    if not run.exists():
        what = "does not exist" if not os.path.exists(run.path) else "is not a run folder (it has no config.yaml)"
        raise ConfigError(f"--resume {run_dir}: {run.path} {what}; give a run folder (or one of its "
                          "checkpoints/ckpt_N.npz to fork a new run from it)")
    return run


def _load_newest_checkpoint(run, trainer, comm):
    """``(step, notes)``: the trainer restored from the run's newest readable checkpoint (step 0
    when none reads). The damaged newer ones are renamed ``*.damaged`` once that checkpoint has
    loaded, so a resume that fails leaves the folder as it was, and its error names them."""
    step, path, skipped = comm.on_root(run.latest_readable_checkpoint)
    if path is not None:
        try:
            step = comm.together(lambda: trainer.load_checkpoint(path))
        except (OSError, ValueError) as exc:
            if not skipped:
                raise
            unreadable = "; ".join(f"{bad}: {reason}" for bad, reason in skipped)
            raise ResumeError(f"{error_text(exc)}; the newer checkpoints do not read either ({unreadable})") from exc

    def set_aside():
        for bad, _ in skipped:
            os.replace(bad, bad + ".damaged")
    comm.on_root(set_aside)
    notes = [f"skipped {bad}, renamed to {os.path.basename(bad)}.damaged: {reason}" for bad, reason in skipped]
    if path is None:
        notes.append(f"{run.path} has no {'readable ' if skipped else ''}checkpoint; starting it over from step 0")
        step = 0
    return step, notes


def resume_run(run_dir, config_path=None, overrides=(), quiet=False, argv=None, comm=None):
    """The run in ``run_dir`` continued from its newest readable checkpoint (``trainer`` is None
    when it already finished its steps); ``comm``: the processes of a data-parallel run.

    The run's lock (:meth:`RunFolder.hold`) is taken first and held until the trainer's ``fit``
    ends, so that no other process trains the run meanwhile.

    Raises:
        ConfigError: ``run_dir`` holds no run, or the config changed (see :func:`resume_config`).
        RunInUseError: another process trains the run.
    """
    comm = comm or LocalCommunicator()
    run = _open_run(run_dir)
    comm.on_root(run.hold)  # before anything is read: a trainer at work on it changes it
    try:
        return _resume(run, config_path, overrides, quiet, argv, comm)
    except BaseException:
        run.release()
        raise


def _resume(run, config_path, overrides, quiet, argv, comm):
    """:func:`resume_run` of ``run``, whose lock this process holds (rank 0)."""
    saved = run.read_config()
    config = resume_config(run, config_path, overrides)
    same_end = all(get_key(config, key) == get_key(saved, key) for key in RUN_END_KEYS)
    if run.is_finished() and same_end:
        run.release()
        early = run.stopped_early()
        # More steps do not continue a run that train.patience ended: it would stop where it is.
        hint = ("--set train.patience=N (larger) or a smaller train.patience_min_delta" if early
                else "--set train.steps=N (larger)")
        return Launch(None, run, [f"{run.path} already finished ({early or 'all its steps'}); pass {hint} to "
                                  "continue it"])
    trainer = make_trainer(config, run, quiet, comm)
    step, notes = _load_newest_checkpoint(run, trainer, comm)
    _check_stop_after(config, step)

    def record():
        run.truncate_metrics(trainer.recorded_through)
        set_aside = run.set_aside_later_best(step)
        run.clear_final()
        run.write_config(config)
        run.record_resume(step, config, argv, **trainer.manifest_entries())
        return set_aside
    set_aside = comm.on_root(record)
    if set_aside:
        notes.append(set_aside)
    notes.append(f"resuming {run.path} from step {step}")
    notes += _stretched(saved, config)
    return Launch(trainer, run, notes)


def _stretched(saved, config):
    """A note when ``config`` (continuing a run made with ``saved``) has more ``train.steps`` and
    some schedule follows them: read over the new length, its values jump where the run goes on."""
    old, new = saved["train"]["steps"], config["train"]["steps"]
    keys = schedules_following_steps(config) if new > old else []
    if not keys:
        return []
    one = len(keys) == 1
    return [f"train.steps grows from {old:,} to {new:,}: {', '.join(keys)} follow{'s' if one else ''} train.steps "
            f"and {'is' if one else 'are'} read over the new length from here on, as if the run had always been "
            "that long (the values jump here)"]


def fork_run(checkpoint, config_path=None, overrides=(), out=None, name=None, quiet=False, argv=None, comm=None):
    """A new run that starts from ``checkpoint`` (a ``ckpt_N.npz`` in a run's checkpoints/) with the
    run's config (``config_path`` and ``overrides`` as on resume: see :func:`resume_config`), in
    ``out/<config name>/<name or timestamp>`` (default: beside the original run). The original run
    is left untouched; the new run's metrics.jsonl starts with the original's records up to the
    checkpoint's step. ``comm``: the processes of a data-parallel run.

    Raises:
        ConfigError: the checkpoint is not in a run folder, or the config changed.
    """
    from gpgan.checkpoint import verify

    comm = comm or LocalCommunicator()
    checkpoint = os.path.abspath(os.fspath(checkpoint))
    run_dir = os.path.dirname(os.path.dirname(checkpoint))
    if RunFolder(run_dir).checkpoints_dir != os.path.dirname(checkpoint):
        raise ConfigError(f"--resume {checkpoint}: a file, but not in a run's checkpoints/ folder; give a run "
                          "folder to continue it, or one of its checkpoints (RUN_DIR/checkpoints/ckpt_N.npz) to fork "
                          "a new run from it")
    source = _open_run(run_dir)
    verify(checkpoint)  # a damaged file fails here, with a one-line message
    config = resume_config(source, config_path, overrides)
    group = os.path.dirname(source.path)  # <out>/<config name> of the original run
    run = comm.on_root(lambda: _new_folder(os.path.dirname(group) if out is None else out,
                                           os.path.basename(group), name))
    trainer = make_trainer(config, run, quiet, comm)
    step = comm.together(lambda: trainer.load_checkpoint(checkpoint))
    _check_stop_after(config, step)

    def copy_history():
        if os.path.isfile(source.metrics_path):
            _copy_atomically(source.metrics_path, run.metrics_path)
            run.truncate_metrics(trainer.recorded_through)
        # The best evaluation up to the fork's step is the fork's best too (its checkpoint carries
        # that best value, so the fork writes best.npz only when it beats it): bring its weights.
        best_step = source.best_step()
        if best_step is not None and best_step <= step:
            _copy_atomically(source.best_checkpoint_path, run.best_checkpoint_path)

    def initialize():
        run.initialize(config, argv, then=copy_history,
                       forked_from={"run": source.path, "checkpoint": checkpoint, "step": step},
                       **trainer.manifest_entries())
        return run.path
    run.path = comm.on_root(initialize)
    return Launch(trainer, run, [f"run folder {run.path}, forked from {checkpoint} at step {step}"]
                  + _stretched(source.read_config(), config))


def _copy_atomically(source, target):
    """``source``'s bytes into ``target``, all at once (atomic_write)."""
    with open(source, "rb") as f:
        atomic_write(target, lambda out: shutil.copyfileobj(f, out))


def _check_stop_after(config, step):
    """Refuse a ``train.stop_after`` that the run, continuing from ``step``, has already passed (it
    would never be met, and the run would train to its end)."""
    stop_after = config["train"]["stop_after"]
    if stop_after is not None and stop_after <= step:
        raise ConfigError(f"train.stop_after {stop_after} is not after step {step}, where the run continues; "
                          "give a later step, or leave it out")
