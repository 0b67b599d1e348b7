#!/usr/bin/env python3
"""Does each CPU speed mechanism pay? Time bench_engine's steps with it on (A) and off (B).

Issue 39: a mechanism that gains less than about 5% on every benchmark step goes, unless it
carries correctness. For each mechanism (``--mechanisms``, default all; ``--list`` shows them),
this runs ``scripts/bench_engine.py`` in fresh processes, ``--repeats`` times each arm, in ABBA
order (A B B A A B B A ...), so that a host getting slower or faster hits both arms alike. Arm B
differs from arm A by the mechanism's switch alone: its own variable where it has one
(``GPGAN_NUMBA``, ``GPGAN_ONEDNN``, ``GPGAN_KEEP_HOST_MEMORY``, ``OPENBLAS_THREAD_TIMEOUT``), else
``GPGAN_BENCH_WITHOUT`` (:mod:`gpgan.backend.mechanisms`). A mechanism that acts only where another
is off (gpgan's compiled im2col / col2im, where oneDNN does not run) is measured with that one off
in both arms, and the table says so; ``--base-env`` sets more in both arms of every mechanism (to
measure, say, the Python-thread passes as an install without Numba and oneDNN runs them), and
``a+b`` in ``--mechanisms`` turns a and b off together (one built on the other, as the compiled
product call on the bound memory objects: ``product_runner+bound_memory``).

With ``--torch`` each run also times PyTorch's step, interleaved with gpgan's in the same
process (bench_engine's turns), and the gains are taken from the ratio gpgan / PyTorch of each
run, which cancels most of the host's drift between runs (not for the kept host memory, a policy of
the whole process that PyTorch's steps share); ``--python`` runs the benchmarks with
another interpreter (a venv with PyTorch), with gpgan from this checkout and, where that
interpreter lacks them, Numba and oneDNN from this interpreter's site-packages (appended after its
own, ``--no-host-site`` to leave them out). A run whose arm A lacks the library its mechanism needs
is an error, not a result.

Load: each run uses bench_engine's clean steps (``--budget``: it keeps sampling until it has
``--steps`` steps during which other processes used under 5% of the cores) and its median of them
where it got them all; before each run this waits, up to ``--max-wait`` seconds, for a second in
which other processes used under ``--quiet-load`` of the cores (bench_engine's measure).

Per workload and mechanism: the step's ms with the mechanism on and off (the median over the
arm's runs of each run's median), the gain ``off / on - 1`` (how much faster the step is with it),
and the spread: the lowest and highest gain of the ABBA pairs (run k of A with run k of B).
Verdict (``--threshold``, default 0.05):

  pays     the median gain reaches the threshold on at least one workload;
  goes     no pair's gain reaches it on any workload (under about 5% on every step);
  unclear  neither: a median under the threshold with some pair above it (rerun with more
           ``--repeats``, or on a quieter host);
  keep     would go or is unclear, but the mechanism carries correctness (``--carries``);
  loaded   some run did not get its ``--steps`` clean steps within ``--budget``: no verdict.

    python scripts/ab_mechanisms.py --list
    python scripts/ab_mechanisms.py --mechanisms fused_linear,product_runner --workloads toy_r1 --steps 2 --repeats 1
    python scripts/ab_mechanisms.py --python /work/compare-venv/bin/python --torch --json ab.json
"""
import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import namedtuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BENCH = os.path.join(HERE, "bench_engine.py")
sys.path.insert(0, ROOT)

from gpgan.backend import mechanisms as switches  # noqa: E402  (the standard library only)
from gpgan.cli._args import Parser  # noqa: E402

#: ``off``: the environment of arm B; ``base``: of both arms; ``needs``: the library arm A must have
#: run ("numba", "onednn" or None); ``carries``: the correctness it carries ("" for none found);
#: ``process_wide``: it changes PyTorch's steps too (same process), so the gain comes from gpgan's
#: times even with ``--torch``.
Mechanism = namedtuple("Mechanism", "name off base needs carries what process_wide", defaults=(False,))

