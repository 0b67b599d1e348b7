"""Running a sweep: one gpgan-train subprocess per run, N at a time, one device each.

Output folder layout (``OUT`` is the sweep's output folder)::

    OUT/runs/<config name>/<run name>/   run folders written by gpgan-train (``--out OUT/runs``)
    OUT/logs/<run name>/stdout.log       the trainer's stdout / stderr, appended on every attempt
    OUT/logs/<run name>/stderr.log       (each attempt starts with a "=== gpgan-ablate" line)
    OUT/logs/<run name>/failure.json     written when an attempt fails, removed when the next starts

A run is skipped when its final.json says ``"status": "finished"``, or when its last attempt
diverged (a non-finite loss or gradient: resumed, it would meet the same step again; delete its
failure.json to try it anyway). Another run folder is continued with ``--resume`` when it holds
a checkpoint and otherwise cleared and started afresh.
A run whose config differs from the sweep's only in a larger ``train.steps`` (the sweep was made
longer) is extended: resumed from its newest checkpoint with ``--set train.steps=N`` (the same
as a run made N steps long from the start where no schedule follows ``train.steps`` and the old
end fell on the evaluation and checkpoint intervals); one that ``train.patience`` ended is not.
Other failed runs are recorded and retried the next time the sweep runs.
"""

import contextlib
import glob
import json
import os
import queue
import shlex
import shutil
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass

from gpgan.files import FileLock, LockHeld, atomic_write, make_folder, missing_folders, remove_empty_folders
from gpgan.studies.sweep import SweepError, expand_runs, override_args, run_config
from gpgan.studies.trainers import LocalTrainers
from gpgan.train.run import EXIT_DIVERGED, RunFolder, RunInUseError

__all__ = [
    "TRAINER_ENV",
    "trainer_command",
    "find_run_dir",
    "run_state",
    "JobResult",
    "SweepSummary",
    "run_sweep",
    "stderr_tail",
    "StaleRunError",
    "config_mismatches",
    "stale_message",
    "plan_runs",
]

TRAINER_ENV = "GPGAN_TRAIN_CMD"
TAIL_LINES = 15


def trainer_command(trainer_cmd=None):
    """The command that starts gpgan-train: ``trainer_cmd`` (list or shell-quoted string), else
    the ``GPGAN_TRAIN_CMD`` environment variable, else ``python -m gpgan.cli.train``."""
    if trainer_cmd is None:
        trainer_cmd = os.environ.get(TRAINER_ENV) or None
    if trainer_cmd is None:
        return [sys.executable, "-m", "gpgan.cli.train"]
    if isinstance(trainer_cmd, str):
        trainer_cmd = shlex.split(trainer_cmd)
    if not trainer_cmd:
        raise ValueError(f"empty trainer command (check {TRAINER_ENV})")
    return [str(part) for part in trainer_cmd]


# ----------------------------------------------------------------------------------------------
# inspecting run folders

def runs_root(out_dir):
    return os.path.join(out_dir, "runs")


def logs_dir(out_dir, name):
    return os.path.join(out_dir, "logs", name)


def failure_path(out_dir, name):
    """``OUT/logs/<name>/failure.json``: the record of run ``name``'s last unsuccessful attempt."""
    return os.path.join(logs_dir(out_dir, name), "failure.json")


