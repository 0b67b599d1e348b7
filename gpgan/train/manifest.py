"""What a run records about where it ran: gpgan, Python, NumPy and CuPy versions, the version of
Numba when its CPU kernels are on, the git commit, the platform and the device, the command line
and the time."""
import datetime
import importlib.metadata
import os
import platform
import shlex
import subprocess
import sys

import numpy

import gpgan
from gpgan.backend import device_description
from gpgan.kernels import compiled_kernels_version, onednn_version

__all__ = ["environment_info", "git_commit", "invocation"]


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
    """Versions, platform and ``device`` (with what it is, in words)."""
    commit, dirty = git_commit()
    return {
        "gpgan_version": gpgan.__version__,
        "git_commit": commit,
        "git_dirty": dirty,
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "cupy": _cupy_version(),
        "numba": compiled_kernels_version(),
        "onednn": onednn_version(),
        "platform": platform.platform(),
        "device": device,
        "device_name": device_description(device),
    }


def invocation(argv=None):
    """``{"command": the shell-quoted command line, "time": now}``."""
    argv = sys.argv if argv is None else argv
    return {"command": " ".join(shlex.quote(a) for a in argv),
            "time": datetime.datetime.now().isoformat(timespec="seconds")}