_NEEDS = {"onednn_products": "onednn", "onednn_convolutions": "onednn", "fused_linear": "onednn",
          "fused_addend": "onednn", "product_runner": "onednn", "bound_memory": "onednn", "numba_passes": "numba",
          "numba_threads": "numba", "layout_copy": "numba", "numba_batch_norm": "numba",
          "numba_conv_copies": "numba"}
_BASE = {"numba_conv_copies": {"GPGAN_ONEDNN": "0"}}

MECHANISMS = [
    Mechanism("numba", {"GPGAN_NUMBA": "0"}, {}, "numba", "",
              "every Numba kernel (the compiled passes, batch norm, im2col / col2im, the compiled product call)"),
    Mechanism("onednn", {"GPGAN_ONEDNN": "0"}, {}, "onednn", "",
              "oneDNN's convolutions and products (and the 2**4-cycle OpenBLAS spin that comes with it)"),
    Mechanism("openblas_spin", {"OPENBLAS_THREAD_TIMEOUT": "28"}, {}, None, "",
              "OpenBLAS's workers idle briefly after a GEMM (2**4 or 2**20 cycles; off: its default 2**28)"),
    Mechanism("host_memory", {"GPGAN_KEEP_HOST_MEMORY": "0"}, {}, None, "",
              "freed host memory kept for the next step (glibc mallopt)", True),
] + [Mechanism(name, {switches.ENV: name}, _BASE.get(name, {}), _NEEDS.get(name), "", entry[0])
     for name, entry in switches.MECHANISMS.items()]
BY_NAME = {m.name: m for m in MECHANISMS}
#: What bench_engine's report (``switches``) says in arm B of the mechanisms with a switch of their own.
_OFF_STATE = {"numba": ("numba", None), "onednn": ("onednn", None), "host_memory": ("host_memory_kept", False),
              "openblas_spin": ("blas_idles_briefly", False)}
DEFAULT_WORKLOADS = ("r1", "wgangp", "generator", "toy_r1")


def combined(names):
    """The mechanism ``a+b+...``: arm B turns all of them off (for mechanisms built on one another,
    as the compiled product call on the bound memory objects); a single name is itself."""
    parts = [BY_NAME[n] for n in names]
    if len(parts) == 1:
        return parts[0]
    off, base = {}, {}
    for m in parts:
        base.update(m.base)
        for key, value in m.off.items():
            off[key] = ",".join(v for v in (off.get(key), value) if v) if key == switches.ENV else value
    needs = tuple(dict.fromkeys(m.needs for m in parts if m.needs))
    return Mechanism("+".join(names), off, base, needs, "", "; ".join(m.what for m in parts),
                     any(m.process_wide for m in parts))


# -- pure parts (tests/test_ab_mechanisms.py) --------------------------------------------------------
def run_order(repeats):
    """The arms' order for ``repeats`` runs of each: A B B A, A B B A, ... (ABBA blocks, cut short
    for an odd count: A B)."""
    pattern = []
    while len(pattern) < 2 * repeats:
        pattern += ["A", "B", "B", "A"]
    return pattern[:2 * repeats] if repeats % 2 == 0 else pattern[:2 * repeats - 2] + ["A", "B"]


def arm_environment(mechanism, arm, environ, base=None):
    """The environment of ``arm`` ("A" on, "B" off) for ``mechanism``: ``environ`` without any
    switch the study sets, then ``base`` (``--base-env``, both arms of every mechanism), the
    mechanism's own base and, for B, its switch. A ``GPGAN_BENCH_WITHOUT`` of ``environ`` or
    ``base`` is kept (the mechanisms it names are off in both arms) and added to in arm B."""
    env = {k: v for k, v in environ.items() if k not in ("GPGAN_NUMBA", "GPGAN_ONEDNN", "GPGAN_KEEP_HOST_MEMORY",
                                                          "OPENBLAS_THREAD_TIMEOUT", "GPGAN_PROCESS_CONFIGURED")}
    env.update(base or {})
    env.update(mechanism.base)
    if arm == "B":
        for key, value in mechanism.off.items():
            earlier = env.get(key, "") if key == switches.ENV else ""
            env[key] = ",".join(n for n in (earlier, value) if n)
    return env


