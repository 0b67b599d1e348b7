"""Sweep runs as Ray tasks on an existing Ray cluster (``gpgan-ablate SWEEP --cluster ray``).

Each run is one task that starts the same ``gpgan-train`` command a local sweep would, on the node
Ray picks, with one GPU (Ray sets ``CUDA_VISIBLE_DEVICES``) or one CPU. Everything else is the
local sweep's: the task writes the run folder and logs under the sweep's output folder, which
must therefore be on a filesystem every node sees (NFS, a cluster filesystem), and the driver
reads them back to skip, resume, record failures and report, exactly as it does locally. gpgan
must be installed on every node; the trainer runs under the Python of the Ray worker.

Ctrl-C cancels the tasks: a running task forwards one SIGINT to its trainer, which saves a
checkpoint and exits 130, so the next sweep resumes it; tasks not yet started never start.
"""

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time

from gpgan.studies.trainers import THREAD_VARS, gpgan_pythonpath, start_trainer, wait_for
from gpgan.studies.sweep import SweepError
from gpgan.train.interrupt import stop_with_parent

__all__ = ["RayTrainers", "ClusterError", "run_trainer_task", "ADDRESS_ENV"]

#: the environment variable Ray reads a cluster's address from
ADDRESS_ENV = "RAY_ADDRESS"
#: seconds a cancelled task gives its trainer to save a checkpoint before terminating it
GRACE = 60.0


class ClusterError(SweepError):
    """Ray is missing or the cluster cannot be reached."""


def run_trainer_task(cmd, env_overrides, logs, driver_python, grace=GRACE):
    """The body of one Ray task: run the trainer ``cmd`` on this node with its output appended to
    ``logs``/stdout.log and stderr.log; returns (exit code, CPU seconds or None).

    The trainer stops by itself (as on SIGTERM, with a checkpoint) if this task's process dies
    (``GPGAN_STOP_WITH_PARENT``). When Ray cancels the task (KeyboardInterrupt in this thread),
    the trainer gets one SIGINT and ``grace`` seconds to save its checkpoint.
    """
    if cmd and cmd[0] == driver_python:  # "python -m gpgan.cli.train": this node's Python
        cmd = [sys.executable] + list(cmd[1:])
    env = dict(os.environ)
    env.update(env_overrides)
    env["PYTHONPATH"] = gpgan_pythonpath(env.get("PYTHONPATH", ""))
    stop_with_parent(env)
    # Ray raylets block SIGINT, and their workers inherit the mask (a trainer would too, and never
    # see the SIGINT that stops it with a checkpoint): start the trainer with SIGINT unblocked.
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    try:
        proc = start_trainer(cmd, env, logs)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    if proc is None:
        return 127, None
    with _interruptible():
        try:
            return wait_for(proc, poll=0.1)
        except KeyboardInterrupt:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                proc.terminate()
                proc.wait()
            return proc.returncode, None


@contextlib.contextmanager
def _interruptible():
    """Let Ray's cancel reach this task: it calls ``_thread.interrupt_main()``, which does nothing
    while SIGINT is ignored, as it is in workers of a Ray started from a non-interactive shell's
    background job."""
    try:
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    except ValueError:  # not the main thread: leave it to Ray
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _check_reachable(address, timeout=10.0):
    """Refuse a ``HOST:PORT`` where nothing listens, at once (Ray itself retries for minutes).

    Raises:
        ClusterError: naming the address and what to do.
    """
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "://" in address:
        return  # "auto", or a form Ray resolves itself
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as exc:
        raise ClusterError(f"cannot reach the Ray cluster at {address}: {exc}. Start one with `ray start --head` "
                           "(and `ray start --address HEAD:PORT` on the other nodes), and pass --ray-address "
                           f"HOST:PORT or set {ADDRESS_ENV}") from None


class RayTrainers:
    """Runs trainers as Ray tasks (the interface of :class:`gpgan.studies.trainers.LocalTrainers`).

    Args:
        address: ``HOST:PORT`` of the cluster's head; None: ``RAY_ADDRESS``, else "auto" (a
            cluster started on this machine with ``ray start``).
        gpu: one GPU per task (else one CPU).
        forces_cuda: add ``--device cuda`` to every trainer command (``--devices`` was given).

    Raises:
        ClusterError: Ray is not installed or the cluster cannot be reached.
    """

    def __init__(self, address=None, gpu=False, forces_cuda=False):
        try:
            import ray
        except ImportError as exc:
            raise ClusterError(f"--cluster ray needs Ray ({exc}); install it with `pip install -e '.[ray]'`") from None
        self.ray = ray
        self.address = address or os.environ.get(ADDRESS_ENV) or "auto"
        _check_reachable(self.address)
        try:
            ray.init(address=self.address, logging_level=logging.ERROR, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise ClusterError(f"cannot reach the Ray cluster at {self.address}: {exc}. Start one with "
                               "`ray start --head` (and `ray start --address HEAD:PORT` on the other nodes), "
                               f"and pass --ray-address HOST:PORT or set {ADDRESS_ENV}") from None
        resources = {"num_gpus": 1, "num_cpus": 0} if gpu else {"num_cpus": 1}
        self.task = ray.remote(run_trainer_task).options(max_retries=0, **resources)
        self.forces_cuda = forces_cuda
        # One thread per trainer: each task holds one CPU.
        self.env = {var: "1" for var in THREAD_VARS}
        self.lock = threading.Lock()
        self.live = set()
        self.stopping = False

    def run(self, cmd, device, logs):
        """Run one trainer as a task and wait for it: (exit code, CPU seconds or None), or None when
        the sweep was stopped before the task started."""
        ref = self.task.remote(list(cmd), self.env, str(logs), sys.executable)
        with self.lock:
            self.live.add(ref)
            if self.stopping:  # submitted just as the sweep was stopped: cancel it too
                self.ray.cancel(ref)
        try:
            return self.ray.get(ref)
        except self.ray.exceptions.TaskCancelledError:  # cancelled before it started (a started one returns)
            return None
        except self.ray.exceptions.RayError as exc:  # the task's node or worker died
            with open(os.path.join(logs, "stderr.log"), "a") as err:
                err.write(f"gpgan-ablate: the Ray task of this run failed: {type(exc).__name__}: {exc}\n")
            return 1, None
        finally:
            with self.lock:
                self.live.discard(ref)

    def stop(self, grace=GRACE + 10):
        """Cancel every task: running trainers save a checkpoint and exit 130; queued ones never start."""
        with self.lock:
            self.stopping = True
            live = list(self.live)
        for ref in live:
            self.ray.cancel(ref)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            with self.lock:
                if not self.live:
                    return
            time.sleep(0.1)

    def close(self):
        """Disconnect from the cluster (which keeps running)."""
        self.ray.shutdown()
