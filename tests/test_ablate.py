"""gpgan-ablate end to end: sweeps from nothing, skipping, resuming, failures, report-only, validation.

Most tests drive the CLI (gpgan.cli.ablate.main) against a small fake trainer (a script that
writes a run folder per the run-folder contract, with metrics that are a known function of the
seed and the penalty weight), so the report's statistics can be checked against closed forms.
The tests marked "real" run the actual gpgan-train for a few steps.
"""
import json
import math
import os
import re
import shlex
import signal
import statistics
import time
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from gpgan.cli.ablate import main
from gpgan.files import FileLock
from gpgan.studies import IGNORED, SweepError, expand_runs, load_sweep
from gpgan.studies.statistics import mean_std
from gpgan.studies.runner import stderr_tail
from gpgan.viz import PALETTE
from helpers import FAKE_TRAINER, gpgan_train, read_csv

REPO = Path(__file__).resolve().parent.parent



@pytest.fixture
def fake(tmp_path, monkeypatch):
    script = tmp_path / "fake_train.py"
    script.write_text(FAKE_TRAINER)
    monkeypatch.setenv("GPGAN_TRAIN_CMD", shlex.join([sys.executable, str(script)]))
    return script


def write_sweep(tmp_path, body, name="sweep.yaml", base_text="device: cpu\n"):
    base = tmp_path / "base.yaml"
    if not base.exists():
        base.write_text(base_text)
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def is_png(path):
    with Image.open(path) as img:
        return img.format == "PNG" and img.width > 10 and img.height > 10


TINY = """\
    base: base.yaml
    axes:
      penalty.type: [r1, wgan_gp]
      penalty.weight: [1.0]
      train.seed: [0, 1]
    metrics: [eval/modes, {eval/reverse_kl: min}]
"""


# ----------------------------------------------------------------------------------------------
# fake trainer

@pytest.mark.parametrize("data, cell", [("ring8", 200), ("cifar10", 560)])
def test_sample_tiles_keep_image_grids_near_their_own_resolution(tmp_path, fake, monkeypatch, data, cell):
    """The report shrinks a run's final samples to fit a cell: 200 px for a scatter plot of 2-D
    points, 560 px for a grid of generated images (the trainer's CIFAR-10 grids, raw and EMA side
    by side, are about 1,100 px wide: a 200 px cell left each image 12 px wide)."""
    monkeypatch.setenv("FAKE_SAMPLE_SIZE", "1104x596")
    image = ", eval.metrics: [fid, pr], eval.samples: 500, train.eval_interval: 100, train.patience: 2" \
        if data == "cifar10" else ""
    sweep = write_sweep(tmp_path, TINY.replace("train.seed: [0, 1]", "train.seed: [0]")
                        + f"    set: {{data.name: {data}{image}}}\n")
    out = tmp_path / "out"
    assert main([str(sweep), "--out", str(out)]) == 0
    if image:  # the protocol, from the runs' config
        assert ("- Evaluation: FID, precision/recall (k = 3) of 500 samples of the generator (fixed noise) "
                "against cifar10:train, every 100 steps and at the end; `train.patience` 2: a run ends after that "
                "many evaluations without a better eval/fid.\n") in (out / "REPORT.md").read_text()
    with Image.open(out / "figures" / "samples.png") as tiles:
        # two settings side by side: each cell is the shrunk sample's width plus padding
        assert 2 * cell < tiles.width < 2 * cell + 40, tiles.size
        assert round(596 * cell / 1104) < tiles.height < round(596 * cell / 1104) + 80


def test_samples_at_the_best_evaluation_are_tiled_beside_the_final_ones(tmp_path, fake, monkeypatch):
    """A run that ended past its best evaluation (the fake's modes peak at step 1 of 3) also shows the
    samples written at that step, labelled with it; without those images only the final tile is drawn."""
    sweep = write_sweep(tmp_path, TINY.replace("train.seed: [0, 1]", "train.seed: [0]"))
    out = tmp_path / "out"
    assert main([str(sweep), "--out", str(out)]) == 0
    assert not (out / "figures" / "samples_best.png").exists()

    monkeypatch.setenv("FAKE_STEP_SAMPLES", "1")
    out = tmp_path / "with_steps"
    assert main([str(sweep), "--out", str(out)]) == 0
    report = (out / "REPORT.md").read_text()
    assert "samples at each run's best eval/modes per setting" in report
    assert "figures/samples_best.png" in report
    with Image.open(out / "figures" / "samples_best.png") as best, Image.open(out / "figures" / "samples.png") as final:
        assert best.width > final.width  # the labels name the step
        colours = {c for _, c in best.convert("RGB").getcolors(1 << 16)}
        final_colours = {c for _, c in final.convert("RGB").getcolors(1 << 16)}
    shades = [int(20 * 1.0) % 256, int(20 * 1.0) % 256]  # seed 0, weight 1 for both settings
    assert (shades[0], 10, 50) in colours and (shades[0], 10, 50) not in final_colours     # step 1's samples
    assert (shades[0], 100, 200) in final_colours and (shades[0], 100, 200) not in colours  # final.png's


def test_an_incomplete_run_shows_its_evaluations_so_far(tmp_path, fake):
    """A run folder without final.json (e.g. a trainer killed after its last log) is unfinished: the
    report names its checkpoint and its first metric's best (by that metric's direction) and last
    evaluation so far; the fake's modes peak at step 1 (final + 5) and end at step 3."""
    sweep = write_sweep(tmp_path, TINY.replace("train.seed: [0, 1]", "train.seed: [0]"))
    out = tmp_path / "out"
    assert main([str(sweep), "--out", str(out)]) == 0
    run = next((out / "runs").glob("*/type-r1__weight-1.0__seed-0"))
    final_json = (run / "final.json").read_bytes()
    (run / "final.json").unlink()
    assert main([str(sweep), "--out", str(out), "--report-only"]) == 1
    final = 10 + 0 + 1.0
    report = (out / "REPORT.md").read_text()
    assert (f"- `type-r1__weight-1.0__seed-0`: unfinished, checkpoint at step 1; eval/modes so far: best {final + 5:.4g} "
            f"at step 1, last {final:.4g} at step 3 (3 evaluations)\n") in report
    # ... and its curve so far, in a figure of its own.
    so_far = out / "figures" / "curves" / "so_far_eval-modes.png"
    assert "![eval/modes so far of the incomplete runs (they may still change)](figures/curves/so_far_eval-modes.png)" in report
    with Image.open(so_far) as image:
        assert PALETTE[0] in {c for _, c in image.convert("RGB").getcolors(1 << 16)}  # the run's line
    # Finished again, the run leaves the incomplete runs, and their figure goes with them.
    (run / "final.json").write_bytes(final_json)
    assert main([str(sweep), "--out", str(out), "--report-only"]) == 0
    assert not so_far.exists() and "so far" not in (out / "REPORT.md").read_text()


def test_the_report_lists_what_gpgan_eval_scored_afterwards(tmp_path, fake):
    """eval_<step>.json files (what `gpgan-eval RUN/checkpoints/best.npz --ref cifar10:test` writes)
    in a finished run's folder become rows of their own section, in step order, each score with its
    spread where the file has one; unreadable and foreign files are left out."""
    sweep = write_sweep(tmp_path, TINY.replace("train.seed: [0, 1]", "train.seed: [0]"))
    out = tmp_path / "out"
    assert main([str(sweep), "--out", str(out)]) == 0
    assert "## Scored afterwards" not in (out / "REPORT.md").read_text()
    run = next((out / "runs").glob("*/type-r1__weight-1.0__seed-0"))
    scored = {"checkpoint": str(run / "checkpoints" / "best.npz"), "weights": "ema", "samples": 5000,
              "seed": 0, "metrics": ["fid", "kid"], "reference": "cifar10:test (1,017 images)"}
    (run / "eval_000003_cifar10-test.json").write_text(json.dumps(
        {**scored, "step": 3, "scores": {"eval/fid": 41.25, "eval/kid": 0.0123, "eval_std/kid": 0.0004}}))
    (run / "eval_000003.json").write_text(json.dumps(  # the same step against the run's own reference
        {**scored, "step": 3, "reference": "cifar10:train (5,085 images)", "scores": {"eval/fid": 30.5}}))
    (run / "eval_000002.json").write_text(json.dumps({**scored, "step": 2, "weights": "raw",
                                                      "scores": {"eval/fid": 50.5, "eval/precision": 0.61}}))
    (run / "eval_000001.json").write_text("{not json")
    (run / "eval_best.json").write_text(json.dumps({"scores": {"eval/fid": 1.0}}))
    assert main([str(sweep), "--out", str(out), "--report-only"]) == 0
    report = (out / "REPORT.md").read_text()
    assert ("| run | step | checkpoint | weights | samples | reference | eval/fid | eval/precision | eval/kid |\n"
            "|---|---|---|---|---|---|---|---|---|\n"
            "| `type-r1__weight-1.0__seed-0` | 2 | `best.npz` | raw | 5,000 | cifar10:test (1,017 images) | 50.5 | 0.61 "
            "| n/a |\n"
            "| `type-r1__weight-1.0__seed-0` | 3 | `best.npz` | ema | 5,000 | cifar10:train (5,085 images) | 30.5 | n/a "
            "| n/a |\n"
            "| `type-r1__weight-1.0__seed-0` | 3 | `best.npz` | ema | 5,000 | cifar10:test (1,017 images) | 41.25 | n/a "
            "| 0.0123 ± 0.0004 |\n") in report
    section = report[report.index("## Scored afterwards"):report.index("## Failures")]
    assert section.count("`type-r1__weight-1.0__seed-0` | ") == 3  # the broken and foreign files: no rows
    # Samples drawn with a latent truncation (gpgan-eval --truncation): a column of its own, "none"
    # for the evaluations without one.
    (run / "eval_000003_trunc0.5.json").write_text(json.dumps(
        {**scored, "step": 3, "truncation": 0.5, "reference": "cifar10:train (5,085 images)",
         "scores": {"eval/fid": 35.5}}))
    assert main([str(sweep), "--out", str(out), "--report-only"]) == 0
    report = (out / "REPORT.md").read_text()
    assert ("| run | step | checkpoint | weights | samples | reference | truncation | eval/fid | eval/precision "
            "| eval/kid |\n") in report
    assert ("| `type-r1__weight-1.0__seed-0` | 3 | `best.npz` | ema | 5,000 | cifar10:train (5,085 images) | none "
            "| 30.5 | n/a | n/a |\n") in report
    assert ("| `type-r1__weight-1.0__seed-0` | 3 | `best.npz` | ema | 5,000 | cifar10:train (5,085 images) | 0.5 "
            "| 35.5 | n/a | n/a |\n") in report


def test_sweep_from_nothing_then_skip_then_report_only(tmp_path, fake, capsys):
    sweep = write_sweep(tmp_path, TINY)
    out = tmp_path / "out"
    assert main([str(sweep), "--out", str(out), "--jobs", "2"]) == 0
    printed = capsys.readouterr().out
    assert "skipped 0" in printed and "finished 4" in printed

    rows = read_csv(out / "results.csv")
    assert [r["status"] for r in rows] == ["finished"] * 4
    assert [(r["penalty.type"], r["train.seed"]) for r in rows] == [("r1", "0"), ("r1", "1"), ("wgan_gp", "0"), ("wgan_gp", "1")]
    for r in rows:
        seed, weight = int(r["train.seed"]), float(r["penalty.weight"])
        assert float(r["final/eval/modes"]) == 10 + seed + weight
        assert float(r["best/eval/modes"]) == 10 + seed + weight + 5        # max over the log
        assert float(r["best/eval/reverse_kl"]) == pytest.approx(1 / (1 + seed))  # min over the log
        assert float(r["wall_time_s"]) == 1.5 + seed
        assert (out / r["run_dir"] / "final.json").is_file()
        # logs captured once, in the sweep's logs/ folder (not copied into the run folder)
        name = Path(r["run_dir"]).name
        assert "training done" in (out / "logs" / name / "stdout.log").read_text()
        assert not (out / r["run_dir"] / "stdout.log").exists()

    report = (out / "REPORT.md").read_text()
    modes = [10 + s + 1.0 for s in (0, 1)]
    cell = f"{statistics.mean(modes):.4g} ± {statistics.stdev(modes):.2g}"
    assert f"| r1 | 1.0 | 2/2 | {cell} |" in report
    kl = [1 / (1 + s) for s in (0, 1)]
    assert f"{statistics.mean(kl):.4g} ± {statistics.stdev(kl):.2g}" in report
    assert "## Failures\n\nNone." in report
    for r in rows:  # modes peaks at step 1, reverse KL falls to its last evaluation
        assert (r["best_step/eval/modes"], r["best_step/eval/reverse_kl"], r["ended_by"]) == ("1", "3", "train.steps")
    assert "| r1 | 1.0 | 2/2 | 11.5 (+1) | 0.75 (-1) | train.steps |" in report  # the trend table
    # Every metric at each run's best eval/modes (step 1, where reverse KL is 2 above its final value)
    at_best = report.split("## At the best eval/modes")[1].split("##")[0]
    kl_then = [1 / (1 + s) + 2 for s in (0, 1)]
    assert (f"| r1 | 1.0 | 2/2 | 16.5 ± 0.71 | {statistics.mean(kl_then):.4g} ± {statistics.stdev(kl_then):.2g} |"
            in at_best)
    from gpgan.train.config import default_config
    assert {r["eval.samples"] for r in rows} == {str(default_config()["eval"]["samples"])}
    assert "By mean best value during training:\n\n- `eval/modes` ↑: penalty.type=r1, penalty.weight=1.0: 16.5 ± 0.71" \
        in report
    assert "| `type-r1__weight-1.0__seed-1` | 3 | train.steps | 17 at step 1 | 2.5 | 0.833 |" in report
    assert "- Evaluation: mode metrics (modes, high-quality samples, reverse KL) of 2,500 samples, at the end.\n" \
        in report
    import matplotlib
    import PIL
    assert f"figures drawn with matplotlib {matplotlib.__version__} and Pillow {PIL.__version__} " in report
    figures = sorted(p.name for p in (out / "figures").glob("*.png"))
    assert figures == ["eval-modes.png", "eval-reverse_kl.png", "samples.png"]
    for name in figures:
        assert f"(figures/{name})" in report
        assert is_png(out / "figures" / name)
    # the sample tile holds one 40x30 sample per setting, side by side
    with Image.open(out / "figures" / "samples.png") as tiles:
        assert tiles.width >= 2 * 40 and tiles.height >= 30

    # Second run: everything finished, nothing is started.
    stamps = {p: p.stat().st_mtime_ns for p in out.glob("runs/*/*/final.json")}
    assert len(stamps) == 4
    assert main([str(sweep), "--out", str(out), "--jobs", "2"]) == 0
    printed = capsys.readouterr().out
    assert "skipped 4" in printed and "started 0" in printed
    assert {p: p.stat().st_mtime_ns for p in out.glob("runs/*/*/final.json")} == stamps
    for calls in out.glob("runs/*/*/calls.txt"):
        assert calls.read_text() == "start\n"
    assert (out / "REPORT.md").read_text() == report

    # --report-only rebuilds identical files, also after they were deleted.
    csv_text = (out / "results.csv").read_text()
    pngs = {name: (out / "figures" / name).read_bytes() for name in figures}
    (out / "REPORT.md").unlink()
    (out / "results.csv").unlink()
    assert main([str(sweep), "--out", str(out), "--report-only"]) == 0
    assert (out / "REPORT.md").read_text() == report
    assert (out / "results.csv").read_text() == csv_text
    assert {name: (out / "figures" / name).read_bytes() for name in figures} == pngs

    # --report-dir: the same report elsewhere; results.csv names the run folders relative to --out,
    # so it is the same file too.
    elsewhere = tmp_path / "reports" / "tiny"
    assert main([str(sweep), "--out", str(out), "--report-only", "--report-dir", str(elsewhere)]) == 0
    assert (elsewhere / "REPORT.md").read_text() == report
    assert sorted(p.name for p in (elsewhere / "figures").glob("*.png")) == figures
    assert not (elsewhere / "runs").exists()
    assert (elsewhere / "results.csv").read_text() == csv_text
    for r in read_csv(elsewhere / "results.csv"):
        assert r["run_dir"].startswith("runs/base/")
        assert (out / r["run_dir"] / "final.json").is_file()