def step_ms(summary, steps):
    """A run's ms per step of one engine: the median of its clean steps where it got ``steps`` of
    them, else the median of all (bench_engine's summary)."""
    if summary.get("clean_steps", 0) >= steps and "clean_median_ms" in summary:
        return summary["clean_median_ms"], True
    return summary["median_ms"], False


def run_times(report, workload, steps):
    """``(gpgan ms, torch ms or None, clean)`` of one workload in one bench_engine report."""
    entry = report["workloads"][workload]
    g, g_clean = step_ms(entry["gpgan"], steps)
    if "torch" not in entry:
        return g, None, g_clean
    t, t_clean = step_ms(entry["torch"], steps)
    return g, t, g_clean and t_clean


def compare(on_runs, off_runs, use_ratio=True):
    """One workload's A/B comparison from the arms' runs, each ``(gpgan ms, torch ms or None,
    clean)``, in run order. Where every run has PyTorch's time (and ``use_ratio``), the gains come
    from the ratios gpgan / PyTorch (each run's own), else from gpgan's times. Returns a dict: ``on_ms``,
    ``off_ms`` (medians over the runs), ``gain`` (``off / on - 1`` of the medians of what the
    gains come from), ``pair_gains`` (run k of A against run k of B), ``low``/``high`` (their
    extremes), ``basis`` ("ratio to PyTorch" or "gpgan ms"), ``ratio_on``/``ratio_off`` (or None),
    ``clean`` (every run's steps were clean)."""
    with_torch = use_ratio and all(r[1] for r in on_runs + off_runs)
    value = (lambda r: r[0] / r[1]) if with_torch else (lambda r: r[0])
    on_v, off_v = [value(r) for r in on_runs], [value(r) for r in off_runs]
    pairs = [b / a - 1 for a, b in zip(on_v, off_v)]
    out = {"on_ms": statistics.median(r[0] for r in on_runs), "off_ms": statistics.median(r[0] for r in off_runs),
           "gain": statistics.median(off_v) / statistics.median(on_v) - 1, "pair_gains": pairs,
           "low": min(pairs), "high": max(pairs), "basis": "ratio to PyTorch" if with_torch else "gpgan ms",
           "ratio_on": statistics.median(on_v) if with_torch else None,
           "ratio_off": statistics.median(off_v) if with_torch else None,
           "clean": all(r[2] for r in on_runs + off_runs)}
    return out


def verdict(rows, threshold=0.05, carries=""):
    """The verdict on one mechanism from its per-workload comparisons (:func:`compare`'s dicts): see
    the module docstring. Runs with steps that were not all clean give none ("loaded")."""
    if not all(r["clean"] for r in rows):
        return "loaded"
    if any(r["gain"] >= threshold for r in rows):
        return "pays"
    plain = "goes" if all(r["high"] < threshold for r in rows) else "unclear"
    return f"keep ({plain} on time)" if carries else plain


def format_table(results, threshold=0.05):
    """The results (mechanism name -> {"rows": {workload: compare dict}, "verdict", "note"}) as a
    Markdown table: one row per mechanism and workload, the verdict on each mechanism's first."""
    lines = [f"| mechanism | workload | on ms | off ms | gain | pairs (low..high) | basis | verdict (>= {threshold:.0%}) |",
             "|---|---|---|---|---|---|---|---|"]
    for name, result in results.items():
        for k, (workload, r) in enumerate(result["rows"].items()):
            ratio = f", ratio {r['ratio_on']:.3f} / {r['ratio_off']:.3f}" if r["ratio_on"] is not None else ""
            flag = "" if r["clean"] else " (not all clean)"
            lines.append(f"| {name if k == 0 else ''} | {workload} | {r['on_ms']:.2f} | {r['off_ms']:.2f} | "
                         f"{r['gain']:+.1%} | {r['low']:+.1%}..{r['high']:+.1%} | {r['basis']}{ratio}{flag} | "
                         f"{(result['verdict'] + result.get('note', '')) if k == 0 else ''} |")
    return "\n".join(lines)


