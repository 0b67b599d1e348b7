"""The run folder: the one owner of where a training run keeps its files, what they are called,
and what state the run is in.

Layout (``<out>/<config name>/<name or timestamp>/``)::

    config.yaml        the resolved config (every key, defaults filled in)
    manifest.json      versions, git commit, device, seed, command line; one entry per resume
    metrics.jsonl      one JSON object per logged step
    events.out.tfevents.*   TensorBoard scalars and sample grids (tensorboardX)
    samples/           step_000100.png ... and final.png
    checkpoints/       ckpt_000100.npz ... (the last K kept) and best.npz (never pruned; set aside
                       as best.npz.discarded by a resume from an earlier step)
    final.json         written only when the run finished: {"status": "finished", ...}
    eval_000100.json   gpgan-eval's evaluation of the checkpoint of step 100 (image metrics)
    .lock              held by the process that trains the run (gpgan.files.FileLock), so that a
                       second trainer of the same folder is refused instead of interleaving files

A run is *finished* when final.json says so, *resumable* when it holds a checkpoint, *stale* when
it has neither (nothing to continue from), and *absent* when the folder holds no run.
"""
import datetime
import hashlib
import json
import os
import re
import shutil

from gpgan.checkpoint import CheckpointError, read_meta, verify
from gpgan.files import FileLock, LockHeld, append_text, atomic_write, is_temporary, make_folder
from gpgan.metrics.reference import parse_reference
from gpgan.schema import ConfigError, get_key, parse_yaml
from gpgan.train.config import VOLATILE_KEYS, diff_configs, dump_config, validate_config
from gpgan.train.manifest import environment_info, invocation

__all__ = ["RunFolder", "RunNameError", "NotARunError", "RunInUseError", "EXIT_DIVERGED"]

_CHECKPOINT = re.compile(r"^ckpt_(\d+)\.npz$")
_EVALUATION = re.compile(r"^eval_(\d+)(?:_[A-Za-z0-9._+-]+)?\.json$")
_CONFIG, _MANIFEST, _METRICS, _FINAL = "config.yaml", "manifest.json", "metrics.jsonl", "final.json"
_LOCK = ".lock"
# the run's record, with its eval_<step>[_<reference>].json files
_RECORD_NAMES = (_CONFIG, _MANIFEST, _METRICS, _FINAL)
STATES = ("finished", "resumable", "stale", "absent")
#: gpgan-train's exit status when a run diverged (a non-finite loss, penalty or gradient): resumed on
#: the same machine and install it would meet the same step again, so a sweep does not retry it.
EXIT_DIVERGED = 3


class RunNameError(ValueError):
    """A run name that is not a plain folder name."""


class NotARunError(FileNotFoundError):
    """A folder that holds no run (no config.yaml)."""


class RunInUseError(RuntimeError):
    """Another process trains the run (it holds the run folder's lock)."""


#: The longest folder name, in bytes, on Linux's and macOS's file systems.
_NAME_MAX = 255


def _reference_label(reference):
    """The label of a reference in an evaluation's file name (:meth:`RunFolder.eval_path`)."""
    kind, what = parse_reference(reference)
    if kind == "cifar10":
        return f"cifar10-{what}"
    stem = os.path.basename(what)
    if kind == "statistics":
        stem = os.path.splitext(stem)[0]
    stem = re.sub(r"[^A-Za-z0-9.+-]+", "-", stem).strip("-.")[:40] or "reference"
    return f"{stem}-{hashlib.sha256(os.fsencode(what)).hexdigest()[:8]}"


def _timestamp():
    return datetime.datetime.now().strftime("%Y%m%d-%H%M%S")


def _as_written_before_rampup(raw):
    """A run folder's config.yaml holds every key; one without ``train.ema.rampup`` was written
    before the EMA's ramp existed and averaged without it: it keeps doing so (exact resume)."""
    ema = raw.get("train", {}).get("ema") if isinstance(raw, dict) and isinstance(raw.get("train"), dict) else None
    if isinstance(ema, dict) and "rampup" not in ema:
        ema["rampup"] = False