def _read_bytes(path):
    """The file's bytes, or None when there is none."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def find_run_dir(out_dir, name):
    """The run folder ``OUT/runs/<config name>/<name>`` (the config name is the trainer's to
    choose, so it is globbed); a finished one wins if several exist."""
    candidates = sorted(p for p in glob.glob(os.path.join(glob.escape(runs_root(out_dir)), "*", glob.escape(name)))
                        if os.path.isdir(p))
    if not candidates:
        return None
    finished = [p for p in candidates if RunFolder(p).is_finished()]
    return (finished or candidates)[0]


FAILURE_STATUSES = ("failed", "interrupted", "diverged")


def logged_through(run_dir):
    """The last step in the run folder's metrics.jsonl, or None (no folder, no records, a damaged
    file)."""
    if run_dir is None:
        return None
    try:
        records = RunFolder(run_dir).read_metrics()
    except (OSError, ValueError):
        return None
    step = records[-1].get("step") if records else None
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def read_failure(out_dir, name):
    """(status, error) of run ``name``'s last unsuccessful attempt, from OUT/logs/<name>/failure.json
    (status "failed", "interrupted" or "diverged"), or None: also when the run has logged steps past
    the record's ``step`` since (trained on by hand, ``gpgan-train --resume``), as the record then
    describes an attempt that a later one went beyond."""
    try:
        with open(failure_path(out_dir, name)) as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    step = data.get("step")
    if isinstance(step, int) and not isinstance(step, bool):
        now = logged_through(find_run_dir(out_dir, name))
        if now is not None and now > step:
            return None
    status = data.get("status") if data.get("status") in FAILURE_STATUSES else "failed"
    return status, str(data.get("error") or f"exit code {data.get('returncode')}")


def run_state(out_dir, name):
    """(one of :data:`gpgan.train.run.STATES`, run folder or None) of the sweep's run ``name``."""
    run_dir = find_run_dir(out_dir, name)
    return ("absent", None) if run_dir is None else (RunFolder(run_dir).state(), run_dir)