# -- running ----------------------------------------------------------------------------------------
def _bench_module():
    spec = importlib.util.spec_from_file_location("bench_engine", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def wait_for_quiet(bench, quiet_load, max_wait, probe_s=1.0):
    """Wait until other processes use under ``quiet_load`` of the cores for ``probe_s`` (measured as
    bench_engine measures its steps), or ``max_wait`` seconds; returns the last load seen."""
    deadline = time.monotonic() + max_wait
    while True:
        before, t0 = bench._jiffies(), time.perf_counter()
        time.sleep(probe_s)
        load = bench.foreign_load(before, bench._jiffies(), (time.perf_counter() - t0) * 1e3)
        if load is None or load < quiet_load or time.monotonic() >= deadline:
            return load


def host_sites():
    """The site-packages folders of this interpreter that hold Numba and oneDNN (for ``--python``)."""
    sites = []
    try:
        import numba

        sites.append(os.path.dirname(os.path.dirname(os.path.abspath(numba.__file__))))
    except ImportError:
        pass
    try:
        import importlib.metadata

        sites.append(str(importlib.metadata.distribution("onednn-cpu-gomp").locate_file("")))
    except importlib.metadata.PackageNotFoundError:
        pass
    return list(dict.fromkeys(os.path.abspath(s) for s in sites))


def bench_command(args, json_path, sites):
    """The bench_engine command line of one run."""
    options = ["--device", "cpu", "--workloads", ",".join(args.workloads), "--steps", str(args.steps),
               "--warmup", str(args.warmup), "--turn", str(args.turn), "--budget", str(args.budget),
               "--no-memory", "--no-overhead", "--json", json_path] + (["--torch"] if args.torch else [])
    if not sites:
        return [args.python, BENCH] + options
    # Another interpreter: its own packages first, then this one's Numba and oneDNN (site.addsitedir
    # appends). The code travels in the command line, so bench_engine's restart (configure_process,
    # os.execv of the same command line) runs it again.
    boot = ("import runpy, site, sys; [site.addsitedir(s) for s in %r]; sys.argv = sys.argv[1:]; "
            "runpy.run_path(sys.argv[0], run_name='__main__')" % (sites,))
    return [args.python, "-c", boot, BENCH] + options


def check_arm(mechanism, arm, report):
    """None, or why this run does not measure ``mechanism`` (its library missing in arm A, the
    switch not taking effect in arm B, another gpgan imported)."""
    states = report["switches"]
    if os.path.realpath(report.get("gpgan", ROOT)) != os.path.realpath(os.path.join(ROOT, "gpgan")):
        return f"the run imported gpgan from {report.get('gpgan')}, not this checkout"
    needs = mechanism.needs if isinstance(mechanism.needs, tuple) else (mechanism.needs,)
    for library in filter(None, needs):
        if arm == "A" and not states.get(library):
            return f"arm A ran without {library} (not installed for {report['python']}?)"
    parts = mechanism.name.split("+")
    off = set(states.get("mechanisms_off", []))
    for name in parts:
        if arm == "B" and name in _OFF_STATE and states.get(_OFF_STATE[name][0]) != _OFF_STATE[name][1]:
            return f"arm B ran with {name} on ({_OFF_STATE[name][0]}: {states.get(_OFF_STATE[name][0])})"
        if arm == "B" and name in switches.MECHANISMS and name not in off:
            return f"arm B ran with {name} on"
        if arm == "A" and name in off:
            return f"arm A ran with {name} off"
    return None


def run_once(args, mechanism, arm, sites, bench):
    """One bench_engine run of ``arm``; returns its report (the CPU device's)."""
    load = wait_for_quiet(bench, args.quiet_load, args.max_wait) if args.max_wait > 0 else None
    with tempfile.TemporaryDirectory(prefix="ab_mechanisms_") as tmp:
        path = os.path.join(tmp, "run.json")
        env = arm_environment(mechanism, arm, os.environ, args.base_env)
        env["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in [env.get("PYTHONPATH")] if p])
        result = subprocess.run(bench_command(args, path, sites), env=env, capture_output=True, text=True,
                                check=False)
        if result.returncode:
            raise RuntimeError(f"{mechanism.name} arm {arm}: bench_engine failed: "
                               + " | ".join(result.stderr.strip().splitlines()[-3:]))
        with open(path, encoding="utf-8") as f:
            report = [r for r in json.load(f) if r["device"] == "cpu"][0]
    problem = check_arm(mechanism, arm, report)
    if problem:
        raise RuntimeError(f"{mechanism.name}: {problem}")
    report["load_before"] = load
    return report


def measure(args, mechanism, sites, bench, log):
    """Every run of one mechanism, then its comparison per workload and its verdict."""
    runs = {"A": [], "B": []}
    for k, arm in enumerate(run_order(args.repeats)):
        t0 = time.perf_counter()
        report = run_once(args, mechanism, arm, sites, bench)
        runs[arm].append(report)
        times = ", ".join(f"{w} {run_times(report, w, args.steps)[0]:.1f}" for w in args.workloads)
        log(f"  {mechanism.name} {k + 1}/{2 * args.repeats} {arm} ({'on' if arm == 'A' else 'off'}): {times} ms "
            f"({time.perf_counter() - t0:.0f} s)")
    rows = {w: compare([run_times(r, w, args.steps) for r in runs["A"]],
                       [run_times(r, w, args.steps) for r in runs["B"]], not mechanism.process_wide)
            for w in args.workloads}
    carries = args.carries.get(mechanism.name, mechanism.carries) or ", ".join(
        args.carries[n] for n in mechanism.name.split("+") if n in args.carries)
    both = dict(args.base_env, **mechanism.base)
    note = f" (both arms with {', '.join(f'{k}={v}' for k, v in both.items())})" if both else ""
    return {"what": mechanism.what, "off": mechanism.off, "base": both, "carries": carries,
            "rows": rows, "verdict": verdict(list(rows.values()), args.threshold, carries), "note": note,
            "runs": {arm: [{"switches": r["switches"], "load_before": r["load_before"], "machine": r["machine"],
                            "torch": r.get("torch"),
                            "workloads": {w: {e: {k: v for k, v in r["workloads"][w][e].items()
                                                  if k not in ("times_ms", "foreign_load")}
                                              for e in ("gpgan", "torch") if e in r["workloads"][w]}
                                          for w in args.workloads}}
                           for r in rs] for arm, rs in runs.items()}}


def parse_args(argv):
    parser = Parser(description=__doc__.split("\n")[0],
                    formatter_class=argparse.RawDescriptionHelpFormatter,
                    epilog=__doc__.split("\n", 2)[2])
    parser.add_argument("--mechanisms", default="all",
                        help="comma-separated (default: all; --list names them); a+b turns a and b off together")
    parser.add_argument("--list", action="store_true", help="list the mechanisms and their switches, and exit")
    parser.add_argument("--workloads", default=",".join(DEFAULT_WORKLOADS),
                        help="bench_engine's workloads (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each arm, in ABBA order (default 2)")
    parser.add_argument("--steps", type=int, default=15, help="bench_engine --steps (default 15)")
    parser.add_argument("--warmup", type=int, default=2, help="bench_engine --warmup (default 2)")
    parser.add_argument("--turn", type=int, default=4, help="bench_engine --turn (default 4)")
    parser.add_argument("--budget", type=float, default=120.0, metavar="SECONDS",
                        help="bench_engine --budget: sample until --steps clean steps, up to this (default 120)")
    parser.add_argument("--torch", action="store_true", help="time PyTorch in each run too; gains from the ratios")
    parser.add_argument("--python", default=sys.executable,
                        help="the interpreter of the runs (a venv with PyTorch for --torch); default this one")
    parser.add_argument("--no-host-site", action="store_true",
                        help="with --python: do not add this interpreter's Numba and oneDNN site-packages")
    parser.add_argument("--base-env", default="", metavar="NAME=VALUE,...",
                        help="set in both arms of every mechanism, e.g. GPGAN_NUMBA=0,GPGAN_ONEDNN=0 to measure "
                             "split_passes as a plain install runs it")
    parser.add_argument("--threshold", type=float, default=0.05, help="the gain a mechanism must reach (0.05)")
    parser.add_argument("--carries", default="", metavar="NAME=WHY,...",
                        help="mechanisms that carry correctness (kept whatever they gain), e.g. "
                             "product_runner='thread safety'")
    parser.add_argument("--quiet-load", type=float, default=0.1,
                        help="before each run, wait for a second with other processes under this share of the "
                             "cores (default 0.1)")
    parser.add_argument("--max-wait", type=float, default=60.0, metavar="SECONDS",
                        help="the longest such wait (default 60; 0: no wait)")
    parser.add_argument("--json", metavar="FILE", help="write the results (and each run's summary) as JSON")
    parser.add_argument("--dry-run", action="store_true", help="print each run's environment and command, run none")
    args = parser.parse_args(argv)
    if args.list:
        return args, parser
    names = list(BY_NAME) if args.mechanisms.strip() == "all" else [n.strip() for n in args.mechanisms.split(",")
                                                                      if n.strip()]
    unknown = [n for n in names if any(part not in BY_NAME for part in n.split("+"))]
    if unknown or not names:
        parser.error(f"--mechanisms: unknown {', '.join(unknown) or '(none given)'}; accepted: all, "
                     f"{', '.join(BY_NAME)}")
    args.mechanisms = names
    args.workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    if args.repeats < 1 or args.steps < 1:
        parser.error("--repeats and --steps must be at least 1")
    carries = {}
    for item in filter(None, (i.strip() for i in args.carries.split(","))):
        name, _, why = item.partition("=")
        if name not in BY_NAME:
            parser.error(f"--carries: unknown mechanism {name!r}; accepted: {', '.join(BY_NAME)}")
        carries[name] = why or "correctness"
    args.carries = carries
    base = {}
    for item in filter(None, (i.strip() for i in args.base_env.split(","))):
        name, eq, value = item.partition("=")
        if not eq or not name:
            parser.error(f"--base-env: {item!r} is not NAME=VALUE")
        base[name] = value
    args.base_env = base
    return args, parser


def main(argv=None):
    args, parser = parse_args(argv)
    if args.list:
        for m in MECHANISMS:
            base = f"; both arms {m.base}" if m.base else ""
            print(f"{m.name:20s} off: {' '.join(f'{k}={v}' for k, v in m.off.items())}{base}\n{'':20s} {m.what}")
        return 0
    other = os.path.abspath(args.python) != os.path.abspath(sys.executable)  # a venv's python links to its base
    sites = host_sites() if other and not args.no_host_site else []
    log = (lambda text: print(text, file=sys.stderr, flush=True))
    if args.dry_run:
        for name in args.mechanisms:
            for arm in run_order(args.repeats):
                env = arm_environment(combined(name.split("+")), arm, {}, args.base_env)
                print(f"{name} {arm}: {' '.join(f'{k}={v}' for k, v in env.items())} "
                      f"{' '.join(bench_command(args, 'RUN.json', sites))}")
        return 0
    bench = _bench_module()
    unknown = [w for w in args.workloads if w not in bench.WORKLOADS]
    if unknown or not args.workloads:
        parser.error(f"--workloads: unknown {', '.join(unknown) or '(none given)'}; accepted: "
                     f"{', '.join(bench.WORKLOADS)}")
    results, failures = {}, {}
    start = time.perf_counter()
    for name in args.mechanisms:
        try:
            results[name] = measure(args, combined(name.split("+")), sites, bench, log)
        except RuntimeError as exc:
            failures[name] = str(exc)
            log(f"  {exc}")
    print(format_table(results, args.threshold))
    for name, why in failures.items():
        print(f"not measured: {why}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"command": sys.argv, "python": args.python, "sites": sites, "threshold": args.threshold,
                       "repeats": args.repeats, "steps": args.steps, "workloads": args.workloads,
                       "torch": args.torch, "wall_s": time.perf_counter() - start, "results": results,
                       "failures": failures}, f, indent=1)
            f.write("\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
