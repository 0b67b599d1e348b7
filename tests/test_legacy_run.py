"""A run folder written before the training step was split from the loop (gpgan 0.1.0 at commit
374a796, stopped at step 4 of 8 by train.stop_after) resumes after it to the same metrics and
final weights as an uninterrupted run of the same config made now, to float32 rounding: the
fixture's first four steps were computed on another machine (another CPU rounds float32 products
differently in the last bits, and agreeing first records do not prove the rest agree), so nothing
here is compared bit for bit. A resume on one machine is checked bit for bit in test_cli_train."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import yaml

from gpgan.train.monitor import TIMING_KEYS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LEGACY = os.path.join(ROOT, "tests", "fixtures", "run_v0_1")


def _train(*args):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, "-m", "gpgan.cli.train", *args, "--quiet"], capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc


def _metrics(run):
    with open(os.path.join(run, "metrics.jsonl")) as f:
        return [{k: v for k, v in json.loads(line).items() if k not in TIMING_KEYS} for line in f]


def _weights(run, step):
    with np.load(os.path.join(run, "checkpoints", f"ckpt_{step:06d}.npz"), allow_pickle=False) as f:
        return {k: f[k] for k in f.files if k != "__meta__"}


def test_a_run_folder_from_before_the_split_resumes_exactly(tmp_path):
    old = tmp_path / "legacy"
    shutil.copytree(LEGACY, old)
    proc = _train("--resume", str(old))
    assert "from step 4" in proc.stderr
    config = yaml.safe_load((old / "config.yaml").read_text())
    assert config["train"]["stop_after"] is None and config["train"]["steps"] == 8
    # Written before the EMA's ramp existed: it keeps averaging without one (train.ema.rampup).
    assert config["train"]["ema"]["enabled"] is True and config["train"]["ema"]["rampup"] is False
    straight_config = tmp_path / "straight.yaml"
    straight_config.write_text(yaml.safe_dump(config))
    _train(str(straight_config), "--out", str(tmp_path / "exp"), "--name", "straight")
    straight = tmp_path / "exp" / "straight" / "straight"
    resumed, fresh = _metrics(old), _metrics(straight)
    assert [m["step"] for m in resumed] == [m["step"] for m in fresh] == [2, 4, 6, 8]
    # The steps up to the stop were computed where the fixture was made: whatever this machine
    # computes agrees with them to float32 rounding (relative 1e-6 on the logged scalars; the
    # weights to 1e-5 relative, 1e-8 absolute for those near zero), never necessarily bit for bit.
    for before, now in zip(resumed, fresh):
        assert before.keys() == now.keys()
        np.testing.assert_allclose([before[k] for k in before], [now[k] for k in now], rtol=1e-6)
    a, b = _weights(old, 8), _weights(straight, 8)
    assert a.keys() == b.keys() and any(k.startswith("module/critic/") for k in a)
    for key in a:
        np.testing.assert_allclose(a[key], b[key], rtol=1e-5, atol=1e-8, err_msg=key)