def test_failing_setting_is_reported_and_others_finish(tmp_path, fake, capsys):
    sweep = write_sweep(tmp_path, """\
        base: base.yaml
        axes:
          penalty.type: [r1]
          penalty.weight: [1, 1000]
          train.seed: [0, 1]
    """)
    out = tmp_path / "out"
    assert main([str(sweep), "--out", str(out)]) == 1
    rows = {(r["penalty.weight"], r["train.seed"]): r for r in read_csv(out / "results.csv")}
    assert rows["1", "0"]["status"] == rows["1", "1"]["status"] == "finished"
    for seed in ("0", "1"):
        bad = rows["1000", seed]
        assert bad["status"] == "failed"
        assert bad["error"] == "step 0 ok\ngpgan-train: error: non-finite loss/critic (inf) at step 1"
        assert bad["final/eval/modes"] == ""
    report = (out / "REPORT.md").read_text()
    failures = report.split("## Failures", 1)[1]
    assert "penalty.type=r1, penalty.weight=1000" in failures
    assert "2/2 runs failed" in failures
    assert failures.count("non-finite loss/critic (inf) at step 1") == 1  # the latest attempt's, once
    assert "| r1 | 1000 | 0/2 | n/a | n/a | n/a | n/a |" in report
    # The finished setting is still summarised (modes = 10 + seed + 1).
    # (no metrics listed: every eval/ metric, sorted: high_quality = 0.5 + 0.1 seed, modes, ...)
    assert "| r1 | 1 | 2/2 | 0.55 ± 0.071 | 11.5 ± 0.71 |" in report
    # --report-only reproduces the failure section from the recorded failures.
    assert main([str(sweep), "--out", str(out), "--report-only"]) == 1
    assert (out / "REPORT.md").read_text() == report
    # A second attempt appends to the same log; the report still shows the error once.
    assert main([str(sweep), "--out", str(out)]) == 1
    failures = (out / "REPORT.md").read_text().split("## Failures", 1)[1]
    assert failures.count("non-finite loss/critic (inf) at step 1") == 1


RECORDS_SWEEP = """\
    base: base.yaml
    axes:
      penalty.type: [r1]
      penalty.weight: [1, 1000]
      train.seed: [0, 1]
    metrics: [eval/modes, {eval/reverse_kl: min}]
"""


def _report_files(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(Path(folder).rglob("*")) if p.is_file()}


def test_records_rebuild_the_same_report_without_the_checkpoints(tmp_path, fake, monkeypatch, capsys):
    """--export-records copies what the report reads (finished runs, with the samples of their best
    evaluation, a gpgan-eval score file; failed runs' errors) and nothing else; --report-only from
    the records, elsewhere, writes REPORT.md, results.csv and the figures byte for byte as from the
    runs themselves."""
    monkeypatch.setenv("FAKE_STEP_SAMPLES", "1")  # the best evaluation (step 1) has samples of its own
    sweep = write_sweep(tmp_path, RECORDS_SWEEP)
    out = tmp_path / "out"
    assert main([str(sweep), "--out", str(out)]) == 1  # the weight-1000 runs fail
    run = next((out / "runs").glob("*/type-r1__weight-1__seed-0"))
    (run / "eval_000003.json").write_text(json.dumps({"step": 3, "scores": {"eval/fid": 41.25}}))
    (run / "events.out.tfevents.1.fake").write_bytes(b"x" * 100)
    records = tmp_path / "experiments" / "records" / "tiny"
    capsys.readouterr()
    assert main([str(sweep), "--out", str(out), "--export-records", str(records)]) == 0
    assert capsys.readouterr().out == f"records: 4 runs in {records}\n"

    assert main([str(sweep), "--out", str(out), "--report-only", "--report-dir", str(tmp_path / "from_runs")]) == 1
    assert main([str(sweep), "--out", str(records), "--report-only", "--report-dir", str(tmp_path / "from_records")]) == 1
    from_runs = _report_files(tmp_path / "from_runs")
    assert "## Scored afterwards" in from_runs["REPORT.md"].decode() and "figures/samples_best.png" in from_runs
    assert _report_files(tmp_path / "from_records") == from_runs

    copied = sorted(_report_files(records))
    expected = ["RECORDS.md", "logs/type-r1__weight-1000__seed-0/failure.json",
                "logs/type-r1__weight-1000__seed-1/failure.json"]
    for seed in (0, 1):
        folder = f"runs/base/type-r1__weight-1__seed-{seed}"
        expected += [f"{folder}/{name}" for name in
                     ["final.json", "metrics.jsonl", "samples/final.png", "samples/step_000001.png"]]  # the fake
                                                                 # writes no config.yaml or manifest.json
    expected.insert(3, "runs/base/type-r1__weight-1__seed-0/eval_000003.json")
    assert copied == sorted(expected)  # no checkpoints, no events, no logs of finished runs, no step-2 samples
    marker = (records / "RECORDS.md").read_text()
    assert "| `type-r1__weight-1__seed-0` | finished |" in marker and "| `type-r1__weight-1000__seed-1` | failed |" in marker
    assert "gpgan-ablate sweep.yaml --out THIS_FOLDER --report-only" in marker and "Left out" not in marker


def test_records_leave_out_unfinished_runs_and_are_replaced_whole(tmp_path, fake, capsys):
    sweep = write_sweep(tmp_path, TINY)
    out = tmp_path / "out"
    assert main([str(sweep), "--out", str(out)]) == 0
    run = next((out / "runs").glob("*/type-wgan_gp__weight-1.0__seed-1"))
    final = (run / "final.json").read_bytes()
    (run / "final.json").unlink()
    records = tmp_path / "records"
    assert main([str(sweep), "--out", str(out), "--export-records", str(records)]) == 0
    assert capsys.readouterr().out.endswith("records: 3 runs in " + str(records) + " (1 left out: still to run or to finish)\n")
    assert not list(records.glob("runs/*/type-wgan_gp__weight-1.0__seed-1"))
    assert "Left out, still to run or to finish: `type-wgan_gp__weight-1.0__seed-1`." in (records / "RECORDS.md").read_text()
    report = tmp_path / "report"
    assert main([str(sweep), "--out", str(records), "--report-only", "--report-dir", str(report)]) == 1
    assert {r["run"]: r["status"] for r in read_csv(report / "results.csv")}["type-wgan_gp__weight-1.0__seed-1"] \
        == "not run"

    (run / "final.json").write_bytes(final)
    stale = next(records.glob("runs/*/type-r1__weight-1.0__seed-0")) / "eval_000009.json"
    stale.write_text("{}")  # as a score file since deleted from the run would be
    (tmp_path / ".records.x1y2z3.tmp").mkdir()  # what an export killed midway leaves
    (tmp_path / ".records.d.x1y2z3.tmp").mkdir()  # not its: another folder's ("records.d")
    assert main([str(sweep), "--out", str(out), "--export-records", str(records)]) == 0
    assert list(records.glob("runs/*/type-wgan_gp__weight-1.0__seed-1/final.json"))
    assert not stale.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == [".records.d.x1y2z3.tmp"]


def test_a_sweep_continues_on_another_machine_from_its_records(tmp_path, fake, capsys):
    """Records copied into a new output folder (a new machine, a fresh clone) are finished runs to
    the sweep: it skips them and runs only what the records left out."""
    import shutil
    sweep = write_sweep(tmp_path, TINY)
    out = tmp_path / "out"
    assert main([str(sweep), "--out", str(out)]) == 0
    (next((out / "runs").glob("*/type-r1__weight-1.0__seed-1")) / "final.json").unlink()
    records = tmp_path / "records"
    assert main([str(sweep), "--out", str(out), "--export-records", str(records)]) == 0
    elsewhere = tmp_path / "new_machine"
    shutil.copytree(records, elsewhere)
    capsys.readouterr()
    assert main([str(sweep), "--out", str(elsewhere)]) == 0
    assert "4 runs: skipped 3, started 1, resumed 0; finished 1, failed 0" in capsys.readouterr().out
    assert [p.parent.name for p in elsewhere.glob("runs/*/*/calls.txt")] == ["type-r1__weight-1.0__seed-1"]
    assert (elsewhere / "REPORT.md").read_text() == (out / "REPORT.md").read_text()


def test_only_runs_the_selected_runs_and_the_report_covers_every_run(tmp_path, fake, capsys):
    sweep = write_sweep(tmp_path, TINY)
    out = tmp_path / "out"
    assert main([str(sweep), "--out", str(out), "--only", "penalty.type=r1", "--dry-run"]) == 0
    assert capsys.readouterr().out.splitlines()[:3] == [
        "start    type-r1__weight-1.0__seed-0", "start    type-r1__weight-1.0__seed-1", "2 runs in " + str(out)]
    assert main([str(sweep), "--out", str(out), "--only", "penalty.type=r1"]) == 0  # (the exit status: the selected)
    printed = capsys.readouterr().out
    assert "2 runs: skipped 0, started 2" in printed and "(2 finished, 0 failed, 2 not finished)" in printed
    assert [(r["penalty.type"], r["status"]) for r in read_csv(out / "results.csv")] == [
        ("r1", "finished"), ("r1", "finished"), ("wgan_gp", "not run"), ("wgan_gp", "not run")]
    # Axes by their full key, values as run names write them or as YAML reads them (1 is 1.0);
    # several values of one axis, several axes: the runs that match all.
    assert main([str(sweep), "--out", str(out), "--only", "penalty.type=wgan_gp, r1",
                 "--only", "seed=1", "--only", "penalty.weight=1"]) == 0  # (an axis's label in run names)
    assert "2 runs: skipped 1, started 1" in capsys.readouterr().out
    assert sorted(p.parent.name for p in out.glob("runs/*/*/final.json")) == [
        "type-r1__weight-1.0__seed-0", "type-r1__weight-1.0__seed-1", "type-wgan_gp__weight-1.0__seed-1"]


@pytest.mark.parametrize("args, message", [
    (["--only", "seeds=0"], "--only 'seeds=0': {sweep} has no axis 'seeds' (did you mean 'train.seed'?); its axes: "
                            "penalty.type, penalty.weight, train.seed"),
    (["--only", "penalty.type=r3"], "the axis penalty.type has no value 'r3'; its values: r1, wgan_gp"),
    (["--only", "penalty.weight=true"], "the axis penalty.weight has no value 'true'; its values: 1.0"),
    (["--only", "penalty.type"], "--only 'penalty.type': expected AXIS=VALUE[,VALUE...], e.g. penalty.type=r1"),
    (["--only", "penalty.type=,"], "expected AXIS=VALUE[,VALUE...]"),
    (["--only", "penalty.type=r1", "--report-only"], "--only selects the runs to run; --report-only runs none"),
    (["--dry-run", "--report-only"], "--dry-run lists the runs the sweep would run; --report-only runs none"),
    (["--only", "penalty.type=r1", "--export-records", "rec"], "--export-records runs nothing and writes no report; "
                                                               "it takes --out alone, not --only"),
])
def test_only_names_what_it_does_not_know(tmp_path, fake, capsys, args, message):
    sweep = write_sweep(tmp_path, TINY)
    assert main([str(sweep), "--out", str(tmp_path / "out")] + args) == 2
    err = capsys.readouterr().err
    assert message.format(sweep=sweep) in err and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_only_selecting_no_run_says_so(tmp_path, fake, capsys):
    sweep = write_sweep(tmp_path, TINY + "    exclude: [{penalty.type: wgan_gp, train.seed: 1}]\n")
    assert main([str(sweep), "--out", str(tmp_path / "out"), "--only", "penalty.type=wgan_gp",
                 "--only", "train.seed=1"]) == 2
    assert "no run of " + str(sweep) + " has all of these values" in capsys.readouterr().err


@pytest.mark.parametrize("only, runs", [
    (["betas=[0.5, 0.9]"], ["type-r1__betas-_0.5_0.9___weight-0.0001", "type-none__betas-_0.5_0.9_"]),  # YAML
    (["betas=[0.5,0.9],_0.0_0.99_", "type=r1"], ["type-r1__betas-_0.5_0.9___weight-0.0001",  # as results.csv
                                                "type-r1__betas-_0.0_0.99___weight-0.0001"]),  # and folders write it
    (["weight=1e-4"], ["type-r1__betas-_0.5_0.9___weight-0.0001", "type-r1__betas-_0.0_0.99___weight-0.0001"]),
    (["weight=-"], ["type-none__betas-_0.5_0.9_", "type-none__betas-_0.0_0.99_"]),  # where ignore dropped it
])
def test_only_selects_lists_numbers_and_ignored_axes(tmp_path, fake, capsys, only, runs):
    sweep = write_sweep(tmp_path, """\
        base: base.yaml
        axes:
          penalty.type: [r1, none]
          optim.critic.betas: [[0.5, 0.9], [0.0, 0.99]]
          penalty.weight: [0.0001]
        ignore: [{when: {penalty.type: none}, axes: [penalty.weight]}]
    """)
    assert main([str(sweep), "--out", str(tmp_path / "out"), "--dry-run"]
                + [arg for text in only for arg in ("--only", text)]) == 0
    assert capsys.readouterr().out.splitlines()[:-1] == [f"start    {name}" for name in runs]


def test_the_report_gives_the_evaluations_share_of_the_wall_time_where_runs_timed_them(tmp_path, fake, monkeypatch):
    sweep = write_sweep(tmp_path, TINY)
    out = tmp_path / "out"
    assert main([str(sweep), "--out", str(out), "--only", "train.seed=0"]) == 0  # no timings (toy data, old runs)
    assert re.search(r"\n- Wall time of the finished runs: \d s in all \(evaluations included\)\.\n",
                     (out / "REPORT.md").read_text())
    monkeypatch.setenv("FAKE_EVAL_TIME", "1")  # 3 evaluations of 0.5 s a run, in 2.5 s of wall time (seed 1)
    assert main([str(sweep), "--out", str(out)]) == 0
    assert re.search(r"\n- Wall time of the finished runs: \d s in all \(evaluations included; the image evaluations "
                     r"of the 2 runs that timed them: 3 s of their 5 s\)\.\n", (out / "REPORT.md").read_text())
    import shutil
    shutil.rmtree(out)
    assert main([str(sweep), "--out", str(out)]) == 0  # every run timed: 6 s of evaluations in 8 s
    assert "- Wall time of the finished runs: 8 s in all (of it, the image evaluations: 6 s, 75%).\n" \
        in (out / "REPORT.md").read_text()


