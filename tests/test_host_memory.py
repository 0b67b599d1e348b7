"""gpgan.backend.host_memory: freed host memory kept for the next step (glibc), and its switch.

The policy is process-wide, so each check runs in a fresh Python process."""
import os
import subprocess
import sys
import textwrap

import pytest

from gpgan.backend import host_memory
from helpers import QUICKSTART, ROOT

glibc_only = pytest.mark.skipif(host_memory._glibc() is None, reason="glibc's mallopt is needed")

# Six 8 MiB arrays, touched and freed, ten times: with glibc's defaults the freed 48 MiB at the
# heap's top is trimmed and every cycle touches fresh pages.
CYCLES = textwrap.dedent("""
    import resource, numpy
    from gpgan.backend import keep_freed_host_memory
    print(keep_freed_host_memory())
    def cycle():
        arrays = [numpy.ones(2 << 20, numpy.float32) for _ in range(6)]
        del arrays
    cycle()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(10):
        cycle()
    print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 10)
""")


def page_faults_per_cycle(keep):
    env = dict(os.environ, PYTHONPATH=ROOT, GPGAN_KEEP_HOST_MEMORY=keep)
    proc = subprocess.run([sys.executable, "-c", CYCLES], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    applied, faults = proc.stdout.split()
    return applied, float(faults)


@glibc_only
def test_kept_memory_is_reused_without_page_faults():
    applied, faults = page_faults_per_cycle("1")
    assert applied == "True"
    assert faults < 50, f"{faults} minor page faults per cycle of reused arrays"


@glibc_only
def test_with_glibc_defaults_the_same_cycles_fault():
    """The control: the switch off leaves glibc's defaults, under which the cycles do fault."""
    applied, faults = page_faults_per_cycle("0")
    assert applied == "False"
    assert faults > 1000


def test_a_bad_switch_value_names_the_variable_and_the_accepted_values(monkeypatch):
    monkeypatch.setenv("GPGAN_KEEP_HOST_MEMORY", "yes")
    with pytest.raises(ValueError, match=r"GPGAN_KEEP_HOST_MEMORY must be 0 .* or 1 .*got 'yes'"):
        host_memory.keep_freed_host_memory()


def test_the_trainer_refuses_a_bad_switch_value_without_a_traceback(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT, GPGAN_KEEP_HOST_MEMORY="yes")
    proc = subprocess.run([sys.executable, "-m", "gpgan.cli.train", QUICKSTART, "--set", "train.steps=2",
                           "--out", str(tmp_path), "--quiet"], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 1
    assert "GPGAN_KEEP_HOST_MEMORY must be 0" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "quickstart").exists() or not any((tmp_path / "quickstart").iterdir())
