"""gpgan.backend.blas_idle: OpenBLAS's idle spin is cut short when gpgan is imported before NumPy,
and the default thread count of gpgan's array passes follows it."""
import json
import os
import subprocess
import sys

import pytest

from gpgan.backend.blas_idle import SHORT_TIMEOUT, TIMEOUT_ENV
from gpgan.backend.threads import available_cores
from gpgan.studies.trainers import THREAD_VARS, _child_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROBE = """
import json, os, sys
{first}
from gpgan.backend import BLAS_IDLES_BRIEFLY, get_num_threads
print(json.dumps({{"timeout": os.environ.get("{var}"), "brief": BLAS_IDLES_BRIEFLY, "threads": get_num_threads()}}))
"""


def probe(first, **env):
    """Import gpgan in a fresh interpreter (after ``first``) and report what it set."""
    environ = {k: v for k, v in os.environ.items() if k not in (TIMEOUT_ENV, "GPGAN_NUM_THREADS")}
    environ.update(env, PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", PROBE.format(first=first, var=TIMEOUT_ENV)], env=environ,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_gpgan_first_cuts_the_spin_short_and_splits_over_every_core():
    got = probe("import gpgan")
    assert got == {"timeout": str(SHORT_TIMEOUT), "brief": True, "threads": available_cores()}


def test_a_users_setting_is_kept():
    assert probe("import gpgan", **{TIMEOUT_ENV: "28"}) == {"timeout": "28", "brief": False, "threads": 1}
    assert probe("import gpgan", **{TIMEOUT_ENV: "10"})["brief"] is True
    assert probe("import gpgan", **{TIMEOUT_ENV: "22"})["brief"] is False
    assert probe("import gpgan", **{TIMEOUT_ENV: "10", "GPGAN_NUM_THREADS": "3"})["threads"] == 3


def test_numpy_loaded_first_leaves_openblas_alone_and_one_thread():
    # OpenBLAS read its setting when NumPy loaded it: setting the variable now would change nothing.
    assert probe("import numpy") == {"timeout": None, "brief": False, "threads": 1}


@pytest.mark.parametrize("jobs", [1, 2])
def test_sweep_trainers_share_the_cores(monkeypatch, jobs):
    for var in THREAD_VARS:
        monkeypatch.delenv(var, raising=False)
    env = _child_env(None, jobs)
    want = str(max(1, available_cores() // jobs))
    assert {var: env[var] for var in THREAD_VARS} == {var: want for var in THREAD_VARS}
    assert "GPGAN_NUM_THREADS" in THREAD_VARS