def test_durations_and_wall_time_per_machine():
    """Seconds, minutes or hours as the size asks; runs of several machines are timed per machine
    (a GPU's hours and a CPU's are not one sum)."""
    from gpgan.studies.report import _duration, _duration_cell, _machines_lines
    from gpgan.studies.results import RunRecord

    assert [_duration(s) for s in (0.4, 59.4, 60, 330, 3599, 3600, 23040)] == [
        "0 s", "59 s", "1.0 min", "5.5 min", "60.0 min", "1.0 h", "6.4 h"]
    # the final table's cells (mean, std over seeds or None, n): the spread in the mean's unit
    assert [_duration_cell(s) for s in ((73480.0, None, 1), (333.0, None, 1), (7200.0, 360.0, 2), (0.0, None, 0))] \
        == ["20.4 h", "5.5 min", "2.0 ± 0.1 h", "n/a"]

    def run(machine, wall, evals):
        return RunRecord(spec=None, status="finished", wall_time_s=wall, eval_time_s=evals, machines=(machine,))

    cpu = [run("AMD EPYC, 2 logical cores", 36000.0, 7200.0), run("AMD EPYC, 2 logical cores", 18000.0, None)]
    gpu = [run("NVIDIA H200", 333.0, 135.0)]
    assert _machines_lines(cpu + gpu) == [
        "- Machines (the runs' manifest.json): `AMD EPYC, 2 logical cores` (2 runs), `NVIDIA H200` (1 run).",
        "- Wall time of the finished runs, by machine: `AMD EPYC, 2 logical cores` 15.0 h in all (2 runs; evaluations "
        "included; the image evaluations of the 1 runs that timed them: 2.0 h of their 10.0 h); `NVIDIA H200` 5.5 min "
        "in all (1 run; of it, the image evaluations: 2.2 min, 41%)."]
    assert _machines_lines(gpu)[1] == ("- Wall time of the finished runs: 5.5 min in all (of it, the image "
                                       "evaluations: 2.2 min, 41%).")


def test_runs_made_on_two_machines_meet_in_one_report(tmp_path, fake, capsys):
    """One machine runs some runs (--only), exports their records; the other imports them: its sweep
    skips them, and its report is the report of one machine that ran them all."""
    sweep = write_sweep(tmp_path, RECORDS_SWEEP)
    here, there, together = tmp_path / "here", tmp_path / "there", tmp_path / "together"
    assert main([str(sweep), "--out", str(together)]) == 1  # (the weight-1000 runs fail)
    assert main([str(sweep), "--out", str(there), "--only", "penalty.weight=1000", "--only", "train.seed=0"]) == 1
    assert main([str(sweep), "--out", str(there), "--only", "penalty.weight=1"]) == 0  # the selected runs finished
    records = tmp_path / "records"
    for folder in (there, together):  # (the stand-in trainer writes no manifest: as gpgan-train's, the GPU's name)
        (folder / "runs" / "base" / "type-r1__weight-1__seed-0" / "manifest.json").write_text(
            json.dumps({"device": "cuda", "device_name": "NVIDIA H200"}))
    assert main([str(sweep), "--out", str(there), "--export-records", str(records)]) == 0
    (here / "runs" / "base" / "type-r1__weight-1__seed-1").mkdir(parents=True)  # here's own, unfinished
    (here / "runs" / "base" / "type-r1__weight-1__seed-1" / "checkpoints").mkdir()
    (here / "runs" / "base" / "type-r1__weight-1__seed-1" / "checkpoints" / "ckpt_1.npz").write_bytes(b"fake")
    capsys.readouterr()
    assert main([str(sweep), "--out", str(here), "--import-records", str(records)]) == 0
    assert capsys.readouterr().out == (
        f"imported 1 run(s) into {here}: type-r1__weight-1__seed-0\n"
        f"  not imported: type-r1__weight-1__seed-1: it has a folder in {here} already (unfinished; remove its "
        "folder to take the record's)\n"
        "  not imported: type-r1__weight-1000__seed-0: failed there; the sweep runs it again\n")
    assert sorted(p.name for p in (here / "runs" / "base" / "type-r1__weight-1__seed-0").rglob("*")) == [
        "final.json", "final.png", "manifest.json", "metrics.jsonl", "samples"]
    assert not (here / "logs").exists() and [p.name for p in here.iterdir() if p.name.startswith(".")] == [".lock"]
    import shutil
    shutil.rmtree(here / "runs" / "base" / "type-r1__weight-1__seed-1")
    assert main([str(sweep), "--out", str(here), "--import-records", str(records)]) == 0
    assert "imported 1 run(s) into " + str(here) + ": type-r1__weight-1__seed-1\n" in capsys.readouterr().out
    assert main([str(sweep), "--out", str(here)]) == 1
    assert "4 runs: skipped 2, started 2" in capsys.readouterr().out
    assert not list(here.glob("runs/*/*/calls.txt"))  # the imported runs were not trained again
    assert main([str(sweep), "--out", str(together), "--report-only"]) == 1  # (again, with the manifest)
    assert _report_files(here / "figures") == _report_files(together / "figures")
    assert (here / "REPORT.md").read_text() == (together / "REPORT.md").read_text()
    assert (here / "results.csv").read_text() == (together / "results.csv").read_text()
    assert [r["machine"] for r in read_csv(here / "results.csv")] == ["NVIDIA H200", "", "", ""]


def test_import_refuses_what_is_no_record_of_the_sweep(tmp_path, fake, capsys):
    from gpgan.studies import expand_runs, load_sweep
    from gpgan.studies.sweep import run_config
    from gpgan.train.config import dump_config

    sweep = write_sweep(tmp_path, TINY)
    out, records = tmp_path / "out", tmp_path / "records"
    assert main([str(sweep), "--out", str(tmp_path / "there"), "--only", "train.seed=0"]) == 0
    assert main([str(sweep), "--out", str(tmp_path / "there"), "--export-records", str(records)]) == 0

    def refused(source, message, status=2):
        capsys.readouterr()
        assert main([str(sweep), "--out", str(out), "--import-records", str(source)]) == status
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1 and "Traceback" not in err
        assert not list(out.glob("runs/*/*"))

    refused(tmp_path / "there", "is not a records folder (it has no RECORDS.md); write one with gpgan-ablate")
    refused(out / "records", "is not a records folder")
    other = write_sweep(tmp_path, TINY.replace("[r1, wgan_gp]", "[r2]"), name="other.yaml")
    capsys.readouterr()
    assert main([str(other), "--out", str(out), "--import-records", str(records)]) == 2
    assert "holds no run of " + str(other) in capsys.readouterr().err
    # A record made with another config than the sweep's (its config.yaml, as gpgan-train writes it)
    spec = expand_runs(load_sweep(sweep))[0]
    config = run_config(load_sweep(sweep), spec)
    config["penalty"]["weight"] = 2.0
    run = next(records.glob("runs/*/" + spec.name))
    (run / "config.yaml").write_text(dump_config(config))
    refused(records, "nothing imported: 1 run(s) of " + str(records) + " are not the sweep's as " + str(sweep)
            + " asks them now: type-r1__weight-1.0__seed-0: it was made with another config (penalty.weight: 2.0 "
            "there, 1.0 in the sweep)")
    config["penalty"]["weight"], config["device"] = 1.0, "cuda"  # the device is no difference
    (run / "config.yaml").write_text(dump_config(config))
    holder = FileLock(out / ".lock")  # (made by the refusals above? no: they wrote nothing)
    out.mkdir()
    holder.acquire()
    try:
        refused(records, f"another gpgan-ablate (process {os.getpid()}) is running the runs of {out}", status=1)
    finally:
        holder.release()
    assert main([str(sweep), "--out", str(out), "--import-records", str(records)]) == 0
    assert len(list(out.glob("runs/*/*/final.json"))) == 2


def test_an_import_copies_only_records_and_leaves_no_folder_when_it_imports_nothing(tmp_path, fake, capsys):
    sweep = write_sweep(tmp_path, TINY)
    there, records = tmp_path / "there", tmp_path / "records"
    assert main([str(sweep), "--out", str(there), "--only", "train.seed=0"]) == 0
    assert main([str(sweep), "--out", str(there), "--export-records", str(records)]) == 0
    # A sweep continued in the records folder (as docs/studies.md allows): a checkpoint, a link out,
    # and a run still unfinished there.
    run = next(records.glob("runs/*/type-r1__weight-1.0__seed-0"))
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "ckpt_3.npz").write_bytes(b"weights")
    (tmp_path / "secret.json").write_text("{}")
    (run / "eval_000009.json").symlink_to(tmp_path / "secret.json")
    unfinished = run.parent / "type-wgan_gp__weight-1.0__seed-1"
    (unfinished / "checkpoints").mkdir(parents=True)
    (unfinished / "checkpoints" / "ckpt_1.npz").write_bytes(b"weights")
    out = tmp_path / "deep" / "out"
    capsys.readouterr()
    assert main([str(sweep), "--out", str(out), "--import-records", str(records)]) == 0
    printed = capsys.readouterr().out
    assert "not imported: type-wgan_gp__weight-1.0__seed-1: unfinished there (its checkpoints stay there)" in printed
    imported = next(out.glob("runs/*/type-r1__weight-1.0__seed-0"))
    assert sorted(p.relative_to(imported).as_posix() for p in imported.rglob("*")) == [
        "final.json", "metrics.jsonl", "samples", "samples/final.png"]
    import shutil
    shutil.rmtree(out.parent)
    wgan = write_sweep(tmp_path, TINY.replace("[r1, wgan_gp]", "[wgan_gp]").replace("[0, 1]", "[1]"), name="wgan.yaml")
    assert main([str(wgan), "--out", str(out), "--import-records", str(records)]) == 0  # nothing to take
    assert "imported 0 run(s)" in capsys.readouterr().out and not (tmp_path / "deep").exists()


def test_a_diverged_run_is_imported_with_its_error_and_not_run_again(tmp_path, fake, capsys):
    from gpgan.studies import expand_runs, load_sweep
    from gpgan.studies.sweep import run_config
    from gpgan.train.config import dump_config

    sweep = write_sweep(tmp_path, TINY)
    spec = expand_runs(load_sweep(sweep))[0]
    records, out = tmp_path / "records", tmp_path / "out"
    run = records / "runs" / "base" / spec.name
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(dump_config(run_config(load_sweep(sweep), spec)))  # as gpgan-train writes it
    (run / "metrics.jsonl").write_text('{"step": 1, "loss/critic": 0.5}\n')
    failure = records / "logs" / spec.name / "failure.json"
    failure.parent.mkdir(parents=True)
    failure.write_text(json.dumps({"status": "diverged", "returncode": 3, "error": "non-finite loss at step 2"}))
    (records / "RECORDS.md").write_text("# Records\n")
    assert main([str(sweep), "--out", str(out), "--import-records", str(records)]) == 0
    assert (out / "logs" / spec.name / "failure.json").read_bytes() == failure.read_bytes()
    capsys.readouterr()
    assert main([str(sweep), "--out", str(out), "--only", "penalty.type=r1", "--only", "train.seed=0"]) == 0
    assert "1 runs: skipped 1, started 0" in capsys.readouterr().out  # (a diverged run is no failure: exit 0)
    assert {r["run"]: r["status"] for r in read_csv(out / "results.csv")}[spec.name] == "diverged"


