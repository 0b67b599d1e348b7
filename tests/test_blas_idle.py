"""gpgan.backend.blas_idle and core_share: OpenBLAS's idle spin is cut short when gpgan is imported
before NumPy, and the default thread count of gpgan's array passes follows it; the ranks an MPI
launcher starts on one machine, and a sweep's trainers, share its cores."""
import json
import os
import subprocess
import sys

import pytest

from gpgan.backend.blas_idle import ONEDNN_TIMEOUT, SHORT_TIMEOUT, TIMEOUT_ENV
from gpgan.backend import compiled, core_share
from gpgan.backend.core_share import (BLAS_THREAD_VARS, LOCAL_SIZE_VARIABLES, available_cores, cores_per_process,
                                      local_processes)
from gpgan.studies.trainers import THREAD_VARS, _child_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROBE = """
import json, os, sys
{first}
from gpgan.backend import BLAS_IDLES_BRIEFLY, get_num_threads
print(json.dumps({{"timeout": os.environ.get("{var}"), "brief": BLAS_IDLES_BRIEFLY, "threads": get_num_threads(),
                  "blas": {{v: os.environ.get(v) for v in {blas!r}}}}}))
"""


def probe(first, blas=False, **env):
    """Import gpgan in a fresh interpreter (after ``first``) and report what it set (with
    ``blas``, also the BLAS thread variables)."""
    unset = (TIMEOUT_ENV, "GPGAN_NUM_THREADS", "GPGAN_ONEDNN") + BLAS_THREAD_VARS + LOCAL_SIZE_VARIABLES
    environ = {k: v for k, v in os.environ.items() if k not in unset}
    environ.update(env, PYTHONPATH=ROOT)
    code = PROBE.format(first=first, var=TIMEOUT_ENV, blas=BLAS_THREAD_VARS)
    out = subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    if not blas:
        del got["blas"]
    return got


def test_gpgan_first_cuts_the_spin_short_and_splits_over_every_core():
    got = probe("import gpgan", GPGAN_ONEDNN="0")
    assert got == {"timeout": str(SHORT_TIMEOUT), "brief": True, "threads": available_cores()}


def test_the_spin_is_shortest_where_onednn_runs_the_convolutions():
    # Where onednn-cpu-gomp is installed and not switched off, oneDNN's OpenMP threads take the
    # convolutions, and a spinning BLAS worker would stretch them: the spin is cut to 2**4 cycles.
    installed = compiled.onednn._installed()
    expected = str(ONEDNN_TIMEOUT if installed else SHORT_TIMEOUT)
    assert probe("import gpgan") == {"timeout": expected, "brief": True, "threads": available_cores()}
    assert probe("import gpgan", GPGAN_ONEDNN="0")["timeout"] == str(SHORT_TIMEOUT)
    # A bad value is reported where a convolution asks for oneDNN, not as an import traceback.
    assert probe("import gpgan", GPGAN_ONEDNN="fast")["timeout"] == str(SHORT_TIMEOUT)


def test_a_users_setting_is_kept():
    assert probe("import gpgan", **{TIMEOUT_ENV: "28"}) == {"timeout": "28", "brief": False, "threads": 1}
    assert probe("import gpgan", **{TIMEOUT_ENV: "10"})["brief"] is True
    assert probe("import gpgan", **{TIMEOUT_ENV: "22"})["brief"] is False
    assert probe("import gpgan", **{TIMEOUT_ENV: "10", "GPGAN_NUM_THREADS": "3"})["threads"] == 3


def test_numpy_loaded_first_leaves_openblas_alone_and_one_thread():
    # OpenBLAS read its setting when NumPy loaded it: setting the variable now would change nothing.
    assert probe("import numpy") == {"timeout": None, "brief": False, "threads": 1}


def _share(ranks):
    """This machine's cores split among ``ranks`` local processes, as the module documents it:
    a process pinned to fewer than all of them keeps its mask."""
    cores = available_cores()
    return max(1, cores // ranks) if cores >= os.cpu_count() else cores


@pytest.mark.parametrize("variable", LOCAL_SIZE_VARIABLES)
def test_mpi_ranks_on_one_machine_share_its_cores(variable):
    got = probe("import gpgan", blas=True, **{variable: "2"})
    assert got["threads"] == _share(2)
    assert got["blas"] == {v: str(_share(2)) for v in BLAS_THREAD_VARS}
    # Not started by a launcher: BLAS keeps its own default, gpgan's passes take every core.
    alone = probe("import gpgan", blas=True)
    assert alone["threads"] == available_cores() and alone["blas"] == {v: None for v in BLAS_THREAD_VARS}


def test_a_users_thread_settings_are_kept_under_mpi():
    got = probe("import gpgan", blas=True, MPI_LOCALNRANKS="2", OPENBLAS_NUM_THREADS="3", GPGAN_NUM_THREADS="5")
    assert got["threads"] == 5 and got["blas"]["OPENBLAS_NUM_THREADS"] == "3"
    # NumPy loaded first: its BLAS has its thread count already, so nothing is set.
    assert probe("import numpy", blas=True, MPI_LOCALNRANKS="2")["blas"] == {v: None for v in BLAS_THREAD_VARS}


def test_local_processes_and_shares():
    assert local_processes({}) == 1
    assert local_processes({"OMPI_COMM_WORLD_LOCAL_SIZE": "4"}) == 4
    assert local_processes({"MPI_LOCALNRANKS": "3", "OMPI_COMM_WORLD_LOCAL_SIZE": "4"}) == 3
    assert local_processes({"MPI_LOCALNRANKS": "", "MV2_COMM_WORLD_LOCAL_SIZE": "x"}) == 1
    assert local_processes({"MPI_LOCALNRANKS": "0"}) == 1
    assert [cores_per_process(n, cores=16) for n in (1, 2, 3, 16, 32)] == [16, 8, 5, 1, 1]


@pytest.mark.parametrize("mask, machine, ranks, want", [
    (16, 16, "1", 16),   # no MPI run: every core the mask allows
    (16, 16, "4", 4),    # four unpinned ranks on a 16-core machine: a quarter each
    (4, 16, "4", 4),     # the launcher pinned this rank to 4 cores: its mask is its share already
    (1, 16, "4", 1),
])
def test_process_cores_divides_only_an_unpinned_machine(monkeypatch, mask, machine, ranks, want):
    monkeypatch.setattr(core_share, "available_cores", lambda: mask)
    monkeypatch.setattr(core_share.os, "cpu_count", lambda: machine)
    assert core_share.process_cores({"MPI_LOCALNRANKS": ranks}) == want


@pytest.mark.parametrize("jobs", [1, 2])
def test_sweep_trainers_share_the_cores(monkeypatch, jobs):
    for var in THREAD_VARS:
        monkeypatch.delenv(var, raising=False)
    env = _child_env(None, jobs)
    want = str(max(1, available_cores() // jobs))
    assert {var: env[var] for var in THREAD_VARS} == {var: want for var in THREAD_VARS}
    assert "GPGAN_NUM_THREADS" in THREAD_VARS
