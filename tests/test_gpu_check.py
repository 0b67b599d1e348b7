"""scripts/gpu_check.py's own logic, which runs without a GPU: each stage in its own process, a
failed stage recorded with its reason without stopping the others, summary.json and the exit
status; and its readers of JUnit XML and metrics.jsonl."""
import json
import os
import subprocess
import sys

import pytest

from helpers import ROOT, write_cifar_fixture

sys.path.insert(0, os.path.join(ROOT, "scripts"))
import gpu_check  # noqa: E402


def test_failed_stages_are_recorded_with_their_reasons(tmp_path):
    # No CuPy needed: without one the cuda stage fails, and that failure is what is checked.
    if subprocess.run([sys.executable, "-c", "import cupy"], capture_output=True).returncode == 0:
        pytest.skip("CuPy is importable here: the cuda stage would train")
    write_cifar_fixture(tmp_path / "cifar", per_batch=16)  # 80 images: more than a batch of 64
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gpu_check.py"), "--out", str(tmp_path / "check"),
                           "--data", str(tmp_path / "cifar"), "--stages", "train,samples", "--precisions", "float32",
                           "--steps", "2"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    summary = json.loads((tmp_path / "check" / "summary.json").read_text())
    assert list(summary["stages"]) == ["train", "samples"]  # the second ran although the first failed
    train = summary["stages"]["train"]
    assert train["status"].startswith("failed") and "needs CuPy" in train["reason"]
    assert "\n" not in train["reason"] and (tmp_path / "check" / "train.log").is_file()
    assert "== gpu_check summary ==" in proc.stdout and "needs CuPy" in proc.stdout


def test_junit_counts_and_training_summary(tmp_path):
    xml = tmp_path / "tests.xml"
    xml.write_text('<testsuites><testsuite><testcase classname="tests.test_a" name="ok"/>'
                   '<testcase classname="tests.test_a" name="bad"><failure message="x"/></testcase>'
                   '<testcase classname="tests.test_b" name="skip"><skipped/></testcase>'
                   '<testcase classname="tests.test_b" name="err"><error message="y"/></testcase>'
                   '</testsuite></testsuites>')
    counts, failed = gpu_check.junit_counts(str(xml))
    assert counts == {"passed": 1, "failed": 1, "errors": 1, "skipped": 1}
    assert failed == ["tests.test_a::bad", "tests.test_b::err"]
    run = tmp_path / "run"
    run.mkdir()
    rows = [{"step": s, "time_per_step": t} for s, t in [(100, 1.0), (200, 0.5), (300, 0.25), (400, 0.25)]]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = gpu_check.training_summary(str(run), 400)
    # after the first quarter (step > 100): 0.5, 0.25, 0.25 -> median 0.25 s
    assert summary == {"records": 4, "last_step": 400, "median_time_per_step_s": 0.25, "steps_per_s": 4.0}


def test_profile_summary_keeps_each_engines_largest_kernels(tmp_path):
    kernels = {f"k{i}": {"calls": 1, "us": float(i)} for i in range(15)}
    path = tmp_path / "profile.json"
    path.write_text(json.dumps({"generator": {"gpgan graphed": {"gpu_ms_per_step": 0.105, "kernels": kernels},
                                              "PyTorch eager": {"gpu_ms_per_step": 0.0, "kernels": {}}}}))
    summary = gpu_check.profile_summary(str(path), top=3)
    assert summary["gpgan graphed"] == {"gpu_ms_per_step": 0.105, "top": [["k14", 14.0], ["k13", 13.0], ["k12", 12.0]]}
    assert summary["PyTorch eager"] == {"gpu_ms_per_step": 0.0, "top": []}