@pytest.mark.parametrize("where, message", [
    ("out/records", "overlap; name a folder outside it"),
    ("notes", "holds a.txt, which records do not hold, and records replace their folder whole"),
    ("notes/a.txt", "is a file, not a folder"),
    ("link", "is a symbolic link; name the folder it points to"),
    # the lock of the sweep that ran there (and its REPORT.md, the checkpoints of the run it reran)
    ("continued", "holds .lock, which records do not hold"),
])
def test_records_refuse_a_folder_they_would_clobber(tmp_path, fake, capsys, where, message):
    """Records replace their folder whole, so they refuse one with anything they would not have
    written: a user's file, or a sweep continued in a copy of earlier records (its checkpoints)."""
    import shutil
    sweep = write_sweep(tmp_path, TINY.replace("train.seed: [0, 1]", "train.seed: [0]"))
    out = tmp_path / "out"
    assert main([str(sweep), "--out", str(out)]) == 0
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("mine")
    (tmp_path / "link").symlink_to(tmp_path / "notes")
    assert main([str(sweep), "--out", str(out), "--export-records", str(tmp_path / "continued")]) == 0
    shutil.rmtree(next((tmp_path / "continued" / "runs").glob("*/type-r1__weight-1.0__seed-0")) / "samples")
    (tmp_path / "continued" / "runs" / "base" / "type-r1__weight-1.0__seed-0" / "final.json").unlink()
    assert main([str(sweep), "--out", str(tmp_path / "continued")]) == 0  # reruns that run there
    before = _report_files(tmp_path / "notes"), _report_files(out), _report_files(tmp_path / "continued")
    capsys.readouterr()
    assert main([str(sweep), "--out", str(out), "--export-records", str(tmp_path / where)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Error" not in err
    assert (_report_files(tmp_path / "notes"), _report_files(out), _report_files(tmp_path / "continued")) == before


def test_records_take_out_alone_and_name_the_file_they_could_not_write(tmp_path, fake, monkeypatch, capsys):
    import errno
    import shutil
    sweep = write_sweep(tmp_path, TINY.replace("train.seed: [0, 1]", "train.seed: [0]"))
    out, records = tmp_path / "out", tmp_path / "records"
    assert main([str(sweep), "--out", str(out)]) == 0
    capsys.readouterr()
    for extra in (["--report-only"], ["--dry-run"], ["--jobs", "2"], ["--report-dir", str(tmp_path / "r")]):
        assert main([str(sweep), "--out", str(out), "--export-records", str(records)] + extra) == 2
        assert f"it takes --out alone, not {extra[0]}" in capsys.readouterr().err
    assert not records.exists()
    assert main([str(sweep), "--out", str(out), "--export-records", str(records)]) == 0
    before = _report_files(records)

    def full(source, target):
        raise OSError(errno.ENOSPC, "No space left on device", source)
    monkeypatch.setattr(shutil, "copyfile", full)
    capsys.readouterr()
    assert main([str(sweep), "--out", str(out), "--export-records", str(records)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "No space left on device" in err and "left as it was" in err
    assert str(records / "runs" / "base" / "type-r1__weight-1.0__seed-0") in err and str(out / "runs") not in err
    assert _report_files(records) == before and sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_records_name_the_run_folders_as_the_runs_do_when_runs_is_a_link(tmp_path, fake):
    """``OUT/runs`` a link to another disk (checkpoints kept elsewhere): results.csv still names
    ``runs/...``, so the report from the records is the same file."""
    sweep = write_sweep(tmp_path, TINY.replace("train.seed: [0, 1]", "train.seed: [0]"))
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "bigdisk").mkdir()
    (out / "runs").symlink_to(tmp_path / "bigdisk")
    assert main([str(sweep), "--out", str(out)]) == 0
    assert main([str(sweep), "--out", str(out), "--export-records", str(tmp_path / "records")]) == 0
    assert main([str(sweep), "--out", str(tmp_path / "records"), "--report-only"]) == 0
    assert (tmp_path / "records" / "results.csv").read_bytes() == (out / "results.csv").read_bytes()
    assert all(r["run_dir"].startswith("runs/base/") for r in read_csv(out / "results.csv"))


def test_records_of_a_sweep_never_run_write_nothing(tmp_path, capsys):
    sweep = write_sweep(tmp_path, TINY)
    assert main([str(sweep), "--out", str(tmp_path / "out"), "--export-records", str(tmp_path / "records")]) == 1
    assert "no run of this sweep under" in capsys.readouterr().err
    assert not (tmp_path / "records").exists()


def test_unfinished_run_is_resumed_and_stale_one_restarted(tmp_path, fake, monkeypatch, capsys):
    sweep = write_sweep(tmp_path, TINY)
    out = tmp_path / "out"
    monkeypatch.setenv("FAKE_CRASH", "1")
    assert main([str(sweep), "--out", str(out), "--jobs", "2"]) == 1
    rows = read_csv(out / "results.csv")
    assert [r["status"] for r in rows] == ["failed"] * 4
    assert all("crashed after the first checkpoint" in r["error"] for r in rows)
    # Make one run "stale": a folder without checkpoint must be cleared and started afresh.
    stale = next(out.glob("runs/base/type-r1__weight-1.0__seed-0"))
    for ckpt in (stale / "checkpoints").glob("*.npz"):
        ckpt.unlink()
    (stale / "leftover.txt").write_text("from a broken attempt")
    monkeypatch.delenv("FAKE_CRASH")
    capsys.readouterr()
    assert main([str(sweep), "--out", str(out), "--jobs", "2", "--dry-run"]) == 0
    plan = capsys.readouterr().out
    assert "restart  type-r1__weight-1.0__seed-0" in plan and plan.count("resume   type-") == 3
    assert plan.count(" (from step 1)") == 3, plan  # the fake trainer's folders have no config.yaml
    assert main([str(sweep), "--out", str(out), "--jobs", "2"]) == 0
    assert "started 1, resumed 3" in capsys.readouterr().out
    assert not (stale / "leftover.txt").exists()
    assert (stale / "calls.txt").read_text() == "start\n"
    for run in out.glob("runs/base/*"):
        if run != stale:
            assert (run / "calls.txt").read_text() == "start\nresume\n"
            assert "--resume" in (out / "logs" / run.name / "stderr.log").read_text()
    rows = read_csv(out / "results.csv")
    assert [r["status"] for r in rows] == ["finished"] * 4 and all(r["error"] == "" for r in rows)
    assert "## Failures\n\nNone." in (out / "REPORT.md").read_text()


def test_devices_and_overrides_reach_the_trainer(tmp_path, fake):
    sweep = write_sweep(tmp_path, """\
        base: base.yaml
        set: {train.steps: 7, data.name: ring8}
        axes:
          penalty.type: [r1, r2, lp]
          train.seed: [3]
    """)
    out = tmp_path / "out"
    assert main([str(sweep), "--out", str(out), "--devices", "0,1"]) == 0
    states = [json.loads(p.read_text()) for p in sorted(out.glob("runs/base/*/fake_state.json"))]
    assert len(states) == 3
    for st in states:
        assert st["device"] == "cuda" and st["cuda_visible"] in ("0", "1")
        assert st["sets"]["train.steps"] == 7 and st["sets"]["data.name"] == "ring8"
        assert st["sets"]["train.seed"] == 3
    assert sorted(st["sets"]["penalty.type"] for st in states) == ["lp", "r1", "r2"]
    # One weight per type (no x axis here): the metric figure is a point plot against the type.
    assert is_png(out / "figures" / "eval-modes.png")


def test_ignore_collapses_runs_and_panels_split_figures(tmp_path, fake):
    sweep_path = write_sweep(tmp_path, """\
        base: base.yaml
        axes:
          data.name: [grid25, ring8]
          penalty.type: [none, r1]
          penalty.weight: [0.1, 10]
          train.seed: [0, 1]
        ignore:
          - when: {penalty.type: none}
            axes: [penalty.weight]
        exclude:
          - {data.name: ring8, penalty.weight: 10}
    """)
    sweep = load_sweep(sweep_path)
    specs = expand_runs(sweep)
    # grid25: none x 2 seeds + r1 x 2 weights x 2 seeds; ring8: none x 2 + r1 x 1 weight x 2.
    assert len(specs) == 6 + 4
    none = [s for s in specs if s.values["penalty.type"] == "none"]
    assert all(s.values["penalty.weight"] is IGNORED for s in none)
    assert all("penalty.weight" not in dict(s.overrides) for s in none)
    assert none[0].name == "name-grid25__type-none__seed-0"
    assert len({s.name for s in specs}) == len(specs)

    out = tmp_path / "out"
    assert main([str(sweep_path), "--out", str(out), "--jobs", "2"]) == 0
    figures = sorted(p.name for p in (out / "figures").glob("*.png"))
    assert "eval-modes__name-grid25.png" in figures and "samples__name-ring8.png" in figures
    report = (out / "REPORT.md").read_text()
    assert "| grid25 | none | (any) | 2/2 |" in report
    assert "### data.name=ring8" in report
    rows = read_csv(out / "results.csv")
    assert sum(r["penalty.weight"] == "" for r in rows) == 4
    # Best setting per panel for modes (max): r1 with weight 10 on grid25 (modes grow with weight).
    assert "- `eval/modes` ↑ (data.name=grid25): penalty.type=r1, penalty.weight=10:" in report


def test_variants_bundle_overrides_and_the_report_shows_curves_and_findings(tmp_path, fake):
    sweep_path = write_sweep(tmp_path, """\
        base: base.yaml
        set: {train.steps: 3, optim.critic.lr: 0.002}
        variants:
          pairing:
            common: {}
            paper: {loss: wgan, train.critic_steps: 5, optim.critic.lr: 0.0001}
        axes:
          pairing: [common, paper]
          penalty.type: [r1, wgan_gp]
          penalty.weight: [1.0]
          train.seed: [0, 1]
        exclude:
          - {pairing: paper, penalty.type: r1}
        metrics: [eval/modes, {eval/reverse_kl: min}]
        notes: |
          Modes grow with the weight.
    """)
    specs = expand_runs(load_sweep(sweep_path))
    assert len(specs) == 6 and specs[0].name == "pairing-common__type-r1__weight-1.0__seed-0"
    paper = dict(next(s for s in specs if s.values["pairing"] == "paper").overrides)
    # The variant's keys come after set: (so they win) and no "pairing" key reaches the trainer.
    assert paper["optim.critic.lr"] == 0.0001 and paper["loss"] == "wgan" and "pairing" not in paper
    out = tmp_path / "out"
    assert main([str(sweep_path), "--out", str(out), "--jobs", "2"]) == 0
    states = [json.loads(p.read_text()) for p in (out / "runs").glob("*/pairing-paper*/fake_state.json")]
    assert len(states) == 2 and all(st["sets"]["train.critic_steps"] == 5 for st in states)
    report = (out / "REPORT.md").read_text()
    assert "- Variant `pairing=paper`: `loss=wgan`, `train.critic_steps=5`, `optim.critic.lr=0.0001`." in report
    assert "## Findings\n\nModes grow with the weight.\n" in report
    curve = "figures/curves/eval-modes__pairing-common.png"
    assert f"({curve})" in report and is_png(out / curve)
    alt_texts = re.findall(r"!\[([^\]]*)\]", report)
    assert any("against the step" in a for a in alt_texts)
    assert all(a.count("(") == a.count(")") for a in alt_texts), alt_texts
    # The curve is the mean over seeds at each step: the fake trainer logs modes = 10 + seed + weight
    # + (5 at step 1, step - 3 after), so seeds 0 and 1 at weight 1 average 11.5 + that.
    from gpgan.studies.statistics import curve_stats
    from gpgan.studies.results import collect_results

    records = [r for r in collect_results(load_sweep(sweep_path), out)
               if r.spec.values["pairing"] == "common" and r.spec.values["penalty.type"] == "r1"]
    steps, mean, std = curve_stats(records, "eval/modes")
    assert steps == [1, 2, 3] and mean == [16.5, 10.5, 11.5]
    assert std == pytest.approx([statistics.stdev([16, 17])] * 3)
    # The trend table: the last evaluation's mean (10% of 3 rounds up to one) and its change.
    assert "## Still improving at the end?" in report
    assert "| common | r1 | 1.0 | 2/2 | 11.5 (+1) |" in report


def test_a_seed_that_ran_longer_is_drawn_past_the_mean(tmp_path, fake, monkeypatch):
    """Seeds of one setting that ended at different steps (train.patience): the mean curve covers
    the steps every seed evaluated, and each longer seed's later evaluations are its tail, from
    the last common step on (dotted in the figure, and said in the caption)."""
    from gpgan.studies.statistics import curve_stats, curve_tails
    from gpgan.studies.results import RunRecord

    short = RunRecord(spec=None, status="finished", curves={"m": [(1, 5.0), (2, 4.0)]})
    long = RunRecord(spec=None, status="finished", curves={"m": [(1, 7.0), (2, 6.0), (3, 3.0), (4, 2.0)]})
    failed = RunRecord(spec=None, status="failed", curves={"m": [(1, 1.0), (2, 1.0), (3, 1.0)]})
    steps, mean, _ = curve_stats([short, long, failed], "m")
    assert steps == [1, 2] and mean == [6.0, 5.0]
    assert curve_tails([short, long, failed], "m", steps[-1]) == [([2, 3, 4], [6.0, 3.0, 2.0])]
    assert curve_tails([short, long], "m", 4) == []

    from gpgan.viz import curves_plot

    monkeypatch.setenv("FAKE_SEED_LONGER", "1")
    sweep = write_sweep(tmp_path, TINY)
    assert main([str(sweep), "--out", str(tmp_path / "out")]) == 0
    report = (tmp_path / "out" / "REPORT.md").read_text()
    assert "dotted: a seed's evaluations past the steps every seed evaluated" in report
    path = tmp_path / "c.png"
    curves_plot(path, [("all", [("a", steps, mean, None, [([2, 3, 4], [6.0, 3.0, 2.0])])])], "step", "m")
    assert is_png(path)


def test_run_trends_judge_each_seed_at_its_own_end():
    """A seed that ran longer (patience ended the other early) is judged over its own last
    evaluations, not at the step where the shorter one stopped."""
    from types import SimpleNamespace

    from gpgan.studies.statistics import run_trends

    short = SimpleNamespace(curves={"fid": [(2000 * k, 100.0) for k in range(1, 11)]})     # flat, 10 evaluations
    long = SimpleNamespace(curves={"fid": [(2000 * k, 200.0 - 5 * k) for k in range(1, 21)]})  # falling, 20
    end, change = run_trends([short, long], "fid")
    assert end == pytest.approx((100.0 + (200.0 - 5 * 19.5)) / 2)  # the long one: its last 2 evaluations
    assert change == pytest.approx((0.0 - 10.0) / 2)               # -10: its last 2 against the 2 before
    assert run_trends([SimpleNamespace(curves={})], "fid") is None


def test_end_trend_averages_the_last_tenth_of_the_seed_mean_curve():
    from gpgan.studies.statistics import curve_stats, end_trend
    from gpgan.studies.results import RunRecord

    def run(values, status="finished"):
        return RunRecord(spec=None, status=status, curves={"m": list(zip(range(1000, 21000, 1000), values))})

    line = [float(i) for i in range(20)]
    # Two seeds offset by +-1: the seed mean is 0..19; the last 2 evaluations average 18.5, the 2
    # before 16.5. A failed run does not count.
    records = [run([v - 1 for v in line]), run([v + 1 for v in line]), run([100.0] * 20, "failed")]
    assert end_trend(curve_stats(records, "m")) == (18.5, 2.0)
    assert end_trend(curve_stats(records, "m"), fraction=0.25) == (17.0, 5.0)  # 5 and 5 evaluations
    flat = [run([0.5] * 10 + [0.9] * 10)]
    assert end_trend(curve_stats(flat, "m")) == (0.9, 0.0)
    assert end_trend(curve_stats([run(line[:1])], "m")) is None        # one evaluation: nothing before it
    assert end_trend(curve_stats([run(line[:-1] + [math.inf])], "m")) is None
    assert end_trend(curve_stats(records, "other")) is None


@pytest.mark.parametrize("body, message", [
    ("variants: {pairing: {a: {}}}\naxes: {pairing: [b]}\n", "'b' is not a variant of 'pairing'"),
    ("variants: {pairing: {a: {penalty.type: r1}}}\naxes: {pairing: [a], penalty.type: [r1]}\n",
     "is also an axis"),
    ("axes: {pairng: [a]}\n", "neither a dotted config key"),
    ("variants: {pairing: {a: {}}}\naxes: {penalty.type: [r1]}\n", "is not used as an axis"),
    ("variants: {pairing: {a: {train.stesp: 3}}}\naxes: {pairing: [a]}\n", "did you mean 'train.steps'"),
])
def test_variant_errors(tmp_path, body, message):
    assert_sweep_error(tmp_path, "base: base.yaml\n" + body, message)


def test_a_sweep_file_that_is_not_yaml_names_line_and_column(tmp_path):
    assert_sweep_error(tmp_path, "axes: a: b\n", "sweep.yaml is not valid YAML: line 1, column 8: mapping values "
                                                 "are not allowed here")


def assert_sweep_error(tmp_path, text, message):
    """Loading a sweep file with ``text`` raises a SweepError whose message contains ``message``."""
    path = write_sweep(tmp_path, text)
    with pytest.raises(SweepError) as info:
        load_sweep(path)
    assert message in str(info.value)


def test_adjust_overrides_only_the_matching_runs_and_wins_over_set_and_variants(tmp_path, fake):
    sweep_path = write_sweep(tmp_path, """\
        base: base.yaml
        set: {train.steps: 3, optim.critic.lr: 0.002}
        variants:
          pairing:
            common: {}
            paper: {train.steps: 5}
        axes:
          pairing: [common, paper]
          penalty.type: [none, r1]
          penalty.weight: [1.0, 10.0]
          train.seed: [0]
        ignore:
          - when: {penalty.type: none}
            axes: [penalty.weight]
        adjust:
          - when: {pairing: paper, penalty.weight: 10.0}
            set: {train.steps: 7}
          - when: {penalty.weight: [1.0, 10.0], pairing: common}
            set: {optim.critic.lr: 0.001}
    """)
    sweep = load_sweep(sweep_path)
    by_name = {s.name: dict(s.overrides) for s in expand_runs(sweep)}
    assert len(by_name) == 6  # "none" is one run per pairing
    steps = {n: o["train.steps"] for n, o in by_name.items()}
    assert steps == {"pairing-common__type-none__seed-0": 3, "pairing-common__type-r1__weight-1.0__seed-0": 3,
                     "pairing-common__type-r1__weight-10.0__seed-0": 3, "pairing-paper__type-none__seed-0": 5,
                     "pairing-paper__type-r1__weight-1.0__seed-0": 5, "pairing-paper__type-r1__weight-10.0__seed-0": 7}
    lrs = {n: o["optim.critic.lr"] for n, o in by_name.items()}
    # An axis dropped by `ignore` matches no `when` value: "none" keeps set:'s rate.
    assert lrs["pairing-common__type-none__seed-0"] == 0.002
    assert lrs["pairing-common__type-r1__weight-1.0__seed-0"] == 0.001
    assert lrs["pairing-paper__type-r1__weight-1.0__seed-0"] == 0.002
    # The rule's overrides come last, so the trainer sees them after set:'s and the variant's.
    spec = next(s for s in expand_runs(sweep) if s.name.endswith("weight-10.0__seed-0") and "paper" in s.name)
    assert [v for k, v in spec.overrides if k == "train.steps"] == [3, 5, 7]

    out = tmp_path / "out"
    assert main([str(sweep_path), "--out", str(out), "--jobs", "2"]) == 0
    state = json.loads(next((out / "runs").glob("*/pairing-paper__type-r1__weight-10.0__seed-0/fake_state.json"))
                       .read_text())
    assert state["sets"]["train.steps"] == 7
    # results.csv: every run's value of each key a variant or an adjust rule sets
    rows = {r["run"]: r for r in read_csv(out / "results.csv")}
    assert {n: r["train.steps"] for n, r in rows.items()} == {n: str(v) for n, v in steps.items()}
    assert {n: r["optim.critic.lr"] for n, r in rows.items()} == {n: repr(v) for n, v in lrs.items()}
    report = (out / "REPORT.md").read_text()
    assert ("- Adjusted: `train.steps=7` when `pairing` in {paper} and `penalty.weight` in {10.0}." in report)
    assert ("- Adjusted: `optim.critic.lr=0.001` when `penalty.weight` in {1.0, 10.0} and `pairing` in {common}."
            in report)


STUDY = """\
    base: base.yaml
    reference_scores: floors/real.json
    variants:
      setting:
        none: {penalty.type: none}
        wgan_gp: {loss: wgan, penalty.type: wgan_gp, penalty.weight: 10, train.critic_steps: 5}
        r1: {penalty.type: r1, penalty.weight: 20}
    axes:
      setting: [none, wgan_gp, r1]
      data.name: [grid25, ring8]
      train.seed: [0, 1]
    metrics: [eval/modes, eval/high_quality, {eval/reverse_kl: min}]
    x_axis: setting
    series_axis: data.name
"""
# What `gpgan-eval real --out` writes (the scores under the keys runs log); high_quality is not in it.
FLOOR = {"source": "cifar10:test (1,017 images)", "reference": "cifar10:train (5,085 images)", "images": 1017,
         "metrics": ["fid"], "scores": {"eval/modes": 30.0, "eval/reverse_kl": 0.25}, "device": "cpu"}


def test_results_csv_shows_what_variants_set_and_the_report_the_real_data_floor(tmp_path, fake, monkeypatch, capsys):
    from gpgan.metrics.real_scores import write_real_scores
    from gpgan.studies import report as report_module
    from gpgan.studies.sweep import format_value, run_config
    from gpgan.train.config import load_config

    write_real_scores(tmp_path / "floors" / "real.json", FLOOR)
    sweep_path = write_sweep(tmp_path, STUDY)
    sweep = load_sweep(sweep_path)
    assert sweep.varied_keys == ["penalty.type", "loss", "penalty.weight", "train.critic_steps"]
    drawn = []

    def curves_plot(path, groups, *args, references=(), **kwargs):
        drawn.append((os.path.basename(path), list(references)))
        return real_curves_plot(path, groups, *args, references=references, **kwargs)
    real_curves_plot = report_module.curves_plot
    monkeypatch.setattr(report_module, "curves_plot", curves_plot)
    out = tmp_path / "out"
    assert main([str(sweep_path), "--out", str(out), "--jobs", "2"]) == 0

    # results.csv: each run's resolved value of every key a variant sets, the base config's where
    # its variant leaves a key alone.
    base = load_config(str(tmp_path / "base.yaml"))
    rows = read_csv(out / "results.csv")
    assert list(rows[0])[:9] == ["run", "status", "setting", "data.name", "train.seed", "penalty.type", "loss",
                                 "penalty.weight", "train.critic_steps"]
    want = {"none": ("none", base["loss"], format_value(base["penalty"]["weight"]),
                     format_value(base["train"]["critic_steps"])),
            "wgan_gp": ("wgan_gp", "wgan", "10.0", "5"),  # resolved: the schema makes a weight a float
            "r1": ("r1", base["loss"], "20.0", format_value(base["train"]["critic_steps"]))}
    assert len(rows) == 12 and base["loss"] != "wgan"
    for r in rows:
        assert (r["penalty.type"], r["loss"], r["penalty.weight"], r["train.critic_steps"]) == want[r["setting"]]

    # REPORT.md: the real data's row in both results tables (n/a for a metric the file lacks) and
    # its line; dashed lines in the figures of the metrics it holds.
    report = (out / "REPORT.md").read_text()
    assert "| **real data** |  | 1,017 images | 30 | n/a | 0.25 |  |\n" in report  # final (with wall time)
    assert "| **real data** |  | 1,017 images | 30 | n/a | 0.25 |\n" in report  # best
    assert ("**real data**: the real-data floor, cifar10:test (1,017 images) against cifar10:train (5,085 images) "
            "([real.json](../floors/real.json), written by `gpgan-eval real`)") in report  # linked from the report
    assert ("FID from fewer images reads higher: the floor's 1,017 images overstate it against the runs' 2,500 "
            "samples; precision and recall compare equal numbers on both sides") in report
    assert "| **real data** |  | 1,017 images | 30 | n/a | 0.25 |\n" in report.split("## At the best eval/modes")[1]
    assert "eval/modes (final, mean ± std over seeds); dashed: real data (1,017 images), 30:" in report
    assert "non-finite means left out; dashed: real data (1,017 images), 0.25):" in report
    floor = "real data (1,017 images)"
    assert sorted(drawn) == [("eval-high_quality.png", []), ("eval-modes.png", [(floor, 30.0)]),
                             ("eval-reverse_kl.png", [(floor, 0.25)])]

    # --report-only rebuilds every file byte for byte, figures included.
    files = {p.relative_to(out): p.read_bytes() for p in sorted(out.glob("figures/**/*.png"))}
    files.update({name: (out / name).read_bytes() for name in ("REPORT.md", "results.csv")})
    assert len(files) == 2 + 7  # 3 metric figures, 3 curve figures, 1 sample tile
    for p in [out / "REPORT.md", out / "results.csv", *out.glob("figures/**/*.png")]:
        p.unlink()
    assert main([str(sweep_path), "--out", str(out), "--report-only"]) == 0
    assert {name: (out / name).read_bytes() for name in files} == files
    elsewhere = tmp_path / "reports" / "study"
    assert main([str(sweep_path), "--out", str(out), "--report-only", "--report-dir", str(elsewhere)]) == 0
    assert "([real.json](../../floors/real.json), written by" in (elsewhere / "REPORT.md").read_text()

    # A run's own config.yaml says what it trained with (here: edited after the sweep planned it).
    spec = next(s for s in expand_runs(sweep) if s.values["setting"] == "r1")
    config = run_config(sweep, spec)
    config["loss"] = "hinge"
    run_dir = next((out / "runs").glob(f"*/{spec.name}"))
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    assert main([str(sweep_path), "--out", str(out), "--report-only"]) == 0
    assert [r["loss"] for r in read_csv(out / "results.csv") if r["run"] == spec.name] == ["hinge"]


@pytest.mark.parametrize("body, content, message", [
    ("reference_scores: 3\n", None, "reference_scores: got 3 (a number, not a string); accepted: the path of a JSON file "
                                    "that `gpgan-eval real ... --out FILE` wrote (relative to the sweep file), or null"),
    ("reference_scores: none.json\n", None, "none.json (relative to the sweep file) does not exist; `gpgan-eval real "
                                            "SOURCE --ref REF --out FILE` writes it"),
    ("reference_scores: real.json\n", "{not json", "real.json: not JSON"),
    ("reference_scores: real.json\n", '{"source": "a", "reference": "b", "images": 3}',
     "real.json: not a `gpgan-eval real` scores file: it lacks 'scores' (it needs source, reference, images, scores)"),
    ("reference_scores: real.json\n", '{"source": "a", "reference": "b", "images": 3, "scores": {"eval/fid": "x"}}',
     "score 'eval/fid' must be a finite number, got 'x'"),
    ("reference_score: real.json\n", None, "unknown key 'reference_score'; did you mean 'reference_scores'"),
])
def test_reference_scores_errors(tmp_path, capsys, body, content, message):
    if content is not None:
        (tmp_path / "real.json").write_text(content)
    path = write_sweep(tmp_path, "base: base.yaml\naxes: {train.seed: [0, 1]}\n" + body)
    with pytest.raises(SweepError) as info:
        load_sweep(path)
    assert message in str(info.value) and "\n" not in str(info.value)
    assert main([str(path), "--out", str(tmp_path / "out"), "--report-only"]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("body, message", [
    ("adjust: {when: {train.seed: 0}, set: {train.steps: 3}}\n",
     "adjust: got {when: {train.seed: 0}, set: {train.steps: 3}} (a mapping, not a list); accepted: a list of "
     "{when: {axis: value}, set: {key: value}} rules, or null"),
    ("adjust: [{when: {train.seed: 0}}]\n", "adjust[0]: needs both 'when' and 'set'"),
    ("adjust: [{when: {train.seed: 0}, sets: {train.steps: 3}}]\n", "unknown key(s) 'sets' (did you mean 'set'?)"),
    ("adjust: [{when: {train.sed: 0}, set: {train.steps: 3}}]\n", "'train.sed' is not an axis"),
    ("adjust: [{when: {train.seed: 5}, set: {train.steps: 3}}]\n", "train.seed=5 is not among the axis values"),
    ("adjust: [{when: {train.seed: 0}, set: {}}]\n", "adjust[0].set: must be a non-empty mapping"),
    ("adjust: [{when: {train.seed: 0}, set: {train.seed: 1}}]\n", "adjust[0].set.train.seed: is also an axis"),
    ("adjust: [{when: {train.seed: 0}, set: {train.stesp: 3}}]\n", "did you mean 'train.steps'"),
    ("ignore: [{when: {train.seed: 0}}]\n", "ignore[0]: needs both 'when' and 'axes'"),
    ("ignore: [3]\n", "ignore[0]: must be a mapping {when: {axis: value}, axes: [axis, ...]}"),
    # An empty mapping is no more a list than any other: each section says so, none passes silently.
    ("ignore: {}\n", "ignore: got {} (a mapping, not a list); accepted: a list of {when: {axis: value}, axes: [axis, ...]} "
                     "rules, or null"),
    ("exclude: {}\n", "exclude: got {} (a mapping, not a list); accepted: a list of {axis: value or [values]} rules"),
    ("exclude: 0\n", "exclude: got 0 (a number, not a list); accepted: a list of {axis: value or [values]} rules"),
    ("adjust: {}\n", "adjust: got {} (a mapping, not a list); accepted: a list of {when: {axis: value}, set: {key: value}} rules"),
    ("metrics: {eval/modes: max}\n", "metrics: got {eval/modes: max} (a mapping, not a list); accepted: a list of metric "
                                     "names or {name: max|min} mappings"),
])
def test_list_section_errors(tmp_path, body, message):
    assert_sweep_error(tmp_path, "base: base.yaml\naxes: {train.seed: [0, 1]}\n" + body, message)


# ----------------------------------------------------------------------------------------------
# figures

def figure_parts(figure):
    """(axes, {legend label: line}, [error bars as (x, low, high)] per errorbar call, mark texts)."""
    ax = figure.axes[0]
    lines = {line.get_label(): line for line in ax.get_lines() if not line.get_label().startswith("_")}
    bars = [[(s[0][0], min(s[0][1], s[1][1]), max(s[0][1], s[1][1])) for s in c.lines[2][0].get_segments()]
            for c in ax.containers]
    return ax, lines, bars, sorted(t.get_text() for t in ax.texts)


def test_metric_figure_log_axis_error_bars_levels_and_infinite_marks():
    from gpgan.studies.figures import build_metric_figure

    points = [("none", IGNORED, 0.6, 0.1),
              ("r1", 0.1, 0.5, 0.2), ("r1", 1.0, 0.3, None), ("r1", 10.0, 0.1, 0.05),
              ("wgan_gp", 0.1, 0.4, 0.1), ("wgan_gp", 1.0, 0.2, 0.1), ("wgan_gp", 10.0, math.inf, None)]
    figure = build_metric_figure(points, "penalty.weight", "penalty.type", [0.1, 1.0, 10.0],
                                 "eval/reverse_kl", "min", "eval/reverse_kl, data.name=grid25")
    ax, lines, bars, marks = figure_parts(figure)
    assert ax.get_xscale() == "log" and list(ax.get_xticks()) == [0.1, 1.0, 10.0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0.1", "1.0", "10.0"]
    assert ax.get_ylabel() == "eval/reverse_kl (lower is better)" and ax.get_title() == "eval/reverse_kl, data.name=grid25"
    assert list(lines) == ["none (any penalty.weight)", "r1", "wgan_gp"]
    assert lines["none (any penalty.weight)"].get_linestyle() == "--"  # a level over every weight
    np.testing.assert_array_equal(lines["r1"].get_ydata(), [0.5, 0.3, 0.1])
    # error bars = std over seeds, none where a single seed has no std; the inf has none either
    np.testing.assert_allclose(bars[0], [(0.1, 0.3, 0.7), (10.0, 0.05, 0.15)])
    np.testing.assert_allclose(bars[1], [(0.1, 0.3, 0.5), (1.0, 0.1, 0.3)])
    # the collapsed setting is marked, not silently missing
    assert marks == ["inf"]
    (mark,) = [line for line in ax.get_lines() if line.get_marker() == "^"]
    assert list(mark.get_xdata()) == [10.0] and mark.get_ydata()[0] > 0.8  # top band, axes coordinates


def test_metric_figure_linear_categorical_and_point_plot_axes(tmp_path):
    from gpgan.studies.figures import build_metric_figure, metric_figure

    linear = build_metric_figure([(None, x, x * 2.0, 0.1) for x in (1, 2, 3)], "train.critic_steps", None,
                                 [1, 2, 3], "eval/modes", "max", "eval/modes")
    ax, lines, _, _ = figure_parts(linear)
    assert ax.get_xscale() == "linear" and list(ax.get_xticks()) == [1.0, 2.0, 3.0]
    assert ax.get_ylabel() == "eval/modes (higher is better)" and not lines and not linear.legends

    names = ["relu", "leaky_relu", "elu"]
    categorical = build_metric_figure([("adam", x, float(i), None) for i, x in enumerate(names)],
                                      "model.activation", "optim.name", names, "eval/modes", "max", "t")
    ax, lines, bars, _ = figure_parts(categorical)
    categorical.canvas.draw()
    assert list(ax.get_xticks()) == [0.0, 1.0, 2.0] and [t.get_text() for t in ax.get_xticklabels()] == names
    assert list(lines) == ["adam"] and bars == []
    assert lines["adam"].get_linestyle() == "None"  # settings without an order: marks, no line between them
    ax, lines, _, _ = figure_parts(build_metric_figure([("adam", x, x * 2.0, None) for x in (1, 2, 3)],
                                                       "train.critic_steps", "optim.name", [1, 2, 3], "m", "max", "t"))
    assert lines["adam"].get_linestyle() == "-"  # numbers: a line

    # one weight per type: one mark per type, no line between the types, named on the x axis
    points = [("r1", 1.0, 25.0, 0.5), ("wgan_gp", 1.0, math.nan, None), ("none", IGNORED, 17.0, 1.0)]
    single = build_metric_figure(points, "penalty.weight", "penalty.type", [1.0], "eval/modes", "max", "t")
    ax, _, bars, marks = figure_parts(single)
    single.canvas.draw()
    assert [t.get_text() for t in ax.get_xticklabels()] == [
        "r1 (penalty.weight=1.0)", "wgan_gp (penalty.weight=1.0)", "none"]
    assert ax.get_xlabel() == "penalty.type" and ax.get_lines()[0].get_linestyle() == "None"
    assert len(bars) == 1 and marks == ["nan"]
    np.testing.assert_allclose(bars[0], [(0.0, 24.5, 25.5), (2.0, 16.0, 18.0)])

    assert build_metric_figure([], "penalty.weight", None, [1.0], "eval/modes", "max", "t") is None
    assert metric_figure(tmp_path / "none.png", [], "penalty.weight", None, [1.0], "eval/modes", "max", "t") is False
    assert not (tmp_path / "none.png").exists()


def test_a_metric_no_run_logged_is_named(tmp_path, fake, capsys):
    """A misspelt metric in the sweep file gave empty columns and no word about it. (A misspelt
    evaluation, eval/..., is refused with the sweep file: test_sweep_validation_errors.)"""
    sweep = write_sweep(tmp_path, TINY.replace("metrics: [eval/modes, {eval/reverse_kl: min}]",
                                               "metrics: [eval/modes, loss/critc]"))
    assert main([str(sweep), "--out", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert (f"gpgan-ablate: warning: no finished run logged loss/critc (metrics: in {sweep}); a run's "
            "metrics.jsonl has the names it logs") in err
    assert "logged eval/modes" not in err


def test_report_marks_and_names_an_infinite_setting(tmp_path, monkeypatch):
    """A reverse KL of inf (a collapsed run) is drawn as a mark and named in the figure's caption."""
    script = tmp_path / "fake_inf.py"
    script.write_text(FAKE_TRAINER.replace(
        '"eval/reverse_kl": 1 / (1 + seed)}',
        '"eval/reverse_kl": float("inf") if weight >= 10 else 1 / (1 + seed)}'))
    monkeypatch.setenv("GPGAN_TRAIN_CMD", shlex.join([sys.executable, str(script)]))
    sweep = write_sweep(tmp_path, """\
        base: base.yaml
        axes:
          penalty.type: [r1]
          penalty.weight: [0.1, 1, 10]
          train.seed: [0, 1]
        metrics: [{eval/reverse_kl: min}]
    """)
    out = tmp_path / "out"
    assert main([str(sweep), "--out", str(out), "--jobs", "2"]) == 0
    report = (out / "REPORT.md").read_text()
    assert "| r1 | 10 | 2/2 | inf |" in report
    assert ("eval/reverse_kl (final, mean ± std over seeds); marked at the edge (mean not finite): r1, 10 (inf):\n\n"
            "![eval/reverse_kl (final, mean ± std over seeds)](figures/eval-reverse_kl.png)") in report
    png = (out / "figures" / "eval-reverse_kl.png").read_bytes()
    assert main([str(sweep), "--out", str(out), "--report-only"]) == 0
    assert (out / "figures" / "eval-reverse_kl.png").read_bytes() == png


@pytest.mark.parametrize("whom", ["ablate", "process_group", "ablate_started_ignoring_sigint", "ablate_sigterm"])
def test_interrupted_sweep_stops_trainers_and_resumes(tmp_path, fake, whom):
    """SIGINT to gpgan-ablate alone, or to its whole process group as a Ctrl-C in a terminal
    sends it: either way every trainer gets exactly one interrupt and stops with a checkpoint. Also
    when gpgan-ablate came in with SIGINT ignored, as a script's `nohup gpgan-ablate ... &` starts it,
    and on SIGTERM (a scheduler's stop), which means the same."""
    sweep = write_sweep(tmp_path, TINY)
    out = tmp_path / "out"
    env = dict(os.environ, FAKE_SLEEP="1", PYTHONPATH=str(REPO))
    ignoring = whom == "ablate_started_ignoring_sigint"
    proc = subprocess.Popen([sys.executable, "-m", "gpgan.cli.ablate", str(sweep), "--out", str(out), "--jobs", "2"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True,  # a group of its own, as a terminal's job
                            preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ignoring else None)
    deadline = time.monotonic() + 30
    while len(list(out.glob("runs/base/*/fake_state.json"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)  # let both trainers reach their loop
    if whom == "ablate_sigterm":
        proc.send_signal(signal.SIGTERM)
    elif whom != "process_group":
        proc.send_signal(signal.SIGINT)  # only gpgan-ablate: it must pass the interrupt on
    else:
        os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Run the same command again" in stderr
    running = sorted(p.parent.name for p in out.glob("runs/base/*/fake_state.json"))
    assert len(running) == 2  # the other two never started
    assert main([str(sweep), "--out", str(out), "--report-only"]) == 1
    statuses = {r["run"]: r["status"] for r in read_csv(out / "results.csv")}
    assert statuses == {n: ("interrupted" if n in running else "not run") for n in statuses}
    report = (out / "REPORT.md").read_text()
    assert "## Failures\n\nNone." in report and "## Incomplete runs" in report
    assert f"- `{running[0]}`: interrupted, checkpoint at step 1\n" in report  # no config.yaml: no target
    for name in running:
        assert "fake trainer: interrupted" in (out / "logs" / name / "stderr.log").read_text()
    assert main([str(sweep), "--out", str(out), "--jobs", "2", "--dry-run"]) == 0
    assert main([str(sweep), "--out", str(out), "--jobs", "2"]) == 0
    rows = read_csv(out / "results.csv")
    assert [r["status"] for r in rows] == ["finished"] * 4
    for r in rows:
        calls = (out / r["run_dir"] / "calls.txt").read_text()
        assert calls == ("start\nresume\n" if r["run"] in running else "start\n")
        assert not (out / r["run_dir"] / "resumed_beside_a_failure_record.json").exists()


def test_an_attempt_that_never_starts_keeps_the_last_failure_record(tmp_path):
    """A run's failure record is cleared when its next attempt starts; an attempt that never does
    (a queued Ray task cancelled by Ctrl-C: the trainers return None) puts it back as it was."""
    from gpgan.studies.runner import _Runner, failure_path

    sweep = load_sweep(str(write_sweep(tmp_path, TINY)))
    spec = expand_runs(sweep)[0]
    out = tmp_path / "out"
    record = Path(failure_path(str(out), spec.name))
    record.parent.mkdir(parents=True)
    text = b'{"status": "failed", "returncode": 1, "error": "the last attempt\'s error"}\n'
    record.write_bytes(text)

    class NeverStarts:
        stopping, forces_cuda, seen = False, False, []

        def run(self, cmd, device, logs):
            self.seen.append(record.exists())
            return None
    trainers = NeverStarts()
    result = _Runner(sweep, str(out), 1, None, ["gpgan-train"], lambda *a: None, trainers).run(1, 1, spec, "start",
                                                                                            None, None)
    assert result.status == "not run" and trainers.seen == [False]
    assert record.read_bytes() == text


def test_ctrl_c_during_an_evaluation_longer_than_the_grace_period_loses_no_steps(tmp_path, monkeypatch, capsys):
    """Ctrl-C to gpgan-ablate while its trainer evaluates, the evaluation being longer than the
    time gpgan-ablate waits before SIGTERM (as a CIFAR evaluation on a CPU is): the trainer leaves
    the evaluation off, saves the step's checkpoint within the grace period, and the next sweep
    finishes the run with every evaluation logged once."""
    from gpgan.checkpoint import read_meta
    from gpgan.studies.trainers import LocalTrainers
    from helpers import write_cifar_fixture

    weights = tmp_path / "weights.npz"
    weights.write_bytes(b"stand-in")
    write_cifar_fixture(tmp_path / "cifar")
    mark = tmp_path / "evaluating"
    monkeypatch.setenv("GPGAN_TRAIN_CMD", shlex.join([sys.executable, str(REPO / "tests" / "programs" /
                                                                         "slow_evaluation.py")]))
    for var, value in (("HOME", tmp_path / "home"), ("GPGAN_INCEPTION_WEIGHTS", weights),
                       ("SLOW_EVAL_MARK", mark), ("SLOW_EVAL_SECONDS", "0.5")):
        monkeypatch.setenv(var, str(value))
    stop = LocalTrainers.stop
    monkeypatch.setattr(LocalTrainers, "stop", lambda self, grace=60.0: stop(self, grace=5.0))
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(textwrap.dedent(f"""\
        base: {REPO / 'configs' / 'r1_cifar.yaml'}
        set:
          model.generator_options: {{width: 2, latent_dim: 8}}
          model.critic_options: {{width: 2}}
          data.root: {tmp_path / 'cifar'}
          data.download: false
          train.steps: 6
          train.batch_size: 4
          train.n_samples: 4
          train.log_interval: 2
          train.eval_interval: 2
          train.checkpoint_interval: 3
          train.sample_interval: 0
          eval.metrics: [fid]
          eval.samples: 20
          eval.batch_size: 2
        axes:
          train.seed: [0]
        metrics: [{{eval/fid: min}}]
    """))
    out = tmp_path / "out"

    done = threading.Event()

    def interrupt_when_evaluating():  # the first evaluation (step 2): 20 images at 0.5 s, 10 s in all
        deadline = time.monotonic() + 120
        while not mark.exists() and time.monotonic() < deadline and not done.is_set():
            time.sleep(0.05)
        if not done.is_set():  # never after the sweep returned: the signal would hit pytest
            os.kill(os.getpid(), signal.SIGINT)
    interrupter = threading.Thread(target=interrupt_when_evaluating, daemon=True)
    interrupter.start()
    try:
        assert main([str(sweep), "--out", str(out)]) == 130
    finally:
        done.set()
        interrupter.join()
    run = next((out / "runs" / "r1_cifar").iterdir())
    stderr = (out / "logs" / run.name / "stderr.log").read_text()
    assert "at step 2; its evaluation was left off and a resume does it first" in stderr, stderr
    assert "stopped without saving" not in stderr
    assert read_meta(str(run / "checkpoints" / "ckpt_000002.npz"))["owed"]["record"]["step"] == 2
    capsys.readouterr()

    monkeypatch.setenv("SLOW_EVAL_SECONDS", "0")
    assert main([str(sweep), "--out", str(out)]) == 0
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "eval/fid" in r] == [2, 4, 6]
    assert [r["step"] for r in records] == [2, 4, 6]
    assert [r["status"] for r in read_csv(out / "results.csv")] == ["finished"]


def test_mean_std_and_stderr_tail(tmp_path):
    values = [0.3, 1.7, 2.5]
    mean, std, n = mean_std(values + [None, math.nan])
    assert n == 3 and mean == pytest.approx(statistics.mean(values)) and std == pytest.approx(statistics.stdev(values))
    assert mean_std([4.0]) == (4.0, None, 1)
    assert mean_std([]) == (None, None, 0)
    assert mean_std([1.0, math.inf]) == (math.inf, None, 2)  # a reverse KL of inf is not dropped
    log = tmp_path / "stderr.log"
    log.write_text("=== gpgan-ablate start: x\n" + "".join(f"line {i}\n" for i in range(30))
                   + "  5%|#   | 5/100\r 50%|#####  | 50/100\r\nTraceback: boom\n\n")
    tail = stderr_tail(log, n=3)
    assert tail == ["line 29", " 50%|#####  | 50/100", "Traceback: boom"]
    # A second attempt appended to the log: only its lines.
    with open(log, "a") as fh:
        fh.write("=== gpgan-ablate resume: x\nagain\n")
    assert stderr_tail(log, n=3) == ["again"]


# ----------------------------------------------------------------------------------------------
# validation

@pytest.mark.parametrize("body, message", [
    ("base: base.yaml\naxis: {penalty.type: [r1]}\n", "unknown key 'axis'; did you mean 'x_axis' or 'axes'?"),
    ("base: base.yaml\naxes: {penalty.type: [r1]}\nseeds_axis: train.seed\n", "did you mean 'seed_axis' or"),
    ("base: missing.yaml\naxes: {penalty.type: [r1]}\n", "does not exist"),
    ("axes: {penalty.type: [r1]}\n", "missing required key 'base'; accepted: a path to a config file"),
    ("base: base.yaml\naxes: {penalty.type: r1}\n", "axes.penalty.type: must be a non-empty list"),
    ("base: base.yaml\naxes: {penalty.type: [r1, r1]}\n", "listed twice"),
    ("base: base.yaml\naxes: {penalty.type: [r1]}\nx_axis: penalty.wieght\n",
     "'penalty.wieght' is not an axis"),
    ("base: base.yaml\naxes: {penalty.type: [r1]}\nmetrics: [{eval/modes: maximum}]\n",
     "direction 'maximum' for 'eval/modes' must be one of ['max', 'min'] (did you mean 'max'?)"),
    # a misspelt evaluation had passed, and the report then drew an empty column
    ("base: base.yaml\naxes: {penalty.type: [r1]}\nmetrics: [eval/reverse_kl, eval/moedes]\n",
     "metrics[1]: metric 'eval/moedes' is no evaluation a run logs (did you mean 'eval/modes'"),
    ("base: base.yaml\naxes: {penalty.type: [r1]}\nmetrics: [eval_std/fid]\n", "accepted: eval/coverage, "),
    ("base: base.yaml\naxes: {penalty.type: [r1]}\nignore: [{if: {penalty.type: r1}, axes: [x]}]\n",
     "ignore[0]: unknown key(s) 'if'"),
    ("base: base.yaml\naxes: {penalty.type: [r1, r2]}\nexclude: [{penalty.type: r3}]\n",
     "penalty.type='r3' is not among the axis values"),
    ("base: base.yaml\naxes: {penalty.type: [r1]}\nexclude: [{penalty.type: r1}]\n", "excludes every combination"),
    ("base: base.yaml\naxes: {penalty.type: [r1]}\nset: {penalty.type: r2}\n", "is also an axis"),
    ("base: base.yaml\naxes: {penalty.wieght: [1]}\n", "did you mean 'penalty.weight'"),
    ("base: base.yaml\naxes: {penalty.type: [a/b, a_b]}\n", "get the same folder name"),
    # values the schema reads as one (1e0 is a string to YAML, 1.0 to the schema): one run, not two
    ("base: base.yaml\naxes: {penalty.weight: [1, 1e0]}\n",
     "runs weight-1 and weight-1e0 (penalty.weight=1e0) would train the same config"),
    ("base: base.yaml\nvariants: {s: {a: {penalty.type: r1}, b: {penalty.type: r1}}}\naxes: {s: [a, b]}\n",
     "runs s-a and s-b (s=b) would train the same config"),
    ("- just a list\n", "top level: got [just a list]; accepted: a mapping with keys base, axes, set"),
    # values the trainer's schema refuses are caught before any run starts, naming the run
    ("base: base.yaml\naxes: {penalty.type: [r1, r9]}\n",
     "run type-r9 (penalty.type=r9): invalid config"),
    ("base: base.yaml\naxes: {penalty.type: [r1, r9]}\n", "penalty.type: got 'r9' (not one of the accepted values)"),
    ("base: base.yaml\naxes: {penalty.type: [r1], penalty.weight: [1, -1]}\n",
     "run type-r1__weight--1 (penalty.type=r1, penalty.weight=-1): invalid config"),
])
def test_sweep_validation_errors(tmp_path, capsys, body, message):
    path = write_sweep(tmp_path, body)
    with pytest.raises(SweepError) as info:
        load_sweep(path)
    assert message in str(info.value)
    assert str(path) in str(info.value)
    assert main([str(path), "--out", str(tmp_path / "out")]) == 2
    assert message in capsys.readouterr().err
    assert main([str(path), "--out", str(tmp_path / "out"), "--dry-run"]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_sweep_files_that_cannot_be_read_are_named(tmp_path, capsys):
    """A sweep file that is no UTF-8 text gave Python's codec error; a base that is a folder was
    said not to exist. Both read as gpgan-train's own config files do."""
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe base: x\n")
    folder_base = write_sweep(tmp_path, "base: .\naxes: {penalty.type: [r1]}\n", name="folder.yaml")
    for path, message in ((binary, f"sweep file {binary} is not UTF-8 text (invalid start byte at byte 0); a sweep "
                                   "file is a YAML file"),
                          (tmp_path, f"sweep file {tmp_path} is a folder, not a YAML file"),
                          (folder_base, "(relative to the sweep file) is a folder, not a YAML file")):
        assert main([str(path), "--out", str(tmp_path / "out"), "--dry-run"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err and "codec" not in err, err
    assert not (tmp_path / "out").exists()


# The top-level keys and their types are SWEEP_SCHEMA's to check (gpgan.schema's messages).
@pytest.mark.parametrize("body, message", [
    ("base: 3\naxes: {train.seed: [0]}\n", "base: got 3 (a number, not a string); accepted: a path to a config file"),
    ("base: ''\naxes: {train.seed: [0]}\n", "base: got ''; accepted: a path to a config file"),
    ("base: base.yaml\naxes: [train.seed]\n", "axes: got [train.seed] (a list, not a mapping); accepted: a non-empty "
                                              "mapping of dotted config keys (or variant axes) to lists of values"),
    ("base: base.yaml\naxes: {}\n", "axes: got {}; accepted: a non-empty mapping"),
    ("base: base.yaml\naxes: {train.seed: [0]}\nset: [train.steps]\n",
     "set: got [train.steps] (a list, not a mapping); accepted: a mapping of dotted config keys to values, or null"),
    ("base: base.yaml\naxes: {train.seed: [0]}\nseed_axis: [train.seed]\n",
     "seed_axis: got [train.seed] (a list, not a string); accepted: an axis key, or null"),
    ("base: base.yaml\naxes: {train.seed: [0]}\ntitle: 3\n", "title: got 3 (a number, not a string); accepted: a string, or null"),
    ("base: base.yaml\naxes: {train.seed: [0]}\nnotes: {a: 1}\n",
     "notes: got {a: 1} (a mapping, not a string); accepted: Markdown text (a string), or null"),
    ("base: base.yaml\naxes: {train.seed: [0]}\nout: ''\n", "out: got ''; accepted: a folder path, or null"),
    ("base: base.yaml\naxes: {train.seed: [0]}\nreference_scores: ''\n",
     "reference_scores: got ''; accepted: the path of a JSON file"),
    ("base: base.yaml\naxes: {train.seed: [0]}\nvariants: [a]\n",
     "variants: got [a] (a list, not a mapping); accepted: a mapping {axis name: {variant name: {dotted key: value}}}"),
    ("base: base.yaml\naxes: {train.seed: [0]}\nexlcude: []\n", "unknown key 'exlcude'; did you mean 'exclude'?"),
    ("base: base.yaml\naxes: {train.seed: [0]}\nTitle: x\n", "unknown key 'Title'; did you mean 'title'?"),
    ("", "2 problems: (1) missing required key 'base'; accepted: a path to a config file (2) missing required key 'axes'"),
    ("base: base.yaml\naxis: {train.seed: [0]}\ntitle: 3\n",
     "3 problems: (1) unknown key 'axis'; did you mean 'x_axis' or 'axes'? (2) missing required key 'axes'; accepted: "
     "a non-empty mapping of dotted config keys (or variant axes) to lists of values (3) title: got 3"),
])
def test_top_level_keys_and_types_are_checked_by_the_sweep_schema(tmp_path, capsys, body, message):
    path = write_sweep(tmp_path, body)
    with pytest.raises(SweepError) as info:
        load_sweep(path)
    assert str(info.value).startswith(f"sweep file {path}: ") and message in str(info.value)
    assert "\n" not in str(info.value)
    assert main([str(path), "--out", str(tmp_path / "out"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and "Error" not in err


def test_null_sections_mean_their_defaults(tmp_path):
    sweep = load_sweep(write_sweep(tmp_path, "base: base.yaml\naxes: {train.seed: [0, 1]}\nset: null\n"
                                             "variants: null\nmetrics: null\nignore: null\nexclude: null\n"
                                             "adjust: null\nout: null\ntitle: null\nnotes: null\n"))
    assert (sweep.fixed, sweep.variants, sweep.metrics, sweep.ignore, sweep.exclude, sweep.adjust) == ({}, {}, [], [], [], [])
    assert (sweep.out, sweep.title, sweep.notes, sweep.seed_axis) == (None, None, None, "train.seed")
    assert len(expand_runs(sweep)) == 2


def test_help_shows_every_sweep_key():
    from gpgan.cli.ablate import EPILOG
    from gpgan.studies.sweep import SWEEP_SCHEMA

    missing = [key for key, _ in SWEEP_SCHEMA.fields() if f"\n  {key}:" not in EPILOG]
    assert not missing, f"gpgan-ablate --help's sweep file example lacks {missing}"


def test_docs_sweep_reference_is_in_sync():
    from gpgan.studies.sweep import sweep_reference_markdown

    text = (REPO / "docs" / "studies.md").read_text(encoding="utf-8")
    start, end = "<!-- sweep-reference:start -->", "<!-- sweep-reference:end -->"
    assert start in text and end in text, "docs/studies.md lacks the sweep reference markers"
    assert text.split(start, 1)[1].split(end, 1)[0].strip() == sweep_reference_markdown().strip(), (
        "docs/studies.md's sweep reference is stale; regenerate it with `python -c 'from gpgan.studies.sweep "
        "import sweep_reference_markdown as r; print(r(), end=\"\")'`")


# ----------------------------------------------------------------------------------------------
# the real gpgan-train (a few steps of a tiny MLP GAN per run)

REAL_TINY = f"""\
base: {REPO / 'configs' / 'quickstart.yaml'}
set:
  model.generator_options: {{latent_dim: 2, width: 16, depth: 2}}
  model.critic_options: {{width: 16, depth: 2}}
  train.steps: 12
  train.batch_size: 32
  train.ema.enabled: false
  train.log_interval: 4
  train.eval_interval: 6
  train.eval_samples: 200
  train.sample_interval: 0
  train.checkpoint_interval: 6
axes:
  penalty.type: [r1, wgan_gp]
  penalty.weight: [1.0]
  train.seed: [0, 1]
metrics: [eval/modes, eval/high_quality, {{eval/reverse_kl: min}}]
"""


@pytest.fixture
def real_trainer(monkeypatch):
    monkeypatch.delenv("GPGAN_TRAIN_CMD", raising=False)


def test_real_trainer_from_nothing_then_skip(tmp_path, real_trainer, capsys):
    sweep = tmp_path / "tiny.yaml"
    sweep.write_text(REAL_TINY)
    out = tmp_path / "out"
    assert main([str(sweep), "--out", str(out), "--jobs", "2"]) == 0, capsys.readouterr()
    assert "finished 4" in capsys.readouterr().out
    rows = read_csv(out / "results.csv")
    assert [r["status"] for r in rows] == ["finished"] * 4
    for r in rows:
        run = out / r["run_dir"]
        assert run.parent.name == "quickstart" and run.name == r["run"]
        final = json.loads((run / "final.json").read_text())
        assert final["steps"] == 12 and r["steps"] == "12"
        assert float(r["final/eval/modes"]) == final["final"]["eval/modes"]
        assert float(r["wall_time_s"]) == final["wall_time_s"]
        from gpgan.backend import device_description
        assert r["machine"] == device_description("cpu") != ""  # (the manifest's device_name)
        # best over the logged evaluations, by direction
        evals = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        modes = [e["eval/modes"] for e in evals if "eval/modes" in e]
        kls = [e["eval/reverse_kl"] for e in evals if "eval/reverse_kl" in e]
        assert len(modes) >= 2
        assert float(r["best/eval/modes"]) == max(modes)
        assert float(r["best/eval/reverse_kl"]) == min(kls)
        config = (run / "config.yaml").read_text()
        assert f"seed: {r['train.seed']}" in config and f"type: {r['penalty.type']}" in config
        assert (out / "logs" / run.name / "stderr.log").is_file()
    report = (out / "REPORT.md").read_text()
    # where the runs trained and for how long, from their manifests and final.json
    machine = json.loads((out / rows[0]["run_dir"] / "manifest.json").read_text())["device_name"]
    assert f"- Machines (the runs' manifest.json): `{machine}` (4 runs)." in report
    from gpgan.studies.report import _duration
    seconds = math.fsum(float(r["wall_time_s"]) for r in rows)
    assert f"- Wall time of the finished runs: {_duration(seconds)} in all" in report
    for ptype in ("r1", "wgan_gp"):
        vals = [float(r["final/eval/modes"]) for r in rows if r["penalty.type"] == ptype]
        mean, std = statistics.mean(vals), statistics.stdev(vals)
        assert f"| {ptype} | 1.0 | 2/2 | {mean:.4g} ± {std:.2g} |" in report
    for name in ("eval-modes.png", "eval-high_quality.png", "eval-reverse_kl.png", "samples.png"):
        assert is_png(out / "figures" / name)

    stamps = {p: p.stat().st_mtime_ns for p in out.glob("runs/*/*/*") if p.is_file()}
    assert main([str(sweep), "--out", str(out), "--jobs", "2"]) == 0
    assert "skipped 4, started 0, resumed 0" in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in out.glob("runs/*/*/*") if p.is_file()} == stamps
    assert (out / "REPORT.md").read_text() == report

    # The records (config, manifest, metrics, final.json, samples; no checkpoints) rebuild the same
    # report: machines and wall time included.
    records = tmp_path / "records"
    assert main([str(sweep), "--out", str(out), "--export-records", str(records)]) == 0
    assert not list(records.rglob("*.npz")) and len(list(records.glob("runs/quickstart/*/manifest.json"))) == 4
    assert main([str(sweep), "--out", str(records), "--report-only", "--report-dir", str(tmp_path / "again")]) == 0
    assert (tmp_path / "again" / "REPORT.md").read_text() == report
    assert (tmp_path / "again" / "results.csv").read_bytes() == (out / "results.csv").read_bytes()
    assert _report_files(tmp_path / "again" / "figures") == _report_files(out / "figures")

    # After editing `set:` the finished runs no longer match their names: refuse to mix configs,
    # also in the dry run's plan.
    sweep.write_text(REAL_TINY.replace("train.batch_size: 32", "train.batch_size: 16"))
    assert main([str(sweep), "--out", str(out), "--jobs", "2"]) == 2
    err = capsys.readouterr().err
    assert "4 run folder(s)" in err and "train.batch_size: run has 32, sweep asks 16" in err
    assert main([str(sweep), "--out", str(out), "--dry-run"]) == 2
    assert "train.batch_size: run has 32, sweep asks 16" in capsys.readouterr().err
    assert {p: p.stat().st_mtime_ns for p in out.glob("runs/*/*/*") if p.is_file()} == stamps


CONSTANT_RATE = "\n  optim.generator.schedule: constant\n  optim.critic.schedule: constant"


def test_longer_sweep_extends_its_runs_as_uninterrupted_ones(tmp_path, real_trainer, capsys):
    """Raising `train.steps` in the sweep continues the finished runs from their last checkpoint
    (at a constant rate they then end where runs made that long from the start end); lowering it
    is a mismatch."""
    short = REAL_TINY.replace("train.steps: 12", "train.steps: 12" + CONSTANT_RATE)
    short = short.replace("penalty.type: [r1, wgan_gp]", "penalty.type: [r1]").replace("[0, 1]", "[0]")
    sweep = tmp_path / "tiny.yaml"
    sweep.write_text(short)
    out = tmp_path / "out"
    assert main([str(sweep), "--out", str(out)]) == 0, capsys.readouterr()
    capsys.readouterr()

    sweep.write_text(short.replace("train.steps: 12", "train.steps: 18"))
    assert main([str(sweep), "--out", str(out), "--dry-run"]) == 0
    assert "extend   type-r1__weight-1.0__seed-0 (from step 12 to 18 steps)" in capsys.readouterr().out
    # Until it is extended the run is not final at the sweep's length, and no other config's run.
    assert main([str(sweep), "--out", str(out), "--report-only"]) == 1
    assert "another config" not in capsys.readouterr().err
    report = (out / "REPORT.md").read_text()
    assert "- `type-r1__weight-1.0__seed-0`: unfinished, checkpoint at step 12 of 18" in report
    assert "(0 unfinished" not in report and "1 unfinished" in report
    assert main([str(sweep), "--out", str(out)]) == 0, capsys.readouterr()
    assert "skipped 0, started 0, resumed 0, extended 1; finished 1" in capsys.readouterr().out
    [run] = out.glob("runs/*/*")
    final = json.loads((run / "final.json").read_text())
    assert final["steps"] == 18
    log = (out / "logs" / run.name / "stdout.log").read_text()
    assert "--resume" in log and "train.steps=18" in log

    # An `adjust:` rule lengthens only the runs it matches: the others are skipped as finished.
    two_seeds = short.replace("train.seed: [0]", "train.seed: [0, 1]").replace("train.steps: 12", "train.steps: 18")
    sweep.write_text(two_seeds + "adjust: [{when: {train.seed: 0}, set: {train.steps: 24}}]\n")
    assert main([str(sweep), "--out", str(out), "--dry-run"]) == 0
    plan = capsys.readouterr().out
    assert "extend   type-r1__weight-1.0__seed-0 (from step 18 to 24 steps)" in plan and "seed-1" in plan
    assert "extend   type-r1__weight-1.0__seed-1" not in plan

    direct = tmp_path / "direct.yaml"
    direct.write_text(short.replace("train.steps: 12", "train.steps: 18"))
    out_direct = tmp_path / "out_direct"
    assert main([str(direct), "--out", str(out_direct)]) == 0, capsys.readouterr()
    [run_direct] = out_direct.glob("runs/*/*")
    assert json.loads((run_direct / "final.json").read_text())["final"] == final["final"]
    with np.load(run / "checkpoints" / "ckpt_000018.npz") as a, \
            np.load(run_direct / "checkpoints" / "ckpt_000018.npz") as b:
        params = [k for k in a.files if k.startswith(("module/", "optimizer/"))]
        assert params and all(np.array_equal(a[k], b[k]) for k in params)
    capsys.readouterr()

    sweep.write_text(short.replace("train.steps: 12", "train.steps: 15"))
    assert main([str(sweep), "--out", str(out)]) == 2
    assert "train.steps: run has 18, sweep asks 15" in capsys.readouterr().err


def test_a_run_that_stopped_early_is_finished_for_a_longer_sweep(tmp_path, real_trainer, capsys):
    """A run that train.patience ended is done: raising the sweep's train.steps skips it (more
    steps would stop it again at its next evaluation) and extends the one that ran its steps."""
    short = REAL_TINY.replace("penalty.type: [r1, wgan_gp]", "penalty.type: [r1]")
    short = short.replace("train.steps: 12", "train.steps: 12\n  train.patience: 1000")
    sweep = tmp_path / "tiny.yaml"
    sweep.write_text(short)
    out = tmp_path / "out"
    assert main([str(sweep), "--out", str(out)]) == 0, capsys.readouterr()
    stopped = next(out.glob("runs/*/*seed-0"))
    final = json.loads((stopped / "final.json").read_text())  # as train.patience would have written it
    (stopped / "final.json").write_text(json.dumps({**final, "stop": "stopped early: eval/reverse_kl did not improve"}))
    assert main([str(sweep), "--out", str(out), "--report-only"]) == 0
    ended = {r["run"]: r["ended_by"] for r in read_csv(out / "results.csv")}
    assert ended == {"type-r1__weight-1.0__seed-0": "train.patience", "type-r1__weight-1.0__seed-1": "train.steps"}
    assert "| train.patience (1 of 2) |\n" in (out / "REPORT.md").read_text()
    capsys.readouterr()
    sweep.write_text(short.replace("train.steps: 12", "train.steps: 18"))
    assert main([str(sweep), "--out", str(out), "--dry-run"]) == 0
    plan = capsys.readouterr().out
    assert "skip     type-r1__weight-1.0__seed-0" in plan, plan
    assert "extend   type-r1__weight-1.0__seed-1 (from step 12 to 18 steps)" in plan, plan


def test_real_trainer_failure_and_resume(tmp_path, real_trainer, capsys):
    # weight 1e38 overflows the critic's gradients at step 1 (exit 3: diverged, not retried);
    # stop_after makes the other runs stop at step 6 with a checkpoint (exit 130), so the second
    # sweep must resume them.
    sweep = tmp_path / "tiny.yaml"
    sweep.write_text(REAL_TINY.replace("train.steps: 12", "train.steps: 12\n  train.stop_after: 6")
                     .replace("penalty.type: [r1, wgan_gp]", "penalty.type: [r1]")
                     .replace("penalty.weight: [1.0]", "penalty.weight: [1.0, 1.0e+38]")
                     .replace("train.seed: [0, 1]", "train.seed: [0]"))
    out = tmp_path / "out"
    assert main([str(sweep), "--out", str(out), "--jobs", "2"]) == 1
    rows = {r["penalty.weight"]: r for r in read_csv(out / "results.csv")}
    assert rows["1.0"]["status"] == "interrupted" and rows["1e+38"]["status"] == "diverged"
    report = (out / "REPORT.md").read_text()
    # An incomplete run shows its first metric's evaluations so far.
    logged = [json.loads(line) for line in (out / "runs" / "quickstart" / "type-r1__weight-1.0__seed-0" /
                                            "metrics.jsonl").read_text().splitlines()]
    modes = [r["eval/modes"] for r in logged if "eval/modes" in r]
    assert len(modes) == 1
    assert (f"- `type-r1__weight-1.0__seed-0`: interrupted, checkpoint at step 6 of 12; eval/modes so far: best "
            f"{modes[0]:.4g} at step 6, last {modes[0]:.4g} at step 6 (1 evaluation)\n") in report
    assert "non-finite gradient of the critic" in rows["1e+38"]["error"] and "at step 1" in rows["1e+38"]["error"]
    assert "--resume" in rows["1.0"]["error"]  # gpgan-train's own hint after stop_after
    # Trained on by hand past that attempt (gpgan-train --resume), the run is unfinished again, not
    # interrupted: the sweep's failure record, written at step 6, no longer describes it.
    logs = out / "logs" / "type-r1__weight-1.0__seed-0"
    assert json.loads((logs / "failure.json").read_text())["step"] == 6
    gpgan_train("--resume", str(out / "runs" / "quickstart" / "type-r1__weight-1.0__seed-0"), "--set",
                "train.stop_after=10", "--quiet", check=130)
    main([str(sweep), "--out", str(out), "--report-only"])
    rows = {r["penalty.weight"]: r for r in read_csv(out / "results.csv")}
    assert rows["1.0"]["status"] == "unfinished" and rows["1.0"]["error"] == ""
    assert ("- `type-r1__weight-1.0__seed-0`: unfinished, checkpoint at step 10 of 12;"
            in (out / "REPORT.md").read_text())
    capsys.readouterr()
    assert main([str(sweep), "--out", str(out), "--jobs", "2", "--dry-run"]) == 0
    assert "skip     type-r1__weight-1e+38__seed-0\n" in capsys.readouterr().out
    assert main([str(sweep), "--out", str(out), "--jobs", "2"]) == 0  # nothing left to run
    printed = capsys.readouterr()
    assert "skipped 1, started 0, resumed 1; finished 1, failed 0" in printed.out
    assert "diverged: type-r1__weight-1e+38__seed-0: gpgan-train: error: non-finite gradient" in printed.err
    rows = {r["penalty.weight"]: r for r in read_csv(out / "results.csv")}
    assert rows["1.0"]["status"] == "finished" and rows["1.0"]["steps"] == "12"
    assert rows["1e+38"]["status"] == "diverged"
    report = (out / "REPORT.md").read_text()
    failures = report.split("## Failures", 1)[1]
    assert "- **penalty.type=r1, penalty.weight=1e+38** (1/1 runs diverged; diverged train.seed: 0)" in failures
    assert failures.count("non-finite gradient") == 1 and "penalty.weight=1.0" not in failures
    assert "(1 finished, 1 diverged)" in report and "## Incomplete runs" not in report
    # Made with another config (edited `set:`), the diverged run's folder (no checkpoint) is started again.
    sweep.write_text(sweep.read_text().replace("train.steps: 12", "train.steps: 12\n  optim.critic.lr: 0.0002")
                     .replace("penalty.weight: [1.0, 1.0e+38]", "penalty.weight: [1.0e+38]"))
    assert main([str(sweep), "--out", str(out), "--dry-run"]) == 0
    assert "restart  type-r1__weight-1e+38__seed-0\n" in capsys.readouterr().out


def test_best_settings_name_every_tie():
    from types import SimpleNamespace

    from gpgan.studies.report import _best_lines

    def setting(kind, modes, kl):
        return SimpleNamespace(values={"penalty.type": kind},
                               final={"eval/modes": (modes, 0.0, 3), "eval/reverse_kl": (kl, 0.1, 3)})

    settings = [setting("none", 8.0, 0.3), setting("r1", 8.0, 0.01), setting("r2", 7.0, 0.002),
                setting("lp", 8.0, math.nan)]
    lines = _best_lines([({"data.name": "ring8"}, settings)], [("eval/modes", "max"), ("eval/reverse_kl", "min")])
    assert lines[0] == ("- `eval/modes` ↑ (data.name=ring8): penalty.type=none: 8 ± 0 (n=3) "
                        "(tied with 2 other settings: penalty.type=r1; penalty.type=lp)")
    assert lines[1].startswith("- `eval/reverse_kl` ↓ (data.name=ring8): penalty.type=r2: 0.002 ± 0.1 (n=3)")
    assert "tied" not in lines[1]


def test_ray_address_needs_the_ray_cluster(tmp_path, capsys):
    sweep = tmp_path / "s.yaml"
    sweep.write_text(f"base: {REPO / 'configs' / 'quickstart.yaml'}\naxes:\n  train.seed: [0]\n")
    assert main([str(sweep), "--out", str(tmp_path / "o"), "--ray-address", "127.0.0.1:6379"]) == 2
    assert capsys.readouterr().err == "gpgan-ablate: error: --ray-address needs --cluster ray\n"
    assert not (tmp_path / "o").exists()
    sweep.write_text("axes: a: b\n")
    assert main([str(sweep), "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err == f"gpgan-ablate: error: sweep file {sweep} is not valid YAML: line 1, column 8: " \
                                      "mapping values are not allowed here\n"


def test_studies_import_the_stop_contract_not_the_training_loop():
    """gpgan.studies sets a trainer's GPGAN_STOP_WITH_PARENT through gpgan.train.interrupt (the
    standard library only), which the loop reads back: importing the studies loads neither the
    training loop nor a model."""
    code = ("import sys, gpgan.studies, gpgan.studies.cluster, gpgan.studies.trainers; "
            "print(sorted(m for m in sys.modules if m in ('gpgan.train.loop', 'gpgan.train.build') "
            "or m.startswith('gpgan.models')))")
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "[]"
    from gpgan.train.interrupt import PARENT_ENV, parent_to_watch, stop_with_parent
    from gpgan.studies.trainers import _child_env
    assert parent_to_watch(_child_env(None, 1)) == os.getpid()  # what a sweep's trainer watches
    env = stop_with_parent({}, 4321)
    assert env == {PARENT_ENV: "4321"} and parent_to_watch(env) == 4321
    assert parent_to_watch({}) is None and parent_to_watch({PARENT_ENV: "x"}) is None


def test_dry_run_checks_new_runs_as_gpgan_train_does(tmp_path, capsys):
    # A model option only the model's constructor refuses (what ties options together) passes the
    # schema: the dry run builds each run to start, as gpgan-train --dry-run does, and names every
    # run that would fail. (An option the model's declaration refuses fails the sweep file: below.)
    base = "base: " + str(REPO / "configs" / "quickstart.yaml") + "\n"
    path = write_sweep(tmp_path, "base: base.yaml\n"
                       "set: {model.critic: resnet_critic, model.critic_options: {width: 8}}\n"
                       "axes: {model.critic_options.image_size: [32, 30, 34]}\n", base_text=base)
    out = tmp_path / "out"
    assert main([str(path), "--out", str(out), "--dry-run"]) == 2  # a config gpgan-train refuses
    captured = capsys.readouterr()
    assert "3 runs in" in captured.out
    errors = [line for line in captured.err.splitlines() if "error:" in line]
    assert len(errors) == 2 and "run image_size-30: " in errors[0] and "run image_size-34: " in errors[1]
    assert "image_size must be a multiple of 4" in errors[0] and "Traceback" not in captured.err
    assert not out.exists() and not (tmp_path / "experiments").exists()
    path = write_sweep(tmp_path, "base: base.yaml\naxes: {model.critic_options.activation: [relu, foo]}\n",
                       name="declared.yaml")
    assert main([str(path), "--out", str(out), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "run activation-foo (model.critic_options.activation=foo): invalid config (" in err
    assert err.rstrip().endswith("model.critic_options.activation: got 'foo' (not one of the accepted values); "
                                 "accepted: one of 'relu', 'leaky_relu', 'tanh', 'elu', 'softplus'"), err
    assert not out.exists()
    path = write_sweep(tmp_path, "base: base.yaml\naxes: {model.critic_options.activation: [relu, tanh]}\n",
                       name="good.yaml")
    assert main([str(path), "--out", str(out), "--dry-run"]) == 0
    assert "pass gpgan-train's --dry-run checks" in capsys.readouterr().err
    assert not out.exists()


def test_penalty_options_axes_are_checked_against_the_penalty_before_any_run(tmp_path, capsys):
    # penalty.options is checked against the options each penalty type declares, as gpgan-train
    # checks it: an option the type does not take, or a value of the wrong type, is a config error
    # (exit 2) naming the run, the key and what is accepted, before any run folder.
    base = "base: " + str(REPO / "configs" / "quickstart.yaml") + "\n"
    out = tmp_path / "out"
    for name, body, run, problem in [
        ("foo.yaml", "base: base.yaml\naxes: {penalty.options.foo: [1, 2]}\n", "run foo-1 (penalty.options.foo=1)",
         "penalty.options.foo: not an option of penalty 'r1'; accepted: norm_eps"),
        ("scale.yaml",
         "base: base.yaml\nset: {penalty.type: dragan}\naxes: {penalty.options.noise_scale: [0.5, abc]}\n",
         "run noise_scale-abc (penalty.options.noise_scale=abc)",
         "penalty.options.noise_scale: got 'abc' (not a number); accepted: a number >= 0"),
    ]:
        path = write_sweep(tmp_path, body, name=name, base_text=base)
        assert main([str(path), "--out", str(out), "--dry-run"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"{run}: invalid config (" in err and err.rstrip().endswith(problem), err
        assert "Traceback" not in err and "unexpected keyword" not in err and not out.exists()
    # DRAGAN's own options pass, typed by their declarations (the sweep's runs differ in them)
    path = write_sweep(tmp_path, "base: base.yaml\nset: {penalty.type: dragan}\n"
                       "axes: {penalty.options.noise_scale: [0.5, 1e-2], penalty.options.interpolate: [true, false]}\n",
                       name="good.yaml", base_text=base)
    assert main([str(path), "--out", str(out), "--dry-run"]) == 0
    assert "pass gpgan-train's --dry-run checks" in capsys.readouterr().err
    assert not out.exists()


def test_a_second_sweep_into_the_same_out_is_refused_while_the_first_runs(tmp_path, fake, capsys):
    # Two sweeps into one folder would resume the same run twice at once: the one that finds the
    # folder's lock held (here by this test, as a running gpgan-ablate holds it) runs nothing.
    sweep = write_sweep(tmp_path, TINY)
    out = tmp_path / "out"
    out.mkdir()
    holder = FileLock(out / ".lock")
    holder.acquire()
    try:
        assert main([str(sweep), "--out", str(out)]) == 1
        err = capsys.readouterr().err
        assert (f"error: another gpgan-ablate (process {os.getpid()}) is running the runs of {out}; wait for it to "
                f"end, or stop it (kill -INT {os.getpid()}") in err and "Traceback" not in err
        assert not list((out / "runs").rglob("config.yaml"))
        # --dry-run and --report-only only read: they go on beside a running sweep.
        assert main([str(sweep), "--out", str(out), "--dry-run"]) == 0
        # (the fake trainer is $GPGAN_TRAIN_CMD: another install, which this one cannot check)
        assert "checked where they train ($GPGAN_TRAIN_CMD), not here" in capsys.readouterr().err
    finally:
        holder.release()
    assert main([str(sweep), "--out", str(out)]) == 0


def test_a_sweep_leaves_a_run_that_another_process_trains(tmp_path):
    """A stale or resumable run whose lock a trainer holds (one started by hand, or left by a
    killed sweep) is neither cleared nor resumed: it is reported as not run."""
    from gpgan.studies.runner import _clear_stale, _in_use
    from gpgan.train.run import RunFolder, RunInUseError

    run = tmp_path / "run"
    (run / "samples").mkdir(parents=True)
    (run / "config.yaml").write_text("x: 1\n")
    trainer = RunFolder(run)
    trainer.hold()
    assert f"is being trained by process {os.getpid()}" in _in_use(run)
    with pytest.raises(RunInUseError):
        _clear_stale(run)
    assert sorted(p.name for p in run.iterdir()) == [".lock", "config.yaml", "samples"]
    trainer.release()
    assert _in_use(run) is None
    _clear_stale(run)
    assert not run.exists()
