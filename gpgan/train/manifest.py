"""What a run records about where it ran: gpgan, Python, NumPy (and the BLAS it calls) and CuPy
versions, the versions of Numba and oneDNN when they ran, which optional extras are installed
(each package's version), the git commit, the platform, the CPU model and the device, the command
line and the time.

These are what decide a run's numbers beyond its config: one seed gives the same bits on the same
machine and install; another CPU model (BLAS and oneDNN pick kernels per CPU), other extras
(oneDNN's and Numba's kernels round float32 differently from NumPy's) or another process count
agree to float32 rounding at first and then diverge, as chaotic training does.
"""
import datetime
import importlib.metadata
import os
import platform
import re
import shlex
import subprocess
import sys

import numpy

import gpgan
from gpgan.backend import cpu_model, device_description
from gpgan.kernels import compiled_kernels_version, onednn_version

__all__ = ["environment_info", "extras_installed", "git_commit", "invocation"]


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


def _blas():
    """NumPy's BLAS as ``"name version"`` (NumPy >= 1.25 reports it), else None."""
    try:
        blas = numpy.show_config(mode="dicts")["Build Dependencies"]["blas"]
        return f"{blas.get('name')} {blas.get('version')}"
    except Exception:  # an older NumPy, or a layout that changed: recording it must not fail a run
        return None


_EXTRA = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")


def extras_installed():
    """``{extra: {distribution: installed version or None}}`` for gpgan's optional extras (from
    gpgan's own package metadata, so the table follows pyproject.toml), or {} when gpgan is not
    installed as a distribution. An extra that only names other extras (``test``) lists theirs."""
    try:
        requirements = importlib.metadata.requires("gpgan") or []
    except importlib.metadata.PackageNotFoundError:
        return {}
    extras = {}
    for requirement in requirements:
        match = _EXTRA.search(requirement)
        if not match:
            continue
        name = re.match(r"[A-Za-z0-9_.\-]+", requirement).group(0)
        if name.lower() == "gpgan":  # gpgan[cpu,...]: the other extras, listed under their own names
            continue
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            version = None
        extras.setdefault(match.group(1), {})[name] = version
    return extras


def environment_info(device):
    """Versions, installed extras, platform, CPU model and ``device`` (with what it is, in words).
    ``numba`` and ``onednn`` are the versions that ran (None: off or absent); ``extras`` what is
    installed."""
    commit, dirty = git_commit()
    return {
        "gpgan_version": gpgan.__version__,
        "git_commit": commit,
        "git_dirty": dirty,
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "blas": _blas(),
        "cupy": _cupy_version(),
        "numba": compiled_kernels_version(),
        "onednn": onednn_version(),
        "extras": extras_installed(),
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "device": device,
        "device_name": device_description(device),
    }


def invocation(argv=None):
    """``{"command": the shell-quoted command line, "time": now}``."""
    argv = sys.argv if argv is None else argv
    return {"command": " ".join(shlex.quote(a) for a in argv),
            "time": datetime.datetime.now().isoformat(timespec="seconds")}
