"""scripts/ab_mechanisms.py's pure parts: the run order, each arm's environment, the comparison, the
verdict rule and the table (no timing: the tool's timings are the lead's, on a quiet host)."""
import importlib.util
import os

import pytest

from gpgan.backend import mechanisms

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def ab():
    spec = importlib.util.spec_from_file_location("ab_mechanisms", os.path.join(ROOT, "scripts", "ab_mechanisms.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def row(ab, on, off, torch_on=None, torch_off=None, clean=True):
    """A comparison from per-run gpgan times (and PyTorch's, or None)."""
    torch_on = torch_on or [None] * len(on)
    torch_off = torch_off or [None] * len(off)
    return ab.compare([(g, t, clean) for g, t in zip(on, torch_on)], [(g, t, clean) for g, t in zip(off, torch_off)])


def test_every_mechanism_of_gpgan_and_every_process_switch_is_measured(ab):
    names = [m.name for m in ab.MECHANISMS]
    assert len(names) == len(set(names))
    assert set(mechanisms.MECHANISMS) <= set(names)
    assert {"numba", "onednn", "openblas_spin", "host_memory"} <= set(names)


def test_runs_alternate_in_abba_blocks(ab):
    assert ab.run_order(1) == ["A", "B"]
    assert ab.run_order(2) == ["A", "B", "B", "A"]
    assert ab.run_order(3) == ["A", "B", "B", "A", "A", "B"]
    assert ab.run_order(4) == ["A", "B", "B", "A"] * 2


def test_arm_b_differs_from_arm_a_by_the_switch_alone(ab):
    environ = {"PATH": "/bin", "GPGAN_NUMBA": "0", "OPENBLAS_THREAD_TIMEOUT": "20", "GPGAN_NUM_THREADS": "2"}
    fused = ab.BY_NAME["fused_linear"]
    a, b = ab.arm_environment(fused, "A", environ), ab.arm_environment(fused, "B", environ)
    assert a == {"PATH": "/bin", "GPGAN_NUM_THREADS": "2"}  # the study's switches are the tool's to set
    assert b == dict(a, GPGAN_BENCH_WITHOUT="fused_linear")
    copies = ab.BY_NAME["numba_conv_copies"]  # acts only without oneDNN: both arms without it
    assert ab.arm_environment(copies, "A", {})["GPGAN_ONEDNN"] == "0"
    assert ab.arm_environment(copies, "B", {}) == {"GPGAN_ONEDNN": "0", "GPGAN_BENCH_WITHOUT": "numba_conv_copies"}
    assert ab.arm_environment(ab.BY_NAME["numba"], "B", {}) == {"GPGAN_NUMBA": "0"}
    # mechanisms the caller turned off stay off in both arms
    kept = {"GPGAN_BENCH_WITHOUT": "split_passes"}
    assert ab.arm_environment(fused, "A", kept)["GPGAN_BENCH_WITHOUT"] == "split_passes"
    assert ab.arm_environment(fused, "B", kept)["GPGAN_BENCH_WITHOUT"] == "split_passes,fused_linear"
    base = {"GPGAN_NUMBA": "0", "GPGAN_ONEDNN": "0"}  # --base-env: both arms of every mechanism
    split = ab.BY_NAME["split_passes"]
    assert ab.arm_environment(split, "A", {}, base) == base
    assert ab.arm_environment(split, "B", {}, base) == dict(base, GPGAN_BENCH_WITHOUT="split_passes")


def test_mechanisms_built_on_one_another_go_off_together(ab):
    both = ab.combined(["product_runner", "bound_memory"])
    assert both.name == "product_runner+bound_memory" and both.needs == ("onednn",)
    assert ab.arm_environment(both, "B", {}) == {"GPGAN_BENCH_WITHOUT": "product_runner,bound_memory"}
    mixed = ab.combined(["numba_conv_copies", "numba"])
    assert ab.arm_environment(mixed, "A", {}) == {"GPGAN_ONEDNN": "0"}
    assert ab.arm_environment(mixed, "B", {}) == {"GPGAN_ONEDNN": "0", "GPGAN_NUMBA": "0",
                                                  "GPGAN_BENCH_WITHOUT": "numba_conv_copies"}
    assert ab.combined(["numba"]) is ab.BY_NAME["numba"]
    states = {"gpgan": os.path.join(ROOT, "gpgan"), "python": "python",
              "switches": {"numba": "0.68", "onednn": "2023.2", "mechanisms_off": ["product_runner"]}}
    assert "arm B ran with bound_memory on" in ab.check_arm(both, "B", states)
    args, _ = ab.parse_args(["--mechanisms", "product_runner+bound_memory,numba"])
    assert args.mechanisms == ["product_runner+bound_memory", "numba"]


def test_a_run_counts_its_clean_median_only_with_all_its_clean_steps(ab):
    summary = {"median_ms": 12.0, "clean_median_ms": 10.0, "clean_steps": 15}
    assert ab.step_ms(summary, 15) == (10.0, True)
    assert ab.step_ms(dict(summary, clean_steps=14), 15) == (12.0, False)
    assert ab.step_ms({"median_ms": 12.0}, 15) == (12.0, False)  # no /proc: no load measured
    report = {"workloads": {"r1": {"gpgan": summary, "torch": {"median_ms": 8.0, "clean_median_ms": 6.0,
                                                                "clean_steps": 3}}}}
    assert ab.run_times(report, "r1", 15) == (10.0, 8.0, False)


def test_gain_is_off_over_on_and_pairs_follow_the_run_order(ab):
    r = row(ab, on=[100.0, 104.0], off=[110.0, 112.0])
    assert r["on_ms"] == 102.0 and r["off_ms"] == 111.0
    assert r["gain"] == pytest.approx(111.0 / 102.0 - 1)
    assert r["pair_gains"] == pytest.approx([0.10, 112.0 / 104.0 - 1])
    assert (r["low"], r["high"]) == (min(r["pair_gains"]), max(r["pair_gains"]))
    assert r["basis"] == "gpgan ms" and r["ratio_on"] is None and r["clean"]


def test_with_pytorch_the_gain_comes_from_each_runs_ratio(ab):
    # The host slowed by 20% in the off runs: PyTorch's times show it, and the ratios cancel it.
    r = row(ab, on=[100.0, 100.0], off=[126.0, 126.0], torch_on=[100.0, 100.0], torch_off=[120.0, 120.0])
    assert r["basis"] == "ratio to PyTorch"
    assert r["gain"] == pytest.approx(0.05)
    assert (r["ratio_on"], r["ratio_off"]) == pytest.approx((1.0, 1.05))
    # a process-wide mechanism (the host memory policy) changes PyTorch's steps too: gpgan's times
    runs = ([(100.0, 100.0, True)], [(126.0, 120.0, True)])
    assert ab.compare(*runs, use_ratio=False)["gain"] == pytest.approx(0.26)
    assert ab.BY_NAME["host_memory"].process_wide and not ab.BY_NAME["fused_linear"].process_wide


def test_verdict_rule(ab):
    pays = row(ab, on=[100.0, 100.0], off=[106.0, 105.0])           # median gain 5.5%
    small = row(ab, on=[100.0, 100.0], off=[102.0, 101.0])          # under 5% in every pair
    noisy = row(ab, on=[100.0, 100.0], off=[97.0, 107.0])           # median 2%, one pair 7%
    exactly = row(ab, on=[100.0, 100.0], off=[105.0, 105.0])        # 5.0% reaches it
    assert ab.verdict([small, pays]) == "pays"  # on one workload is enough
    assert ab.verdict([exactly]) == "pays"
    assert ab.verdict([small, small]) == "goes"  # under the threshold on every workload
    assert ab.verdict([small, noisy]) == "unclear"
    assert ab.verdict([small], carries="thread safety") == "keep (goes on time)"
    assert ab.verdict([noisy], carries="thread safety") == "keep (unclear on time)"
    assert ab.verdict([pays], carries="thread safety") == "pays"
    assert ab.verdict([small], threshold=0.01) == "pays"
    loaded = row(ab, on=[100.0], off=[150.0], clean=False)
    assert ab.verdict([pays, loaded]) == "loaded"  # a run without all its clean steps decides nothing


def test_table_has_one_row_per_mechanism_and_workload(ab):
    rows = {"r1": row(ab, on=[100.0], off=[110.0]),
            "toy_r1": row(ab, on=[10.0], off=[10.1], torch_on=[10.0], torch_off=[10.0])}
    table = ab.format_table({"fused_linear": {"rows": rows, "verdict": "pays", "note": ""}})
    lines = table.splitlines()
    assert len(lines) == 4 and lines[0].startswith("| mechanism | workload | on ms | off ms | gain")
    assert lines[2] == "| fused_linear | r1 | 100.00 | 110.00 | +10.0% | +10.0%..+10.0% | gpgan ms | pays |"
    assert lines[3] == ("|  | toy_r1 | 10.00 | 10.10 | +1.0% | +1.0%..+1.0% | ratio to PyTorch, ratio 1.000 / 1.010 |  |")


def test_command_line_errors_name_what_is_accepted(ab, capsys):
    with pytest.raises(SystemExit):
        ab.parse_args(["--mechanisms", "fused_linera"])
    assert "unknown fused_linera; accepted: all, numba" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        ab.parse_args(["--carries", "nope=why"])
    assert "--carries: unknown mechanism 'nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        ab.parse_args(["--base-env", "GPGAN_NUMBA"])
    assert "--base-env: 'GPGAN_NUMBA' is not NAME=VALUE" in capsys.readouterr().err
    args, _ = ab.parse_args(["--mechanisms", "product_runner", "--carries", "product_runner=thread safety",
                             "--base-env", "GPGAN_NUM_THREADS=1"])
    assert args.mechanisms == ["product_runner"] and args.carries == {"product_runner": "thread safety"}
    assert args.base_env == {"GPGAN_NUM_THREADS": "1"}


def test_a_run_that_does_not_measure_the_mechanism_is_refused(ab):
    gpgan_dir = os.path.join(ROOT, "gpgan")
    states = {"numba": "0.68", "onednn": "2023.2", "blas_idles_briefly": True, "host_memory_kept": True,
              "mechanisms_off": []}

    def report(**changes):
        return {"gpgan": gpgan_dir, "python": "python", "switches": dict(states, **changes)}

    assert ab.check_arm(ab.BY_NAME["fused_linear"], "A", report()) is None
    assert "without onednn" in ab.check_arm(ab.BY_NAME["fused_linear"], "A", report(onednn=None))
    assert "with fused_linear on" in ab.check_arm(ab.BY_NAME["fused_linear"], "B", report())
    assert ab.check_arm(ab.BY_NAME["fused_linear"], "B", report(mechanisms_off=["fused_linear"])) is None
    assert "arm B ran with numba on" in ab.check_arm(ab.BY_NAME["numba"], "B", report())
    assert ab.check_arm(ab.BY_NAME["openblas_spin"], "B", report(blas_idles_briefly=False)) is None
    assert "not this checkout" in ab.check_arm(ab.BY_NAME["host_memory"], "A", dict(report(), gpgan="/elsewhere"))


def test_dry_run_prints_each_runs_environment_and_command(ab, capsys):
    assert ab.main(["--dry-run", "--mechanisms", "fused_linear", "--workloads", "toy_r1", "--steps", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["fused_linear A", "fused_linear B", "fused_linear B",
                                                      "fused_linear A"]
    assert "GPGAN_BENCH_WITHOUT=fused_linear" in lines[1] and "GPGAN_BENCH_WITHOUT" not in lines[0]
    assert "bench_engine.py --device cpu --workloads toy_r1 --steps 2" in lines[0]