def stderr_tail(path, n=TAIL_LINES):
    """Last ``n`` non-empty lines of a log's last attempt (after its last "=== gpgan-ablate"
    header); progress bars redraw with '\\r', keep the last draw."""
    try:
        with open(path, newline="", errors="replace") as fh:  # newline="": keep the '\r's
            text = fh.read()
    except OSError:
        return []
    lines = [line.split("\r")[-1].rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    headers = [i for i, line in enumerate(lines) if line.startswith("=== gpgan-ablate")]
    lines = lines[headers[-1] + 1:] if headers else lines  # this attempt's, not an earlier one's
    return [line for line in lines if line.strip()][-n:]


# ----------------------------------------------------------------------------------------------
# runs made with another config

class StaleRunError(SweepError):
    """Existing run folders were made with a config other than the one the sweep asks for."""


def _is_extension(diff):
    """A difference in ``train.steps`` only upward: the run can be extended, not a mismatch."""
    key, old, new = diff
    return key == "train.steps" and isinstance(old, int) and isinstance(new, int) and new > old


def _differences(sweep, spec, run_dir):
    """The run folder's config differences from what the sweep asks of ``spec``
    (:meth:`RunFolder.config_differences`), or None where the folder's config cannot be read or
    the trainer rejects the sweep's."""
    try:
        return RunFolder(run_dir).config_differences(run_config(sweep, spec))
    except (OSError, ValueError):
        return None


def config_mismatches(sweep, out_dir, specs=None, allow_longer=False):
    """[(run name, [(key, value in the run's config.yaml, value the sweep asks for)])] for every
    existing run folder (finished or resumable) whose config differs from base + set + axes (e.g.
    after ``set:`` was edited: its name alone would make the old run count as done), ignoring the
    keys that do not change what a run computes. With ``allow_longer``, a larger ``train.steps``
    is no mismatch (such a run is extended, see :func:`plan_runs`). Folders without a config.yaml
    (another trainer's) and settings the trainer rejects are left to the trainer."""
    out = []
    for spec in expand_runs(sweep) if specs is None else specs:
        run_dir = find_run_dir(out_dir, spec.name)
        if run_dir is None:
            continue
        run = RunFolder(run_dir)
        if not run.exists() or run.state() == "stale":  # a stale folder is cleared and started again
            continue
        diffs = _differences(sweep, spec, run_dir)
        if diffs is None:  # an unreadable folder or a setting the trainer rejects: left to the trainer
            continue
        if allow_longer:
            diffs = [d for d in diffs if not _is_extension(d)]
        if diffs:
            out.append((spec.name, diffs))
    return out


def longer_steps(sweep, spec, run_dir):
    """The sweep's ``train.steps`` for ``spec`` when it is larger than the run's, else None (also
    for a run that ended early by ``train.patience``: more steps would not continue it)."""
    diffs = _differences(sweep, spec, run_dir)
    if diffs is None or RunFolder(run_dir).stopped_early():
        return None
    return next((d[2] for d in diffs if _is_extension(d)), None)


def plan_runs(sweep, out_dir, specs=None):
    """``[(spec, action, run folder or None, steps or None)]`` for every run of ``sweep``, in
    order. ``action``: "skip" (finished), "start" (no folder), "restart" (a stale folder, cleared),
    "resume" (interrupted, from its newest checkpoint) or "extend" (finished or interrupted with
    fewer ``train.steps`` than the sweep asks, ``steps``: resumed with ``train.steps=steps``).
    Call :func:`config_mismatches` with ``allow_longer=True`` first: other differences are not
    looked at here."""
    plan = []
    for spec in expand_runs(sweep) if specs is None else specs:
        state, run_dir = run_state(out_dir, spec.name)
        failure = read_failure(out_dir, spec.name) if state in ("resumable", "stale") else None
        steps = longer_steps(sweep, spec, run_dir) if state in ("finished", "resumable") else None
        if failure is not None and failure[0] == "diverged" and _differences(sweep, spec, run_dir) == []:
            action, steps = "skip", None  # it would diverge again at the same step
        elif steps is not None:
            action = "extend"
        else:
            action = {"finished": "skip", "absent": "start", "stale": "restart", "resumable": "resume"}[state]
        plan.append((spec, action, run_dir, steps))
    return plan


def stale_message(out_dir, stale):
    name, diffs = stale[0]
    what = "; ".join(f"{k}: run has {old!r}, sweep asks {new!r}" for k, old, new in diffs[:5])
    return (f"{len(stale)} run folder(s) under {runs_root(out_dir)} were made with another config than "
            f"the sweep now asks for (first: {name}: {what}). Skipping or resuming them would mix "
            "configs: use another --out, or delete those run folders to run them again.")


# ----------------------------------------------------------------------------------------------
# running

@dataclass
class JobResult:
    name: str
    action: str          # "start" (no folder), "restart" (stale folder cleared), "resume", "extend"
    status: str          # "finished" | "failed" | "diverged" (exit 3) | "interrupted" (exit 130 with a checkpoint)
    returncode: int      # None when the trainer never ran
    seconds: float       # wall time of this attempt
    error: str = ""
    cpu_seconds: float = None   # None where the OS does not say


@dataclass
class SweepSummary:
    total: int
    skipped: int
    results: list        # [JobResult]

    @property
    def failed(self):
        return [r for r in self.results if r.status == "failed"]

    def counts(self):
        c = {"total": self.total, "skipped": self.skipped}
        for action in ("start", "restart", "resume", "extend"):
            c[action] = sum(r.action == action and r.status != "not run" for r in self.results)
        c["finished"] = sum(r.status == "finished" for r in self.results)
        c["failed"] = len(self.failed)
        c["interrupted"] = sum(r.status == "interrupted" for r in self.results)
        c["diverged"] = sum(r.status == "diverged" for r in self.results)
        c["not run"] = sum(r.status == "not run" for r in self.results)
        return c

    def line(self):
        c = self.counts()
        extended = f", extended {c['extend']}" if c["extend"] else ""
        text = (f"{c['total']} runs: skipped {c['skipped']}, started {c['start'] + c['restart']}, "
                f"resumed {c['resume']}{extended}; finished {c['finished']}, failed {c['failed']}")
        if c["diverged"]:
            text += f", diverged {c['diverged']}"
        if c["interrupted"]:
            text += f", interrupted {c['interrupted']}"
        if c["not run"]:
            text += f", not run {c['not run']}"
        cpu = [r.cpu_seconds for r in self.results if r.cpu_seconds is not None]
        if cpu:
            text += f" (trainer CPU time {sum(cpu):.0f} s, {sum(cpu) / len(cpu):.1f} s per run)"
        return text


class _Runner:
    def __init__(self, sweep, out_dir, jobs, devices, trainer, log, trainers):
        self.sweep, self.out_dir, self.jobs = sweep, out_dir, jobs
        self.trainer, self.log, self.trainers = trainer, log, trainers
        self.devices = None
        if devices:
            # One slot per worker; with more workers than devices, devices are shared round-robin.
            self.devices = queue.Queue()
            for i in range(max(jobs, len(devices))):
                self.devices.put(devices[i % len(devices)])
        self.lock = threading.Lock()
        self.done = 0

    def command(self, spec, action, run_dir, device, steps=None):
        if action in ("resume", "extend"):
            cmd = self.trainer + ["--resume", str(run_dir)]
            if steps is not None:
                cmd += ["--set", f"train.steps={steps}"]
        else:
            cmd = self.trainer + [os.path.realpath(self.sweep.base)]
            for override in override_args(spec):
                cmd += ["--set", override]
            cmd += ["--out", os.path.realpath(runs_root(self.out_dir)), "--name", spec.name]
        if device is not None or self.trainers.forces_cuda:
            cmd += ["--device", "cuda"]
        return cmd

    def run(self, index, total, spec, action, run_dir, steps):
        device = self.devices.get() if self.devices is not None else None
        try:
            return self._run(index, total, spec, action, run_dir, steps, device)
        finally:
            if self.devices is not None:
                self.devices.put(device)

    def _run(self, index, total, spec, action, run_dir, steps, device):
        if self.trainers.stopping:
            return JobResult(spec.name, action, "not run", None, 0.0, "sweep interrupted before this run started")
        try:  # a trainer started by hand (gpgan-train --resume), or left by a killed sweep
            if action == "restart":
                _clear_stale(run_dir)
            elif action in ("resume", "extend"):
                busy = _in_use(run_dir)
                if busy is not None:
                    raise RunInUseError(busy)
        except RunInUseError as exc:
            with self.lock:
                self.done += 1
                self.log(f"[{self.done}/{total} done] NOT RUN {spec.name}: {exc}")
            return JobResult(spec.name, action, "not run", None, 0.0, str(exc))
        logs = logs_dir(self.out_dir, spec.name)
        os.makedirs(logs, exist_ok=True)
        # The last attempt's failure record describes a run that is now running again: a report
        # made meanwhile must call it unfinished, not interrupted or failed. This attempt writes
        # its own record if it ends without finishing (stderr.log keeps every attempt's lines); an
        # attempt that never starts (a queued Ray task cancelled) puts the old record back.
        failure = failure_path(self.out_dir, spec.name)
        previous = _read_bytes(failure)
        if previous is not None:
            os.remove(failure)
        cmd = self.command(spec, action, run_dir, device, steps)
        where = f" on device {device}" if device is not None else ""
        with self.lock:
            self.log(f"[{index}/{total}] {action} {spec.name}{where}")
        header = f"=== gpgan-ablate {action}: {shlex.join(cmd)}\n"
        for log_name in ("stdout.log", "stderr.log"):
            with open(os.path.join(logs, log_name), "a") as fh:
                fh.write(header)
        t0 = time.perf_counter()
        outcome = self.trainers.run(cmd, device, logs)
        if outcome is None:
            if previous is not None:
                atomic_write(failure, previous)
            return JobResult(spec.name, action, "not run", None, 0.0, "sweep interrupted before this run started")
        rc, cpu = outcome
        seconds = time.perf_counter() - t0

        new_dir = find_run_dir(self.out_dir, spec.name)
        if rc == 0 and new_dir is not None and RunFolder(new_dir).is_finished():
            result = JobResult(spec.name, action, "finished", rc, seconds, cpu_seconds=cpu)
        else:
            tail = stderr_tail(os.path.join(logs, "stderr.log"))
            if rc == 0:
                tail.append(f"gpgan-ablate: gpgan-train exited 0 but wrote no final.json with status "
                            f"finished under {runs_root(self.out_dir)}/*/{spec.name}")
            error = "\n".join(tail) or f"exit code {rc} (stderr was empty)"
            # Exit 130 (Ctrl-C, train.stop_after) with a checkpoint: stopped, not broken.
            status = ("interrupted" if rc in (130, -signal.SIGINT) and new_dir is not None
                      and RunFolder(new_dir).has_checkpoint() else "diverged" if rc == EXIT_DIVERGED else "failed")
            # the step the run had logged through: a later attempt by hand that goes past it makes
            # this record stale (read_failure)
            record = {"status": status, "returncode": rc, "command": cmd, "error": error,
                      "step": logged_through(new_dir)}
            with open(failure, "w") as fh:
                fh.write(json.dumps(record, indent=1) + "\n")
            result = JobResult(spec.name, action, status, rc, seconds, error, cpu_seconds=cpu)
        with self.lock:
            self.done += 1
            if result.status == "finished":
                cpu_text = f", cpu {cpu:.1f} s" if cpu is not None else ""
                self.log(f"[{self.done}/{total} done] finished {spec.name} ({seconds:.1f} s{cpu_text})")
            else:
                last = result.error.splitlines()[-1] if result.error else ""
                self.log(f"[{self.done}/{total} done] {result.status.upper()} {spec.name} (exit {rc}): {last}")
        return result


def run_sweep(sweep, out_dir, jobs=1, devices=None, trainer_cmd=None, log=print,
              cluster="local", ray_address=None, runs=None):
    """Run every run of ``sweep`` that has not finished, ``jobs`` at a time; with ``runs`` (a list
    of :class:`~gpgan.studies.sweep.RunSpec`, e.g. from :func:`~gpgan.studies.sweep.select_runs`),
    only those.

    ``devices``: list of CUDA device ids; each job gets one (``CUDA_VISIBLE_DEVICES=<id>`` and
    ``--device cuda``). Without devices the config's device is used. A failing run never stops
    the sweep: it is returned with status "failed" (or "diverged": gpgan-train's exit 3, a
    non-finite loss or gradient; the next sweep skips it rather than meet the same step again) and
    recorded in OUT/logs/<name>/failure.json.

    ``cluster="ray"``: each run is a task on the Ray cluster at ``ray_address`` (default: the
    ``RAY_ADDRESS`` environment variable, else the cluster started on this machine), with one GPU
    when ``devices`` are given or a run's config asks for CUDA (Ray picks the GPU), else one CPU;
    ``jobs`` (None: every run at once) bounds the tasks in flight. ``out_dir`` must be on a
    filesystem that every node sees. See :mod:`gpgan.studies.cluster`.

    Raises:
        StaleRunError: before running anything, when existing run folders were made with another
            config (see :func:`config_mismatches`).
        ClusterError: the Ray cluster cannot be reached (or Ray is not installed).
        OutInUseError: another sweep is running the runs of ``out_dir``.
    """
    if cluster not in ("local", "ray"):
        raise ValueError(f"run_sweep: cluster must be 'local' or 'ray', got {cluster!r}")
    out_dir = os.fspath(out_dir)
    trainer = trainer_command(trainer_cmd)
    specs = expand_runs(sweep) if runs is None else list(runs)
    # The folder's lock first: what is planned below must not change under another sweep.
    lock, made = hold_out_dir(out_dir)
    trainers, ran = None, False
    try:
        stale = config_mismatches(sweep, out_dir, specs, allow_longer=True)
        if stale:
            raise StaleRunError(stale_message(out_dir, stale))
        plan = plan_runs(sweep, out_dir, specs)
        todo = [job for job in plan if job[1] != "skip"]
        skipped = len(plan) - len(todo)
        jobs = max(1, int(jobs if jobs is not None else (len(todo) if cluster == "ray" else 1)))
        if cluster == "ray":
            from gpgan.studies.cluster import RayTrainers

            gpu = bool(devices) or any(_config_device(sweep, spec) == "cuda" for spec, *_ in todo)
            trainers = RayTrainers(ray_address, gpu=gpu, forces_cuda=bool(devices))
            devices = None  # Ray assigns the GPUs
        else:
            trainers = LocalTrainers(jobs)
        make_folder(runs_root(out_dir))
        ran = True
        if skipped:
            log(f"skipping {skipped} finished run(s)")
        runner = _Runner(sweep, out_dir, jobs, list(devices) if devices else None, trainer, log, trainers)
        results = {}
        pool = ThreadPoolExecutor(max_workers=jobs)
        try:
            futures = {pool.submit(runner.run, i + 1, len(todo), *job): job[0].name for i, job in enumerate(todo)}
            for fut in as_completed(futures):
                results[futures[fut]] = fut.result()
        except BaseException:
            # Ctrl-C (or a bug): stop the live trainers; their checkpoints let the next sweep resume.
            trainers.stop()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
    finally:
        if trainers is not None:
            trainers.close()
        release_out_dir(lock, made, used=ran)  # refused before any run: no folder of this sweep's making is left
    ordered = [results[spec.name] for spec, *_ in todo]
    return SweepSummary(total=len(specs), skipped=skipped, results=ordered)


class OutInUseError(RuntimeError):
    """Another gpgan-ablate runs the runs of the same output folder."""


def hold_out_dir(out_dir):
    """``(lock, made)``: the lock of ``out_dir`` (OUT/.lock, the folder made if needed), held
    while this sweep plans and runs: two sweeps into one folder would run the same run twice at
    once. ``made``: the folders made for it (outermost first), for a sweep refused before any run
    to remove."""
    path = os.path.join(out_dir, ".lock")
    made = missing_folders(path)
    make_folder(out_dir)
    lock = FileLock(path)
    try:
        lock.acquire()
    except BaseException as exc:
        remove_empty_folders(made)  # (those it made and that stayed empty: never another sweep's lock)
        if not isinstance(exc, LockHeld):
            raise
        who = f"process {exc.pid}" if exc.pid is not None else "another process"
        stop = f" (kill -INT {exc.pid} stops it, its trainers with a checkpoint)" if exc.pid is not None else ""
        raise OutInUseError(f"another gpgan-ablate ({who}) is running the runs of {out_dir}; wait for it to end, or "
                            f"stop it{stop}, then run this again") from None
    return lock, made


def release_out_dir(lock, made, used):
    """Let go of :func:`hold_out_dir`'s lock; where nothing was ``used`` of a folder made for it,
    remove the lock file (while still held: FileLock's holders check that their file is still the
    path's) and the folders it made, while they are empty."""
    if not used and made:
        with contextlib.suppress(OSError):
            os.remove(lock.path)
    lock.release()
    if not used and made:
        remove_empty_folders(made)


def _clear_stale(run_dir):
    """Remove a stale run folder (no checkpoint to continue from) for its run to start afresh,
    holding its lock meanwhile (a process that opened the lock file before it went finds, once
    it has the lock, that the file is no longer the path's, and tries again). Raises
    :class:`~gpgan.train.run.RunInUseError` when a trainer holds it."""
    run = RunFolder(run_dir)
    run.hold()
    try:
        shutil.rmtree(run.path)
    finally:
        run.release()


def _in_use(run_dir):
    """Why a run to resume cannot be now (a trainer holds it), or None."""
    run = RunFolder(run_dir)
    try:
        run.hold()
    except RunInUseError as exc:
        return str(exc)
    run.release()
    return None


def _config_device(sweep, spec):
    """The device a run's config asks for (None when the trainer would refuse the config)."""
    try:
        return run_config(sweep, spec)["device"]
    except (OSError, ValueError):
        return None
