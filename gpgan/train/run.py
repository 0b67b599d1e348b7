"""The run folder: where a training run keeps its config, manifest, metrics, samples and checkpoints.

Layout (``experiments/<config name>/<name or timestamp>/``)::

    config.yaml        the resolved config (every key, defaults filled in)
    manifest.json      gpgan/Python/NumPy/CuPy versions, git commit, device, seed, command line
    metrics.jsonl      one JSON object per logged step (see gpgan.train.trainer)
    events.out.tfevents.*   TensorBoard scalars and sample grids (tensorboardX)
    samples/           step_000100.png ... and final.png
    checkpoints/       ckpt_000100.npz ... (the last K kept)
    final.json         written only when the run finished
"""
import datetime
import importlib.metadata
import json
import os
import platform
import re
import shlex
import subprocess
import sys

import numpy
import yaml

import gpgan
from gpgan.backend import device_description
from gpgan.train.config import dump_config, validate_config

__all__ = ["RunFolder", "environment_info", "git_commit"]

_CKPT = re.compile(r"^ckpt_(\d+)\.npz$")


def git_commit(directory=None):
    """``(commit, dirty)`` of the git checkout holding ``directory`` (gpgan's source by default),
    or ``(None, None)`` when it is not in one or git is missing."""
    directory = directory or os.path.dirname(os.path.abspath(gpgan.__file__))
    try:
        commit = subprocess.run(["git", "-C", directory, "rev-parse", "HEAD"], capture_output=True,
                                text=True, timeout=10)
        if commit.returncode != 0:
            return None, None
        status = subprocess.run(["git", "-C", directory, "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=10)
        return commit.stdout.strip(), bool(status.stdout.strip()) if status.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None, None


def _cupy_version():
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        return getattr(cupy, "__version__", None)
    for dist in ("cupy", "cupy-cuda12x", "cupy-cuda11x", "cupy-cuda13x"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def environment_info(device):
    """Versions, platform and ``device`` (with what it is, in words), for the manifest."""
    commit, dirty = git_commit()
    return {
        "gpgan_version": gpgan.__version__,
        "git_commit": commit,
        "git_dirty": dirty,
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "cupy": _cupy_version(),
        "platform": platform.platform(),
        "device": device,
        "device_name": device_description(device),
    }


def _timestamp():
    return datetime.datetime.now().strftime("%Y%m%d-%H%M%S")


class RunFolder:
    """Paths and small file operations of one run folder."""

    def __init__(self, path):
        self.path = os.path.abspath(os.fspath(path))

    # -- creation -----------------------------------------------------------------------------
    @staticmethod
    def check_name_free(out, config_name, name):
        """The path ``out/config_name/name`` for a new run.

        Raises:
            FileExistsError: when that folder already holds a run.
        """
        path = os.path.join(os.path.abspath(os.path.expanduser(out)), config_name, name)
        if os.path.exists(os.path.join(path, "config.yaml")):
            raise FileExistsError(f"run folder {path} already holds a run; pick another --name, or "
                                  f"continue it with `gpgan-train --resume {path}`")
        return path

    @classmethod
    def create(cls, out, config_name, name=None):
        """A new, empty run folder ``out/config_name/(name or timestamp)``.

        Raises:
            FileExistsError: when ``name`` is given and that folder already holds a run.
        """
        parent = os.path.join(os.path.abspath(os.path.expanduser(out)), config_name)
        if name is not None:
            path = cls.check_name_free(out, config_name, name)
        else:
            stamp = _timestamp()
            path = os.path.join(parent, stamp)
            k = 1
            while os.path.exists(path):
                k += 1
                path = os.path.join(parent, f"{stamp}-{k}")
        run = cls(path)
        os.makedirs(run.samples_dir, exist_ok=True)
        os.makedirs(run.checkpoints_dir, exist_ok=True)
        return run

    # -- paths --------------------------------------------------------------------------------
    @property
    def config_path(self):
        return os.path.join(self.path, "config.yaml")

    @property
    def manifest_path(self):
        return os.path.join(self.path, "manifest.json")

    @property
    def metrics_path(self):
        return os.path.join(self.path, "metrics.jsonl")

    @property
    def final_path(self):
        return os.path.join(self.path, "final.json")

    @property
    def samples_dir(self):
        return os.path.join(self.path, "samples")

    @property
    def checkpoints_dir(self):
        return os.path.join(self.path, "checkpoints")

    def checkpoint_path(self, step):
        return os.path.join(self.checkpoints_dir, f"ckpt_{step:06d}.npz")

    def sample_path(self, step=None):
        name = "final.png" if step is None else f"step_{step:06d}.png"
        return os.path.join(self.samples_dir, name)

    def exists(self):
        return os.path.isfile(self.config_path)

    # -- config and manifest ------------------------------------------------------------------
    def write_config(self, config):
        _atomic_write(self.config_path, dump_config(config))

    def read_config(self):
        if not self.exists():
            raise FileNotFoundError(f"{self.path} is not a run folder (it has no config.yaml)")
        with open(self.config_path, encoding="utf-8") as f:
            return validate_config(yaml.safe_load(f), source=self.config_path)

    def write_manifest(self, config, argv=None):
        """Write manifest.json for a new run."""
        argv = sys.argv if argv is None else argv
        manifest = environment_info(config["device"])
        manifest.update({
            "seed": config["train"]["seed"],
            "command": " ".join(shlex.quote(a) for a in argv),
            "started": datetime.datetime.now().isoformat(timespec="seconds"),
            "resumes": [],
        })
        _atomic_write(self.manifest_path, json.dumps(manifest, indent=2) + "\n")

    def record_resume(self, from_step, config, argv=None):
        """Append a resume entry (time, step, command, versions) to manifest.json."""
        argv = sys.argv if argv is None else argv
        try:
            with open(self.manifest_path, encoding="utf-8") as f:
                manifest = json.load(f)
        except (OSError, ValueError):
            manifest = {}
        entry = environment_info(config["device"])
        entry.update({"from_step": from_step,
                      "command": " ".join(shlex.quote(a) for a in argv),
                      "time": datetime.datetime.now().isoformat(timespec="seconds")})
        manifest.setdefault("resumes", []).append(entry)
        _atomic_write(self.manifest_path, json.dumps(manifest, indent=2) + "\n")

    # -- checkpoints --------------------------------------------------------------------------
    def checkpoints(self):
        """``[(step, path)]`` of the checkpoints present, by step."""
        if not os.path.isdir(self.checkpoints_dir):
            return []
        found = []
        for name in os.listdir(self.checkpoints_dir):
            m = _CKPT.match(name)
            if m:
                found.append((int(m.group(1)), os.path.join(self.checkpoints_dir, name)))
        return sorted(found)

    def latest_checkpoint(self):
        """``(step, path)`` of the newest checkpoint, or None."""
        found = self.checkpoints()
        return found[-1] if found else None

    def prune_checkpoints(self, keep):
        for _, path in self.checkpoints()[:-keep]:
            os.remove(path)

    # -- metrics ------------------------------------------------------------------------------
    def append_metrics(self, record):
        with open(self.metrics_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")

    def read_metrics(self):
        if not os.path.isfile(self.metrics_path):
            return []
        records = []
        with open(self.metrics_path, encoding="utf-8") as f:
            lines = [line for line in f if line.strip()]
        for k, line in enumerate(lines):
            try:
                records.append(json.loads(line))
            except ValueError:
                if k == len(lines) - 1:  # a line cut short by a crash (SIGKILL while writing)
                    break
                raise ValueError(f"{self.metrics_path}: line {k + 1} is not JSON: {line[:80]!r}") from None
        return records

    def truncate_metrics(self, step):
        """Keep only the records up to ``step`` (what the checkpoint at ``step`` had seen)."""
        kept = [r for r in self.read_metrics() if r["step"] <= step]
        _atomic_write(self.metrics_path, "".join(json.dumps(r) + "\n" for r in kept))

    # -- final --------------------------------------------------------------------------------
    def write_final(self, summary):
        _atomic_write(self.final_path, json.dumps(summary, indent=2) + "\n")

    def read_final(self):
        if not os.path.isfile(self.final_path):
            return None
        with open(self.final_path, encoding="utf-8") as f:
            return json.load(f)

    def is_finished(self):
        return os.path.isfile(self.final_path)


def _atomic_write(path, text):
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
