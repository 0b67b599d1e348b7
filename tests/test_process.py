"""Process settings: importing gpgan changes nothing and the order of imports changes nothing;
gpgan.configure_process (gpgan.kernels.process) cuts OpenBLAS's idle spin short where NumPy is not
loaded yet, or starts the command line again to have it; the ranks an MPI launcher starts on one
machine, and a sweep's trainers, share its cores (gpgan.backend.core_share)."""
import json
import os
import subprocess
import sys

import pytest

from gpgan.backend import core_share
from gpgan.backend.core_share import (BLAS_THREAD_VARS, LOCAL_SIZE_VARIABLES, available_cores, cores_per_process,
                                      local_processes)
from gpgan.kernels import switches
from gpgan.kernels.process import (ONEDNN_TIMEOUT, RESTARTED_ENV, SHORT_SPIN, SHORT_TIMEOUT, SPIN_ENV, TIMEOUT_ENV,
                                   WAIT_POLICY_ENV)
from gpgan.studies.trainers import THREAD_VARS, _child_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WATCHED = ((TIMEOUT_ENV, SPIN_ENV, WAIT_POLICY_ENV, "GPGAN_NUM_THREADS", "GPGAN_ONEDNN", RESTARTED_ENV) + BLAS_THREAD_VARS
           + LOCAL_SIZE_VARIABLES)

PROBE = """
import json, os, sys
before = dict(os.environ)
{first}
import gpgan
from gpgan.backend import host_memory
imported = {{"changed": sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k)),
            "threads": gpgan.get_num_threads(), "host_memory": host_memory._applied}}
settings = gpgan.configure_process({args}) if {configure} else None
print(json.dumps({{"imported": imported, "settings": settings and settings._asdict(),
                  "environ": {{v: os.environ.get(v) for v in {watched!r}}}}}))
"""


def probe(first="", configure=True, args="", **env):
    """In a fresh interpreter: run ``first``, import gpgan, then (``configure``) call
    ``gpgan.configure_process(args)``; returns what the import changed and what the call did. The
    watched variables are unset unless ``env`` sets them."""
    environ = {k: v for k, v in os.environ.items() if k not in WATCHED}
    environ.update(env, PYTHONPATH=ROOT)
    code = PROBE.format(first=first, configure=configure, args=args, watched=WATCHED)
    out = subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    got = json.loads(lines[-1])
    got["runs"] = len(lines)
    return got


def _spin():
    return str(ONEDNN_TIMEOUT if switches.onednn_switch._installed() else SHORT_TIMEOUT)


@pytest.mark.parametrize("first", ["", "import numpy", "import numpy, gpgan.functions, gpgan.train, gpgan.cli.train"])
def test_importing_gpgan_changes_nothing_in_either_order(first):
    got = probe(first, configure=False)
    # No variable set, freed host memory returned to the OS as glibc does, and every core for the
    # array passes whichever of NumPy and gpgan came first.
    assert got["imported"] == {"changed": [], "threads": available_cores(), "host_memory": False}
    assert got["environ"] == dict.fromkeys(WATCHED)


def test_without_a_restart_the_spin_is_set_for_child_processes_only():
    # Importing gpgan loads NumPy, and OpenBLAS read its setting then: the variable is set for the
    # processes this one starts, but this one goes on with OpenBLAS's default spin, and says so.
    for first in ("", "import numpy"):
        got = probe(first, GPGAN_ONEDNN="0")
        assert got["settings"]["environment"] == {TIMEOUT_ENV: str(SHORT_TIMEOUT), SPIN_ENV: str(SHORT_SPIN)}
        assert got["settings"]["blas_idles_briefly"] is False and got["runs"] == 1
        assert got["environ"][TIMEOUT_ENV] == str(SHORT_TIMEOUT) and got["settings"]["threads"] == available_cores()


def test_the_spin_is_shortest_where_onednn_runs_the_convolutions():
    # Where onednn-cpu-gomp is installed and not switched off, oneDNN's OpenMP threads take the
    # convolutions, and a spinning BLAS worker would stretch them: the spin is cut to 2**4 cycles.
    assert probe()["environ"][TIMEOUT_ENV] == _spin()
    # A bad value is reported where a convolution asks for oneDNN, not by configure_process.
    assert probe(GPGAN_ONEDNN="fast")["environ"][TIMEOUT_ENV] == str(SHORT_TIMEOUT)


def test_a_users_setting_is_kept():
    got = probe(**{TIMEOUT_ENV: "28", SPIN_ENV: "300000"})
    assert got["settings"]["environment"] == {} and got["environ"][TIMEOUT_ENV] == "28"
    assert got["environ"][SPIN_ENV] == "300000"
    assert got["settings"]["blas_idles_briefly"] is False and got["settings"]["threads"] == available_cores()
    assert probe(**{TIMEOUT_ENV: "10"})["settings"]["blas_idles_briefly"] is True
    assert probe(**{TIMEOUT_ENV: "22"})["settings"]["blas_idles_briefly"] is False
    assert probe(**{TIMEOUT_ENV: "10", "GPGAN_NUM_THREADS": "3"})["settings"]["threads"] == 3


