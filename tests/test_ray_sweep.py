"""gpgan-ablate --cluster ray against a real Ray head that the test starts on 127.0.0.1 (and stops by
its process id): a toy sweep run as Ray tasks gives the same results.csv metrics as the local
sweep, finished runs are skipped and an unreachable cluster is a clear error.

Needs Ray (`pip install -e '.[ray]'`, which the test extra brings); skipped, with the reason,
without it.
"""
import csv
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

from gpgan.cli.ablate import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUICKSTART = os.path.join(ROOT, "configs", "quickstart.yaml")
RAY = os.path.join(os.path.dirname(sys.executable), "ray")

try:
    import ray  # noqa: F401
    _MISSING = None if os.path.isfile(RAY) else f"no `ray` command beside {sys.executable}"
except ImportError:
    _MISSING = "Ray is not installed (pip install -e '.[ray]')"

pytestmark = pytest.mark.skipif(_MISSING is not None, reason=str(_MISSING))

# Wall time differs between any two runs; everything else must agree.
TIMING = {"wall_time_s"}


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env():
    env = dict(os.environ, PYTHONPATH=ROOT, OPENBLAS_NUM_THREADS="1", RAY_USAGE_STATS_ENABLED="0")
    env.pop("RAY_ADDRESS", None)
    return env


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory):
    """A Ray head on 127.0.0.1 with 2 CPUs, stopped (SIGTERM to `ray start --block`, which stops
    every Ray process it started) when the module's tests are done."""
    tmp = tmp_path_factory.mktemp("ray")
    # Ray's session folder holds unix sockets, whose paths may not exceed 107 bytes: keep it short.
    sessions = tempfile.mkdtemp(prefix="gpgan-ray-", dir="/tmp" if os.path.isdir("/tmp") else None)
    port = _free_port()
    command = [RAY, "start", "--head", "--block", "--node-ip-address", "127.0.0.1", "--port", str(port),
               "--num-cpus", "2", "--num-gpus", "0",
               "--include-dashboard", "false", "--disable-usage-stats", "--object-store-memory", str(80 * 2**20),
               "--temp-dir", sessions]
    log = open(tmp / "head.log", "w")
    head = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=_env(),
                            stdin=subprocess.DEVNULL, start_new_session=True)
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while "This command will now block" not in (tmp / "head.log").read_text():
            assert head.poll() is None, (tmp / "head.log").read_text()
            assert time.monotonic() < deadline, "the Ray head did not start in 120 s"
            time.sleep(0.2)
        yield address
    finally:
        head.send_signal(signal.SIGTERM)
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()
        log.close()
        shutil.rmtree(sessions, ignore_errors=True)


def _sweep(tmp_path):
    path = tmp_path / "toy.yaml"
    path.write_text(textwrap.dedent(f"""\
        base: {QUICKSTART}
        set:
          train.steps: 30
          train.batch_size: 32
          model.generator_options.width: 16
          model.critic_options.width: 16
          train.eval_samples: 200
          train.eval_interval: 15
          train.log_interval: 10
          train.checkpoint_interval: 10
          train.sample_interval: 0
        axes:
          penalty.type: [none, r1]
          train.seed: [0, 1]
        metrics: [eval/modes, {{eval/reverse_kl: min}}]
        """))
    return path


def _rows(path):
    with open(path, newline="") as f:
        return sorted(({k: v for k, v in row.items() if k not in TIMING} for row in csv.DictReader(f)),
                      key=lambda r: r["run"])


def test_a_ray_sweep_reports_what_the_local_sweep_reports(ray_head, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", ROOT)
    sweep = _sweep(tmp_path)
    assert main([str(sweep), "--out", str(tmp_path / "local"), "--jobs", "2"]) == 0
    assert main([str(sweep), "--out", str(tmp_path / "ray"), "--cluster", "ray", "--ray-address", ray_head]) == 0
    local, on_ray = _rows(tmp_path / "local" / "results.csv"), _rows(tmp_path / "ray" / "results.csv")
    assert len(on_ray) == 4 and all(r["status"] == "finished" for r in on_ray)
    assert all(r["final/eval/modes"] and r["best/eval/reverse_kl"] and r["steps"] == "30" for r in on_ray)
    assert on_ray == local
    capsys.readouterr()
    # Finished runs are skipped on the cluster as locally.
    assert main([str(sweep), "--out", str(tmp_path / "ray"), "--cluster", "ray", "--ray-address", ray_head]) == 0
    assert "4 runs: skipped 4, started 0, resumed 0" in capsys.readouterr().out


def test_ctrl_c_cancels_the_tasks_and_the_next_sweep_resumes_them(ray_head, tmp_path):
    sweep = tmp_path / "long.yaml"
    sweep.write_text(textwrap.dedent(f"""\
        base: {QUICKSTART}
        set: {{train.steps: 1000, train.batch_size: 32, model.generator_options.width: 16,
               model.critic_options.width: 16, train.eval_samples: 200, train.log_interval: 10,
               train.checkpoint_interval: 0, train.sample_interval: 0}}
        axes:
          train.seed: [0, 1, 2]
        """))
    command = [sys.executable, "-m", "gpgan.cli.ablate", str(sweep), "--out", str(tmp_path / "out"),
               "--cluster", "ray", "--ray-address", ray_head]
    ablate = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
                              stdin=subprocess.DEVNULL)
    runs = tmp_path / "out" / "runs" / "quickstart"
    deadline = time.monotonic() + 120
    while len(list(runs.glob("*/metrics.jsonl"))) < 2:  # two CPUs: two runs going, one queued
        assert time.monotonic() < deadline and ablate.poll() is None, ablate.communicate()
        time.sleep(0.1)
    ablate.send_signal(signal.SIGINT)
    out, err = ablate.communicate(timeout=120)
    assert ablate.returncode == 130, out + err
    started = sorted(p.name for p in runs.iterdir())
    assert len(started) == 2 and "INTERRUPTED" in out
    for name in started:  # each stopped trainer saved its checkpoint
        assert len(list((runs / name / "checkpoints").glob("ckpt_*.npz"))) == 1
    again = subprocess.run(command, capture_output=True, text=True, env=_env(), timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "3 runs: skipped 0, started 1, resumed 2; finished 3, failed 0" in again.stdout


def test_an_unreachable_cluster_is_named(tmp_path, capsys):
    sweep = _sweep(tmp_path)
    port = _free_port()  # nothing listens there
    status = main([str(sweep), "--out", str(tmp_path / "x"), "--cluster", "ray", "--ray-address",
                   f"127.0.0.1:{port}"])
    assert status == 2
    assert f"cannot reach the Ray cluster at 127.0.0.1:{port}" in capsys.readouterr().err
