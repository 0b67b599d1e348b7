"""Trainer processes of a sweep: ``gpgan-train`` started as a subprocess in a session of its own,
waited for (with its CPU time), and stopped the way Ctrl-C stops it. :class:`LocalTrainers` runs
them on this machine; :class:`gpgan.studies.cluster.RayTrainers` has the same interface on a Ray
cluster."""
import os
import signal
import subprocess
import threading
import time

from gpgan.backend.core_share import BLAS_THREAD_VARS, cores_per_process
from gpgan.kernels.process import process_environment
from gpgan.train.interrupt import stop_with_parent

__all__ = ["THREAD_VARS", "LocalTrainers", "start_trainer", "wait_for", "gpgan_pythonpath"]

#: The variables that set a trainer's threads: BLAS's, OpenMP's and gpgan's own array passes.
THREAD_VARS = BLAS_THREAD_VARS + ("GPGAN_NUM_THREADS",)


def wait_for(proc, poll=None):
    """Wait for ``proc``; returns (exit code, its CPU seconds (user + system) where the OS says).

    ``poll``: seconds between checks instead of one blocking wait, so that an exception raised
    in this thread (Ray's cancel raises KeyboardInterrupt in a task) is not held up until the
    trainer exits.
    """
    if not hasattr(os, "wait4"):
        return proc.wait(), None
    while True:
        try:
            pid, status, usage = os.wait4(proc.pid, 0 if poll is None else os.WNOHANG)
        except ChildProcessError:  # already reaped
            return proc.wait(), None
        if pid:
            rc = os.waitstatus_to_exitcode(status)
            proc.returncode = rc  # reaped here, so tell Popen
            return rc, usage.ru_utime + usage.ru_stime
        time.sleep(poll)


def start_trainer(cmd, env, logs):
    """Start the trainer ``cmd`` with its output appended to ``logs``/stdout.log and stderr.log;
    None (with the reason in stderr.log) when it cannot be started.

    A session of its own: a Ctrl-C in the terminal reaches gpgan-ablate alone, which forwards
    exactly one SIGINT. Were the trainers in the terminal's process group they would get two, and
    a second Ctrl-C stops gpgan-train without saving.
    """
    with open(os.path.join(logs, "stdout.log"), "a") as out, open(os.path.join(logs, "stderr.log"), "a") as err:
        try:
            return subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env,
                                    start_new_session=True)
        except OSError as exc:  # e.g. a GPGAN_TRAIN_CMD that does not exist: this run fails
            err.write(f"gpgan-ablate: cannot start the trainer {cmd[0]!r}: {exc}\n")
            return None


def gpgan_pythonpath(existing=""):
    """PYTHONPATH that makes this gpgan importable from any folder ("python -m gpgan.cli.train")."""
    import gpgan
    root = os.path.dirname(os.path.dirname(os.path.realpath(gpgan.__file__)))
    return os.pathsep.join([root] + [p for p in existing.split(os.pathsep) if p])


def _child_env(device, jobs):
    env = dict(os.environ)
    env["PYTHONPATH"] = gpgan_pythonpath(env.get("PYTHONPATH", ""))
    # N concurrent trainers should not each spawn one thread per core.
    threads = str(cores_per_process(jobs))
    for var in THREAD_VARS:
        env.setdefault(var, threads)
    # The process settings a trainer makes (gpgan.configure_process), so that it starts with them
    # rather than starting again to have them.
    env.update(process_environment(env))
    if device is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(device)
    # Outside the terminal's process group, a trainer would outlive a gpgan-ablate killed outright;
    # with this it notices and stops as on SIGTERM, saving a checkpoint (gpgan.train.loop).
    stop_with_parent(env)
    return env


class LocalTrainers:
    """Trainer processes on this machine, as many at a time as the sweep's worker threads."""

    forces_cuda = False

    def __init__(self, jobs):
        self.jobs = jobs
        self.lock = threading.Lock()
        self.live = set()  # the running subprocess.Popen objects
        self.stopping = False

    def run(self, cmd, device, logs):
        """Run one trainer to its end: (exit code, CPU seconds or None); None: not started (the
        sweep was stopped)."""
        proc = start_trainer(cmd, _child_env(device, self.jobs), logs)
        if proc is None:
            return 127, None
        with self.lock:
            self.live.add(proc)
            if self.stopping:  # started just as the sweep was stopped: stop it too
                proc.send_signal(signal.SIGINT)
        try:
            return wait_for(proc)
        finally:
            with self.lock:
                self.live.discard(proc)

    def stop(self, grace=60.0):
        """Stop the live trainers the way Ctrl-C stops gpgan-train (SIGINT: it saves a checkpoint
        and exits 130), so that the next sweep resumes them; terminate those still running after
        ``grace`` seconds."""
        with self.lock:
            self.stopping = True
            live = list(self.live)
        for proc in live:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        deadline = time.monotonic() + grace
        for proc in live:
            while proc.returncode is None and time.monotonic() < deadline:
                time.sleep(0.1)  # the worker thread reaps it (os.wait4) and sets returncode
            if proc.returncode is None:
                proc.terminate()

    def close(self):
        pass