def _loads_libgomp(code):
    """Whether ``code`` run in a fresh interpreter leaves GNU OpenMP loaded."""
    check = code + "\nfrom gpgan.backend.core_share import openmp_loaded; print(openmp_loaded())"
    out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=ROOT))
    return out.returncode == 0 and out.stdout.split()[-1:] == ["True"]


def test_openmp_threads_spin_briefly_unless_the_user_chose_how_they_wait():
    """libgomp reads GOMP_SPINCOUNT when it loads, with the first oneDNN or Numba kernel, after
    configure_process: no restart is needed for it. A user's OMP_WAIT_POLICY (PASSIVE: no spin;
    ACTIVE: spin on) or GOMP_SPINCOUNT is theirs."""
    got = probe("import numpy; print('started', flush=True)", args="restart=True", **{TIMEOUT_ENV: "20"})
    assert got["environ"][SPIN_ENV] == str(SHORT_SPIN)
    # No restart (started, the report), unless this NumPy's BLAS is an OpenMP build that loaded
    # libgomp already (started, started again, the report).
    assert got["runs"] == (3 if _loads_libgomp("import numpy") else 2)
    if got["runs"] == 2:
        assert got["settings"]["environment"] == {SPIN_ENV: str(SHORT_SPIN)}
    for policy in ("PASSIVE", "ACTIVE"):
        got = probe(**{WAIT_POLICY_ENV: policy})
        assert got["environ"][SPIN_ENV] is None and got["environ"][WAIT_POLICY_ENV] == policy


def test_the_command_line_starts_again_for_the_spin_when_libgomp_was_loaded_before():
    load = "import numpy, ctypes, ctypes.util; ctypes.CDLL(ctypes.util.find_library('gomp') or 'libgomp.so.1')"
    if not _loads_libgomp(load):
        pytest.skip("no GNU OpenMP (libgomp.so.1) on this machine")
    got = probe(load + "; print('started', flush=True)", args="restart=True", **{TIMEOUT_ENV: "20"})
    assert got["runs"] == 3  # started, started again, the report
    assert got["environ"][SPIN_ENV] == str(SHORT_SPIN) and got["environ"][RESTARTED_ENV] == "1"


def test_restart_starts_the_command_line_again_once_with_the_settings():
    got = probe("import numpy; print('started', flush=True)", args="restart=True")
    assert got["runs"] == 3  # started, started again, the report
    assert got["settings"]["blas_idles_briefly"] is True and got["settings"]["environment"] == {}
    assert got["environ"][TIMEOUT_ENV] == _spin() and got["environ"][RESTARTED_ENV] == "1"
    # Nothing to change (the user's values): no restart.
    assert probe("import numpy", args="restart=True", **{TIMEOUT_ENV: "20", SPIN_ENV: "1000"})["runs"] == 1


def test_a_command_line_tool_restarts_only_when_run_as_a_program():
    code = ("import sys, os; print('started', flush=True)\n"
            "from gpgan.cli._process import configure\n"
            "configure(None if sys.argv[1:] == ['program'] else [])\n"
            "print(os.environ.get('%s'))\n" % TIMEOUT_ENV)
    environ = {k: v for k, v in os.environ.items() if k not in WATCHED}
    environ.update(PYTHONPATH=ROOT)
    for arg, want in (("program", ["started", "started", _spin()]), ("library", ["started", _spin()])):
        out = subprocess.run([sys.executable, "-c", code, arg], env=environ, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == want


def _share(ranks):
    """This machine's cores split among ``ranks`` local processes, as the module documents it:
    a process pinned to fewer than all of them keeps its mask."""
    cores = available_cores()
    return max(1, cores // ranks) if cores >= os.cpu_count() else cores


@pytest.mark.parametrize("variable", LOCAL_SIZE_VARIABLES)
def test_mpi_ranks_on_one_machine_share_its_cores(variable):
    got = probe(**{variable: "2"})
    assert got["settings"]["threads"] == _share(2)
    assert {v: got["environ"][v] for v in BLAS_THREAD_VARS} == {v: str(_share(2)) for v in BLAS_THREAD_VARS}
    # Not started by a launcher: BLAS keeps its own default, gpgan's passes take every core.
    alone = probe()
    assert alone["settings"]["threads"] == available_cores()
    assert {v: alone["environ"][v] for v in BLAS_THREAD_VARS} == dict.fromkeys(BLAS_THREAD_VARS)


def test_a_users_thread_settings_are_kept_under_mpi():
    got = probe(MPI_LOCALNRANKS="2", OPENBLAS_NUM_THREADS="3", GPGAN_NUM_THREADS="5")
    assert got["settings"]["threads"] == 5 and got["environ"]["OPENBLAS_NUM_THREADS"] == "3"


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
    assert env[TIMEOUT_ENV] == os.environ.get(TIMEOUT_ENV, _spin())  # the trainer need not start again