class RunFolder:
    """One run folder: its paths, its state, and the small file operations on it."""

    def __init__(self, path):
        self.path = os.path.abspath(os.path.expanduser(os.fspath(path)))
        self._lock = None

    def __repr__(self):
        return f"RunFolder({self.path!r})"

    # -- creation -----------------------------------------------------------------------------
    @staticmethod
    def check_name(name):
        """Refuse a run name that is not one plain folder name (it would write elsewhere)."""
        if (not isinstance(name, str) or not name or name in (".", "..") or "/" in name
                or "\\" in name or os.sep in name or (os.altsep and os.altsep in name)
                or any(ord(c) < 32 or ord(c) == 127 for c in name)):
            raise RunNameError(f"run name {name!r} is not a plain folder name: it may not be empty, contain "
                               "a path separator or a control character (a newline, a tab), or be '.' or '..'")
        size = len(os.fsencode(name))  # bytes as the file system stores the name
        if size > _NAME_MAX:
            raise RunNameError(f"run name {name[:40]!r}... is {size} bytes long; a folder name takes at most "
                               f"{_NAME_MAX}")
        return name

    @classmethod
    def location(cls, out, config_name, name):
        """The path ``out/config_name/name`` (``name`` checked by :meth:`check_name`)."""
        return os.path.join(os.path.abspath(os.path.expanduser(out)), config_name, cls.check_name(name))

    @classmethod
    def check_name_free(cls, out, config_name, name):
        """The path for a new run ``out/config_name/name``.

        Raises:
            RunNameError: when ``name`` is not a plain folder name.
            FileExistsError: when that folder already holds a run.
        """
        path = cls.location(out, config_name, name)
        if cls(path).exists():
            raise FileExistsError(f"run folder {path} already holds a run; pick another --name, or "
                                  f"continue it with `gpgan-train --resume {path}`")
        return path

    @classmethod
    def new(cls, out, config_name, name=None):
        """The folder a new run ``out/config_name/(name or timestamp)`` will use; nothing is
        created yet (see :meth:`initialize`).

        Raises:
            RunNameError, FileExistsError: see :meth:`check_name_free`.
        """
        if name is not None:
            return cls(cls.check_name_free(out, config_name, name))
        run = cls(os.path.join(os.path.abspath(os.path.expanduser(out)), config_name, _timestamp()))
        run._timestamped = True
        return run

    _timestamped = False

    @classmethod
    def create(cls, out, config_name, name=None):
        """:meth:`new` and its (empty) folders made."""
        run = cls.new(out, config_name, name)
        run._make_folders()
        return run

    def _make_folders(self, made=None):
        """Make the run folder and its samples/ and checkpoints/; the folders this made (none of
        them existed before) are appended to ``made`` as they are made, outermost first."""
        made = [] if made is None else made
        make_folder(os.path.dirname(self.path))
        if self._timestamped:
            # Claimed with mkdir, which fails if the folder exists: two runs started in the same
            # second get the timestamp and the timestamp-2, never one folder.
            stem, k = self.path, 1
            while True:
                try:
                    os.mkdir(self.path)
                    break
                except FileExistsError:
                    k += 1
                    self.path = f"{stem}-{k}"
            made.append(self.path)
        for folder in (self.path, self.samples_dir, self.checkpoints_dir):
            if folder in made:
                continue
            try:
                os.mkdir(folder)  # made here, or found: never counted as made when another run made it
                made.append(folder)
            except FileExistsError:
                make_folder(folder)  # a folder: fine; a file: its one-line error

    def initialize(self, config, argv=None, then=None, **manifest):
        """Make the folders of a new run, write its config.yaml and manifest.json (with the
        ``manifest`` entries added), then call ``then()`` (a fork's copies into the folder).

        All or nothing: when any of it fails (a full disk, Ctrl-C), what it made is removed, so no
        half-made run is left to look like a run and block its name; in a named folder that was
        there before (holding no run), the files it had are kept.

        Raises:
            FileExistsError: another run took the folder since :meth:`new` (config.yaml is claimed
                with an exclusive create, so two runs never share one).
        """
        made, new_files = [], []
        try:
            self._make_folders(made)  # a timestamped path is final only now
            self._claim_config()
            new_files = [self.config_path] + [path for path in (self.manifest_path, self.metrics_path,
                                                                self.best_checkpoint_path, self.lock_path)
                                              if not os.path.lexists(path)]
            self.hold()
            self.write_config(config)
            self.write_manifest(config, argv, **manifest)
            if then is not None:
                then()
        except BaseException:
            self.release()
            self._remove_partial(made, new_files)
            raise

    def _claim_config(self):
        """Create an empty config.yaml, failing if there is one: the folder is this run's from now
        (write_config then replaces it whole)."""
        try:
            os.close(os.open(self.config_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        except FileExistsError:
            raise FileExistsError(f"run folder {self.path} already holds a run (another run took it just now); "
                                  "pick another --name") from None

    def _remove_partial(self, folders, files):
        """Undo a failed :meth:`initialize`: its config.yaml first (without it the folder is no
        run), then the other files it may have written, then the folders it made."""
        for path in files:
            try:
                os.remove(path)
            except OSError:
                pass
        for folder in reversed(folders):
            shutil.rmtree(folder, ignore_errors=True)

    # -- the writer's lock ---------------------------------------------------------------------
    @property
    def lock_path(self):
        return os.path.join(self.path, _LOCK)

    def hold(self):
        """Take the run's lock for this process until :meth:`release` (or the process's end):
        one trainer writes a run at a time.

        Raises:
            RunInUseError: another process holds it, naming that process.
        """
        if self._lock is None:
            self._lock = FileLock(self.lock_path)
        try:
            self._lock.acquire()
        except LockHeld as exc:
            who = f"process {exc.pid}" if exc.pid is not None else "another process"
            stop = f" (kill -INT {exc.pid} stops it with a checkpoint)" if exc.pid is not None else ""
            raise RunInUseError(f"{self.path} is being trained by {who}; wait for it to end, or stop it{stop}, "
                                "then resume") from None

    def release(self):
        """Let the run's lock go (nothing when this process does not hold it)."""
        if self._lock is not None:
            self._lock.release()

    # -- paths --------------------------------------------------------------------------------
    @property
    def name(self):
        return os.path.basename(self.path)

    @property
    def config_path(self):
        return os.path.join(self.path, _CONFIG)

    @property
    def manifest_path(self):
        return os.path.join(self.path, _MANIFEST)

    @property
    def metrics_path(self):
        return os.path.join(self.path, _METRICS)

    @property
    def final_path(self):
        return os.path.join(self.path, _FINAL)

    @property
    def samples_dir(self):
        return os.path.join(self.path, "samples")

    @property
    def checkpoints_dir(self):
        return os.path.join(self.path, "checkpoints")

    @property
    def best_checkpoint_path(self):
        return os.path.join(self.checkpoints_dir, "best.npz")

    def checkpoint_path(self, step):
        """``checkpoints/ckpt_<step:06d>.npz``."""
        if int(step) != step or step < 0:
            raise ValueError(f"checkpoint_path: step must be a non-negative integer, got {step!r}")
        return os.path.join(self.checkpoints_dir, f"ckpt_{int(step):06d}.npz")

    @staticmethod
    def checkpoint_step(path):
        """The step in a checkpoint file name (``ckpt_001000.npz`` -> 1000; any width)."""
        match = _CHECKPOINT.match(os.path.basename(os.fspath(path)))
        if match is None:
            raise ValueError(f"{path!r} is not a checkpoint file name (expected ckpt_<step>.npz)")
        return int(match.group(1))

    def eval_path(self, step, reference=None, truncation=None):
        """gpgan-eval's scores of the checkpoint of ``step``: ``eval_<step:06d>.json`` against the
        run's own reference (``reference`` None), else ``eval_<step:06d>_<label>.json``, so that
        scores against another reference do not replace these. The label: ``cifar10-test`` for
        ``cifar10:test``; for a file or folder, its name (without ``.npz``, at most 40
        characters) and 8 hex digits of its absolute path (``faces-1f0c9a2e``), so two files of
        one name keep two files of scores. Samples drawn with a latent ``truncation`` add
        ``_trunc<T>`` (``eval_010000_trunc0.5.json``), beside the untruncated scores."""
        if int(step) != step or step < 0:
            raise ValueError(f"eval_path: step must be a non-negative integer, got {step!r}")
        label = "" if reference is None else "_" + _reference_label(reference)
        if truncation is not None:
            label += f"_trunc{float(truncation)!r}"  # (repr: two truncations never share a file)
        return os.path.join(self.path, f"eval_{int(step):06d}{label}.json")

    def read_evaluations(self):
        """gpgan-eval's scores in this folder: the JSON objects of its
        ``eval_<step>[_<reference>].json`` files that hold a ``scores`` object, by step; unreadable
        or foreign files are left out."""
        try:
            names = os.listdir(self.path)
        except OSError:
            return []
        found = []
        for name in names:
            match = _EVALUATION.match(name)
            if match is None:
                continue
            try:
                with open(os.path.join(self.path, name), encoding="utf-8") as f:
                    evaluation = json.load(f)
            except (OSError, ValueError):
                continue
            if isinstance(evaluation, dict) and isinstance(evaluation.get("scores"), dict):
                found.append((int(match.group(1)), name, evaluation))
        return [evaluation for _, _, evaluation in sorted(found, key=lambda item: item[:2])]

    @staticmethod
    def is_record_file(name):
        """Whether a file name (no folder) is one of a run's record files (:meth:`record_files`)."""
        return name in _RECORD_NAMES or bool(_EVALUATION.match(name))

    def record_files(self):
        """The run's record, the small files that say what it was and did (no checkpoints, no
        samples, no TensorBoard events): the paths of config.yaml, manifest.json, metrics.jsonl,
        final.json and every eval_<step>[_<reference>].json present, in that order."""
        try:
            names = os.listdir(self.path)
        except OSError:
            return []
        fixed = [os.path.join(self.path, n) for n in _RECORD_NAMES]
        evaluations = sorted(os.path.join(self.path, n) for n in names if _EVALUATION.match(n))
        return [p for p in fixed + evaluations if os.path.isfile(p)]

    def sample_path(self, step=None):
        name = "final.png" if step is None else f"step_{step:06d}.png"
        return os.path.join(self.samples_dir, name)

    # -- state --------------------------------------------------------------------------------
    def exists(self):
        """Whether the folder holds a run (its config.yaml)."""
        return os.path.isfile(self.config_path)

    def is_finished(self):
        final = self.read_final()
        return final is not None and final.get("status") == "finished"

    def stopped_early(self):
        """Why a finished run ended before its train.steps (final.json's ``stop``, written when
        train.patience ended it), or None."""
        final = self.read_final() or {}
        return final.get("stop") if final.get("status") == "finished" else None

    def has_checkpoint(self):
        return bool(self.checkpoints())

    def has_events(self):
        """Whether TensorBoard event files (events.out.tfevents.*) are in the folder."""
        try:
            return any(name.startswith("events.out.tfevents") for name in os.listdir(self.path))
        except (FileNotFoundError, NotADirectoryError):
            return False

    def state(self):
        """One of :data:`STATES`: "finished", "resumable", "stale" or "absent"."""
        if not os.path.isdir(self.path):
            return "absent"
        if self.is_finished():
            return "finished"
        return "resumable" if self.has_checkpoint() else "stale"

    def config_differences(self, wanted, ignore=VOLATILE_KEYS):
        """``[(dotted key, value in this run's config, value in wanted)]`` for every key that
        differs, except ``ignore`` (by default the keys that do not change what a run computes).
        The run's config is completed with today's defaults first, so a key added to gpgan since
        the run was made is no difference."""
        saved = self.read_config()

        def value(config, key):
            try:
                return get_key(config, key)
            except (KeyError, TypeError):
                return None
        return [(k, value(saved, k), value(wanted, k)) for k in diff_configs(saved, wanted) if k not in ignore]

    # -- config and manifest ------------------------------------------------------------------
    def write_config(self, config):
        atomic_write(self.config_path, dump_config(config))

    def read_config(self, validate=True):
        """The run's config (validated and completed, unless ``validate`` is false).

        Raises:
            NotARunError: when the folder holds no run.
        """
        if not self.exists():
            raise NotARunError(f"{self.path} is not a run folder (it has no config.yaml)")
        with open(self.config_path, encoding="utf-8") as f:
            raw = parse_yaml(f.read(), f"the run's config {self.config_path}")
        if not isinstance(raw, dict) or not raw:
            # gpgan writes every key there: taking defaults for them would read another run.
            raise ConfigError(f"the run's config {self.config_path} is {'empty' if not raw else 'not a mapping'}: "
                              "the run folder is damaged (gpgan writes the resolved config there, every key)")
        _as_written_before_rampup(raw)
        return validate_config(raw, source=self.config_path) if validate else raw

    def read_manifest(self):
        try:
            with open(self.manifest_path, encoding="utf-8") as f:
                manifest = json.load(f)
        except (OSError, ValueError):
            return {}
        return manifest if isinstance(manifest, dict) else {}

    def write_manifest(self, config, argv=None, **extra):
        """manifest.json of a new run: environment, seed, command line, start time, ``extra``."""
        call = invocation(argv)
        manifest = environment_info(config["device"])
        manifest.update({"seed": config["train"]["seed"], "command": call["command"], "started": call["time"]})
        manifest.update(extra)
        manifest["resumes"] = []
        atomic_write(self.manifest_path, json.dumps(manifest, indent=2) + "\n")

    def record_resume(self, from_step, config, argv=None, **extra):
        """Append a resume entry (environment, step, command, time, ``extra``) to manifest.json."""
        manifest = self.read_manifest()
        entry = environment_info(config["device"])
        entry.update({"from_step": from_step, **invocation(argv), **extra})
        manifest.setdefault("resumes", []).append(entry)
        atomic_write(self.manifest_path, json.dumps(manifest, indent=2) + "\n")

    # -- checkpoints --------------------------------------------------------------------------
    def checkpoints(self):
        """``[(step, path)]`` of the periodic checkpoints present, by step (best.npz excluded)."""
        try:
            names = os.listdir(self.checkpoints_dir)
        except (FileNotFoundError, NotADirectoryError):
            return []
        found = [(int(m.group(1)), os.path.join(self.checkpoints_dir, n)) for n in names if (m := _CHECKPOINT.match(n))]
        return sorted(found)

    def latest_checkpoint(self):
        """``(step, path)`` of the newest checkpoint, or None."""
        found = self.checkpoints()
        return found[-1] if found else None

    def latest_readable_checkpoint(self):
        """``(step, path, skipped)``: the newest checkpoint whose every entry reads back, and
        ``[(path, reason)]`` of the newer ones that did not; ``(None, None, skipped)`` when none
        reads."""
        skipped = []
        for step, path in reversed(self.checkpoints()):
            try:
                verify(path)
            except CheckpointError as exc:
                skipped.append((path, str(exc)))
                continue
            return step, path, skipped
        return None, None, skipped

    def best_step(self):
        """The step of best.npz, or None where there is none (or it does not read: a damaged file
        is not this question's to settle)."""
        path = self.best_checkpoint_path
        if not os.path.isfile(path):
            return None
        try:
            return int(read_meta(path)["step"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def set_aside_later_best(self, step):
        """Rename best.npz to best.npz.discarded when it was written after ``step``: by training
        that a resume from ``step`` discards (newer checkpoints damaged, or a crash after an
        evaluation that beat the best and before the next checkpoint). The resumed run writes
        best.npz again when an evaluation beats the best its checkpoint recorded. Returns a note
        for the user, or None when best.npz is absent or not later than ``step``."""
        path, best_step = self.best_checkpoint_path, self.best_step()
        if best_step is None or best_step <= step:
            return None
        os.replace(path, path + ".discarded")
        return (f"set aside {path} (from step {best_step}, after the resumed step {step}) as "
                "best.npz.discarded; best.npz is written again when an evaluation beats the best so far")

    def prune_checkpoints(self, keep):
        """Delete all but the ``keep`` newest periodic checkpoints, and the temporary files that
        an interrupted write left behind; best.npz stays. Returns the deleted paths."""
        if int(keep) != keep or keep < 0:
            raise ValueError(f"prune_checkpoints: keep must be a non-negative integer, got {keep!r}")
        found = self.checkpoints()
        doomed = [path for _, path in found[:max(len(found) - int(keep), 0)]]
        try:
            doomed += [os.path.join(self.checkpoints_dir, n) for n in sorted(os.listdir(self.checkpoints_dir))
                       if is_temporary(n)]
        except FileNotFoundError:
            pass
        removed = []
        for path in doomed:
            try:
                os.remove(path)
                removed.append(path)
            except FileNotFoundError:
                pass
        return removed

    # -- metrics ------------------------------------------------------------------------------
    def append_metrics(self, record):
        """Append one record, whole or not at all (a full disk leaves no partial line)."""
        append_text(self.metrics_path, json.dumps(record) + "\n")

    def read_metrics(self):
        """The records of metrics.jsonl ([] when there is none). A last line cut short by a crash
        is dropped; any other line that is not a JSON object raises ValueError naming it."""
        try:
            with open(self.metrics_path, encoding="utf-8") as f:
                lines = [line for line in f if line.strip()]
        except FileNotFoundError:
            return []
        records = []
        for k, line in enumerate(lines):
            try:
                record = json.loads(line)
            except ValueError:
                if k == len(lines) - 1:  # a line cut short by a crash (SIGKILL while writing)
                    break
                raise ValueError(f"{self.metrics_path}: line {k + 1} is not JSON: {line[:80]!r}") from None
            if not isinstance(record, dict):
                raise ValueError(f"{self.metrics_path}: line {k + 1} is not a JSON object: {line[:80]!r}")
            records.append(record)
        return records

    def truncate_metrics(self, step):
        """Keep only the records up to ``step`` (what the checkpoint at ``step`` had seen)."""
        kept = [r for r in self.read_metrics() if r["step"] <= step]
        atomic_write(self.metrics_path, "".join(json.dumps(r) + "\n" for r in kept))

    # -- evaluations --------------------------------------------------------------------------
    def write_evaluation(self, step, evaluation, reference=None, truncation=None):
        """Write ``evaluation`` (a JSON-able dict) to :meth:`eval_path` of ``step``, ``reference``
        and ``truncation``, atomically (an evaluation of the same step, reference and truncation
        is replaced); returns the path."""
        path = self.eval_path(step, reference, truncation)
        atomic_write(path, json.dumps(evaluation, indent=2) + "\n")
        return path

    # -- final --------------------------------------------------------------------------------
    def write_final(self, summary):
        atomic_write(self.final_path, json.dumps(summary, indent=2) + "\n")

    def read_final(self):
        """final.json as a dict, or None when it is missing or not a JSON object."""
        try:
            with open(self.final_path, encoding="utf-8") as f:
                final = json.load(f)
        except (OSError, ValueError):
            return None
        return final if isinstance(final, dict) else None

    def clear_final(self):
        """Remove final.json (a finished run that is being extended)."""
        try:
            os.remove(self.final_path)
        except FileNotFoundError:
            pass
